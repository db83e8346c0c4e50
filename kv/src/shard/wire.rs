//! The sharded store's messages: a client's requests to a shard's primary, and
//! the members' requests to each other during a migration. Each starts with
//! [`VERSION`]; anything else is answered as malformed.

use super::map::Migration;
use crate::update::Writer;
use crate::Pair;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// The version byte every message starts with (the store of one log's are
/// [`crate::remote::VERSION`]: neither takes the other's messages).
pub const VERSION: u8 = 0x22;
/// The members' requests to each other (the group's service number).
pub const SERVICE: spindle_views::group::Service = spindle_views::group::Service(4);

/// A client's operation on one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Set the key (`None`: remove it), as request `by`.
    Write {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Option<Vec<u8>>,
        /// The client's request.
        by: (u64, u64),
    },
    /// Read the key.
    Get {
        /// The key.
        key: Vec<u8>,
    },
}

impl Op {
    /// The key it is on.
    pub fn key(&self) -> &[u8] {
        match self {
            Op::Write { key, .. } | Op::Get { key } => key,
        }
    }

    /// The writer of a write.
    pub fn writer(&self) -> Option<Writer> {
        match self {
            Op::Write { by, .. } => Some(Writer { client: by.0, seq: by.1 }),
            Op::Get { .. } => None,
        }
    }
}

/// Where to send each shard's requests: the map and each shard's primary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// The map's version.
    pub version: u64,
    /// The map ([`super::ShardMap::encode`]).
    pub map: Vec<u8>,
    /// Each shard's primary and its control address, where known.
    pub primaries: Vec<Option<(u32, SocketAddr)>>,
}

/// A client's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// An operation, routed with the map of version `version`.
    Op {
        /// The client's map version.
        version: u64,
        /// The operation.
        op: Op,
    },
    /// The route table.
    Route,
    /// What the member says of the store.
    Status,
    /// The keys of shard `shard` starting with `prefix`, in key order, at most
    /// `limit`, read at its primary.
    Scan {
        /// The shard.
        shard: u16,
        /// The prefix.
        prefix: Vec<u8>,
        /// The most pairs.
        limit: u32,
    },
    /// Move the hashes `first..=last` (owned by one shard now) to shard `to`.
    Migrate {
        /// The range's lowest hash.
        first: u64,
        /// Its highest hash.
        last: u64,
        /// The new owner.
        to: u16,
    },
}

/// A member's answer to a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The write is acknowledged.
    Done,
    /// The value read.
    Value(Option<Vec<u8>>),
    /// This member does not serve the key (now): the route table to use.
    Moved(Route),
    /// Not now (a view change, or a pull not begun): ask again shortly.
    Wait,
    /// The route table asked for.
    Route(Route),
    /// A shard's part of a scan.
    Pairs(Vec<Pair>),
    /// The member's status.
    Status(Box<HostStatus>),
    /// The map version that holds the migration asked for.
    Migrating(u64),
    /// The migration was refused: the map's reason.
    Refused(crate::shard::MapError),
    /// The member failed to do it (its store's or log's error kind).
    Failed(crate::remote::Failure),
}

/// [`HostStatus::keys`] of a shard whose store the member does not hold (it is
/// none of the shard's replicas).
pub const NO_COPY: u64 = u64::MAX;

/// What a member says of the sharded store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStatus {
    /// The member.
    pub node: u32,
    /// The map's version.
    pub version: u64,
    /// Each shard's primary, if known.
    pub primaries: Vec<Option<u32>>,
    /// The share of the hashes each shard owns (parts per million).
    pub shares: Vec<u32>,
    /// The migrations in progress: (id, first hash, last hash, from, to).
    pub migrations: Vec<(u64, u64, u64, u16, u16)>,
    /// Keys in each shard's store at this member (the store's estimate);
    /// [`NO_COPY`] for a shard whose store this member does not hold.
    pub keys: Vec<u64>,
    /// Records and bytes this member's pullers logged so far.
    pub pulled: (u64, u64),
}

impl HostStatus {
    /// Whether every move asked for up to map version `version` (what
    /// [`super::client::ShardClient::migrate`] returned) has ended: the map is
    /// past it and lists no migration.
    pub fn moves_ended(&self, version: u64) -> bool {
        self.version > version && self.migrations.is_empty()
    }
}

/// A member's request to another during a migration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerRequest {
    /// The records of the migration's range after `after`, at most `max` (the
    /// first ask also gets the old owner's writers).
    Ask {
        /// The migration.
        migration: Migration,
        /// The last key pulled.
        after: Option<Vec<u8>>,
        /// The most records.
        max: u32,
        /// The most bytes of keys and values (past the first record).
        max_bytes: u32,
    },
    /// One key of the migration's range (a read at the new owner).
    ReadKey {
        /// The migration.
        migration: Migration,
        /// The key.
        key: Vec<u8>,
    },
    /// Log the drop of the migration's range.
    Drop {
        /// The migration.
        migration: Migration,
    },
}

/// The answer to a [`PeerRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerReply {
    /// Records, whether more may follow, and the writers (to the first ask).
    Batch {
        /// The records.
        pairs: Vec<Pair>,
        /// More may follow.
        more: bool,
        /// The old owner's writers: (client, seq).
        writers: Option<Vec<(u64, u64)>>,
    },
    /// The key's value.
    Value(Option<Vec<u8>>),
    /// The drop is logged.
    Dropped,
    /// Not yet: the old owner still owns the range in its view, or still runs
    /// requests it admitted in an older one, or is not the shard's primary.
    NotReady,
    /// It failed (the store's error kind).
    Failed(crate::remote::Failure),
}

/// `m`'s bytes.
pub fn encode<T: Serialize>(m: &T) -> Vec<u8> {
    crate::codec::encode(VERSION, m)
}

/// Decodes a message; `None` for bytes that are not one of this version.
pub fn decode<T: for<'a> Deserialize<'a>>(body: &[u8]) -> Option<T> {
    crate::codec::decode(VERSION, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_others_are_refused() {
        let r = Request::Op { version: 3, op: Op::Write { key: b"k".to_vec(), value: None, by: (1, 2) } };
        assert_eq!(decode::<Request>(&encode(&r)), Some(r.clone()));
        let mut other = encode(&r);
        other[0] = VERSION + 1;
        assert_eq!(decode::<Request>(&other), None);
        let mut longer = encode(&r);
        longer.push(0);
        assert_eq!(decode::<Request>(&longer), None);
        assert_eq!(decode::<PeerRequest>(&[VERSION, 0xff]), None);
        // The store of one log's messages are another protocol's.
        let single = crate::codec::encode(crate::remote::VERSION, &Request::Route);
        assert_eq!(decode::<Request>(&single), None);
    }
}
