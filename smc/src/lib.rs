//! # smc: small-message multicast
//!
//! Atomic multicast within one subgroup and one fixed membership, over sst tables
//! (Spindle §2.3 and §3). Each sender owns a ring of `window` slots in its row; the
//! receivers poll the rings, acknowledge what they have in `received`, and deliver
//! a message once every member has it, in round-robin order over the senders. Nulls
//! keep the round robin moving when a sender falls behind.
//!
//! - [`spec`]: a subgroup's members, senders, window, message size, mode, and row layout;
//! - [`core`]: the sans-IO state machine of one node in one subgroup;
//! - [`message`]: delivered messages, read in place;
//! - [`runtime`]: the driver: a node's subgroups on its predicate thread, blocking sends;
//! - [`stats`]: counters and batch sizes;
//! - `sim` (cargo feature `sim`, for tests; not in the product's builds): the
//!   deterministic simulator and its invariants.
//!
//! Invariants (checked by the unit tests and the simulator): every member delivers
//! the same sequence; nothing is delivered before every member received it; no gaps or
//! duplicates; nulls stop when sends stop; a slot is never reused before every member
//! delivered what it held.
#![forbid(unsafe_code)]

pub mod core;
pub mod message;
#[cfg(not(loom))]
pub mod runtime;
#[cfg(all(not(loom), any(test, feature = "sim")))]
pub mod sim;
pub mod spec;
pub mod stats;

#[cfg(any(test, loom))]
pub use crate::core::Faults;
pub use crate::core::{CutError, Deliverable, Reservation, SendError, SmcCore};
pub use message::{Batch, Message, MsgRef};
pub use spec::{Mode, SmcLayout, SubgroupSpec, MAX_MSG, MAX_WINDOW};
pub use stats::{BatchSizes, Stats};
