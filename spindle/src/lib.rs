#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

/// The shared state table: monotonic rows replicated by one-sided writes, and the
/// transports (`mem`, `shm`, `tcp`, `rdma`) under everything else.
pub use spindle_sst as sst;

/// Small-message atomic multicast over the shared state table.
pub use spindle_smc as smc;

/// The Group runtime: membership, failure detection, view changes, joins with state
/// transfer, discovery, clients. Start here for raw totally ordered multicast.
pub use spindle_views as views;

/// Tailwind log replication, hosted as a group service.
pub use spindle_tailwind as tailwind;

/// Topics in the style of OMG DDS: participants, readers and writers with QoS,
/// keyed instances, logged topics, clients. Start here for publish/subscribe.
pub use spindle_dds as dds;

/// The replicated key-value store on a Tailwind log (feature `kv`, on by default).
#[cfg(feature = "kv")]
pub use spindle_kv as kv;
