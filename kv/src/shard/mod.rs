//! Sharding: the key space split over several shards, each a Tailwind log with
//! its store, and key ranges moved between shards while both serve.
//!
//! The design follows three of the papers the project builds on: the shards'
//! logs stand in for a store's write-ahead log (Cyclone); a range moves by
//! handing its ownership to the new shard first, which serves it at once and
//! pulls its records from the old one in batches (reading keys not pulled yet
//! from it on demand), while the old
//! shard keeps the records until the new one has logged them (Rocksteady); and
//! the shard map is versioned by the group's view, so a member checks ownership
//! against the map it holds, answering "moved" to a client whose map is older
//! (Shadowfax).
//!
//! This module holds the parts that decide, with no I/O, so that members and
//! the simulator run the same rules:
//!
//! - [`map`]: the shard map, a view's layout document, and its edits.
//! - [`layout`]: the group layout (a subgroup per shard's log, primaries spread
//!   by rendezvous hashing) that carries the map.
//! - [`rules`]: what a member serves, when the old owner may hand a range over,
//!   and how records apply to a shard's store.
//! - [`puller`]: the new owner's side of a migration.
//! - `sim` (feature `sim`): the seeded simulator of clients, shards, view
//!   changes, failed primaries and migrations, with one invariant per file
//!   (`kv/tests/shard_sim.rs` runs it over many seeds).
//!
//! Not built yet: the members that run these rules over real logs (one group
//! with a Tailwind log per shard, the fjall store applying the sharded records,
//! routing clients) and the operator's commands. A store today is one log
//! ([`crate::Store`]).

pub mod client;
pub mod host;
pub mod layout;
pub mod map;
pub mod puller;
pub mod rules;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod wire;

pub use map::{key_hash, MapEdit, MapError, Migration, Range, Shard, ShardMap};
