//! # sst: the shared state table
//!
//! The bottom layer of spindle. An SST has one row per member and one column per state
//! variable; every member holds a copy of all rows, writes only its own, and pushes
//! byte ranges of it to peers with one-sided writes (Spindle §2.2). Reading a peer's
//! state is a local memory read. One predicate thread per node evaluates predicates
//! over the table and posts the pushes its triggers return (Spindle §2.4).
//!
//! ```text
//!            application threads
//!                 │ with_state / notify
//!   ┌─────────────▼──────────────┐   pushes (posted after the lock is released)
//!   │ predicate thread           │──────────────────────────┐
//!   │  predicates → triggers     │                          ▼
//!   └─────────────▲──────────────┘            Transport::post_write / flush
//!       doorbell  │  (peer write landed,        mem │ shm │ tcp
//!                 │   local send queued)            ▼
//!   ┌─────────────┴──────────────┐          peer's Region (same offsets)
//!   │ Region: Table rows (atomic │◀── peers' one-sided writes land here
//!   │ words), LocalRow = own row │
//!   └────────────────────────────┘
//! ```
//!
//! ## Invariants
//! - Columns are monotonic, enforced by type: [`table::LocalRow::advance`] refuses to
//!   go back; only the owner holds its row's [`table::LocalRow`].
//! - Region memory is only accessed as atomic words ([`region`]): no byte slice is
//!   ever formed over memory that peers write.
//! - Every transport applies a node's writes to a peer in posting order, each wholly
//!   visible before the next ([`transport`]); data and its guard go in separate writes.
//! - On `mem`/`shm`, a shared table ([`table::Table::create_shared`]) reads peers'
//!   rows in place and publishes each push once ([`publish`]); a peer cut off is read
//!   from a snapshot from then on. The ordering guarantee is the same.
//! - All atomics come from [`sync`], so `--cfg loom` model-checks the real code.
//!
//! ## Threads per node
//! | transport | threads |
//! |---|---|
//! | `mem`, `shm` | 1: the predicate thread (peers write straight into our memory) |
//! | `tcp` | 1 + one blocking receiver per peer (they never spin; they ring the doorbell) |
//!
//! Only the predicate thread ever spins, within its spin budget
//! ([`predicate::PollConfig::spin`]); then it parks on its [`doorbell::Doorbell`].
//!
//! Linux only: the doorbell is a futex and `shm` lives in `/dev/shm`.
//!
//! `unsafe` is denied crate-wide and allowed only in [`region`], [`doorbell`], and
//! the transports that map or register memory (`shm`, `rdma`'s device code, and the
//! direct writes they share); every block carries a `// SAFETY:` comment.
#![deny(unsafe_code)]

#[cfg(not(loom))]
pub mod heartbeat;
#[cfg(not(loom))]
pub mod predicate;

// `unsafe` is denied everywhere but in the modules below that say why they need it.
// The futex system calls.
#[allow(unsafe_code)]
pub mod doorbell;
pub mod hash;
pub mod publish;
// Atomic word access to memory that peers write (the one place that forms pointers
// into regions).
#[allow(unsafe_code)]
pub mod region;
pub mod sync;
pub mod table;
pub mod transport;

pub use region::Region;
pub use table::{Bytes, Counter, CounterVec, Flag, Guarded, LayoutBuilder, LocalRow, Push, Pushes, Table};
pub use transport::{NodeId, PeerEvent, RegionId, RegionSpec, Transport, WriteOp};
