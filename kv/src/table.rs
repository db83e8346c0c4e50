//! The store's side of the record rules ([`crate::shard::rules`]): the rules
//! applied to the fjall store, one write batch per run of records.
//!
//! What the rules keep besides keys and values (claims, each client's last
//! request, the pulls open and closed) is small; it lives in memory and is
//! written whole, as one value of the store's meta keyspace, in the batch of any
//! run that changed it, so it is always as far along as the keys. A checkpoint
//! for another member carries it ([`crate::transfer`]).

use crate::shard::rules::{dropped, Table};
use crate::shard::{key_hash, Range};
use crate::update::Writer;
use fjall::{Keyspace, OwnedWriteBatch as WriteBatch};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The key of the rules' state in the meta keyspace.
pub(crate) const SHARD_STATE: &[u8] = b"shard";

/// What the rules keep besides keys and values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ShardState {
    pub(crate) claims: BTreeSet<Vec<u8>>,
    pub(crate) writers: BTreeMap<u64, u64>,
    pub(crate) pulls: BTreeMap<u64, Range>,
    pub(crate) closed: BTreeMap<u64, Range>,
}

impl ShardState {
    /// Its bytes in the meta keyspace.
    pub(crate) fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).unwrap_or_default()
    }

    /// Decodes the stored state; `None` for bytes that are not one.
    pub(crate) fn decode(bytes: &[u8]) -> Option<ShardState> {
        match postcard::take_from_bytes(bytes) {
            Ok((s, [])) => Some(s),
            _ => None,
        }
    }
}

/// One run of records applied into `batch` (see the module docs).
pub(crate) struct StoreTable<'a> {
    pub(crate) kv: &'a Keyspace,
    pub(crate) batch: &'a mut WriteBatch,
    pub(crate) state: &'a mut ShardState,
    /// Keys this run set (a drop of a range must remove them too: the batch is
    /// not in the store yet).
    pub(crate) set: BTreeSet<Vec<u8>>,
    /// Whether `state` changed.
    pub(crate) dirty: bool,
}

impl<'a> StoreTable<'a> {
    pub(crate) fn new(kv: &'a Keyspace, batch: &'a mut WriteBatch, state: &'a mut ShardState) -> StoreTable<'a> {
        StoreTable { kv, batch, state, set: BTreeSet::new(), dirty: false }
    }
}

impl Table for StoreTable<'_> {
    type Error = fjall::Error;

    fn set(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Self::Error> {
        match value {
            Some(v) => {
                self.batch.insert(self.kv, key, v);
                self.set.insert(key.to_vec());
            }
            None => {
                self.batch.remove(self.kv, key);
                self.set.remove(key);
            }
        }
        Ok(())
    }

    fn claimed(&mut self, key: &[u8]) -> Result<bool, Self::Error> {
        Ok(self.state.claims.contains(key))
    }

    fn claim(&mut self, key: &[u8]) -> Result<(), Self::Error> {
        self.dirty |= self.state.claims.insert(key.to_vec());
        Ok(())
    }

    fn forget_claims(&mut self, range: Range, keep: &[Range]) -> Result<(), Self::Error> {
        let before = self.state.claims.len();
        self.state.claims.retain(|k| !dropped(key_hash(k), range, keep));
        self.dirty |= self.state.claims.len() != before;
        Ok(())
    }

    fn drop_range(&mut self, range: Range, keep: &[Range]) -> Result<(), Self::Error> {
        // Every key of the store is looked at: a range moves away seldom.
        for g in self.kv.iter() {
            let k = g.key()?;
            if dropped(key_hash(&k), range, keep) {
                self.batch.remove(self.kv, k.to_vec());
            }
        }
        for k in std::mem::take(&mut self.set) {
            if dropped(key_hash(&k), range, keep) {
                self.batch.remove(self.kv, k.as_slice());
            } else {
                self.set.insert(k);
            }
        }
        Ok(())
    }

    fn last_seq(&mut self, client: u64) -> Result<u64, Self::Error> {
        Ok(self.state.writers.get(&client).copied().unwrap_or(0))
    }

    fn set_last_seq(&mut self, w: Writer) -> Result<(), Self::Error> {
        self.state.writers.insert(w.client, w.seq);
        self.dirty = true;
        Ok(())
    }

    fn pulls(&mut self) -> Result<Vec<(u64, Range)>, Self::Error> {
        Ok(self.state.pulls.iter().map(|(i, r)| (*i, *r)).collect())
    }

    fn open_pull(&mut self, id: u64, range: Range) -> Result<(), Self::Error> {
        self.state.pulls.insert(id, range);
        self.dirty = true;
        Ok(())
    }

    fn close_pull(&mut self, id: u64) -> Result<Option<Range>, Self::Error> {
        let r = self.state.pulls.remove(&id);
        if let Some(r) = r {
            self.state.closed.insert(id, r);
            self.dirty = true;
        }
        Ok(r)
    }

    fn closed(&mut self, id: u64) -> Result<bool, Self::Error> {
        Ok(self.state.closed.contains_key(&id))
    }

    fn pulls_after(&mut self, id: u64) -> Result<Vec<Range>, Self::Error> {
        let st = &self.state;
        Ok(st.pulls.range(id + 1..).chain(st.closed.range(id + 1..)).map(|(_, r)| *r).collect())
    }
}
