#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

#[cfg(not(loom))]
pub mod heartbeat;
#[cfg(not(loom))]
pub mod predicate;
#[cfg(not(loom))]
pub mod spin;

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
// recv without blocking, sendmsg, ppoll and eventfd for the tcp paths and the doorbell.
#[cfg(not(loom))]
#[allow(unsafe_code)]
pub(crate) mod sys;
pub mod table;
pub mod transport;
pub(crate) mod words;

pub use region::Region;
pub use table::{Bytes, Counter, CounterVec, Flag, Guarded, LayoutBuilder, LocalRow, Push, Pushes, RowArea, Table};
pub use transport::{NodeId, PeerEvent, RegionId, RegionSpec, Transport, WriteOp};
