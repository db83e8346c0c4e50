//! Sharding: the key space split over several shards, each a Tailwind log with
//! its store, and key ranges moved between shards while both serve.
//!
//! - [`map`]: the shard map, a view's layout document (its version is the view's
//!   number), and its edits.

pub mod map;

pub use map::{key_hash, MapEdit, MapError, Migration, Range, Shard, ShardMap};
