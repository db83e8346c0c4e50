#![doc = include_str!("../README.md")]
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
