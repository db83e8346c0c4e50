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
    /// Keys this run set, when it holds a drop (a drop of a range must remove
    /// them too: the batch is not in the store yet).
    pub(crate) set: Option<BTreeSet<Vec<u8>>>,
    /// Whether `state` changed.
    pub(crate) dirty: bool,
}

impl<'a> StoreTable<'a> {
    /// A run into `batch`; `drops`: whether it holds a drop of a range.
    pub(crate) fn new(
        kv: &'a Keyspace,
        batch: &'a mut WriteBatch,
        state: &'a mut ShardState,
        drops: bool,
    ) -> StoreTable<'a> {
        StoreTable { kv, batch, state, set: drops.then(BTreeSet::new), dirty: false }
    }
}

impl Table for StoreTable<'_> {
    type Error = fjall::Error;

    fn set(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Self::Error> {
        match value {
            Some(v) => {
                self.batch.insert(self.kv, key, v);
                if let Some(set) = &mut self.set {
                    set.insert(key.to_vec());
                }
            }
            None => {
                self.batch.remove(self.kv, key);
                if let Some(set) = &mut self.set {
                    set.remove(key);
                }
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
        if let Some(set) = &mut self.set {
            set.retain(|k| {
                let gone = dropped(key_hash(k), range, keep);
                if gone {
                    self.batch.remove(self.kv, k.as_slice());
                }
                !gone
            });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::rules::apply;
    use crate::update::Writer;
    use crate::Update;
    use fjall::{Database, KeyspaceCreateOptions};

    #[test]
    fn a_drop_removes_keys_set_earlier_in_its_own_batch_and_keeps_what_came_back() {
        let dirs = testkit::TempDirs::new("kvtable", 1);
        let db = Database::builder(&dirs[0]).open().unwrap();
        let kv = db.keyspace("kv", KeyspaceCreateOptions::default).unwrap();
        let mut state = ShardState::default();
        let w =
            |k: &str, seq| Update::Write { key: k.into(), value: Some(b"v".to_vec()), by: Writer { client: 1, seq } };
        let h = |k: &str| key_hash(k.as_bytes());
        // Committed before: "a"; in the batch: "b", then a drop of both.
        let mut b = db.batch();
        let Ok(()) = apply(&mut StoreTable::new(&kv, &mut b, &mut state, false), &w("a", 1)) else { panic!() };
        b.commit().unwrap();
        let mut b = db.batch();
        {
            let mut t = StoreTable::new(&kv, &mut b, &mut state, true);
            apply(&mut t, &w("b", 2)).unwrap();
            for k in ["a", "b"] {
                apply(&mut t, &Update::DropRange { migration: 1, range: Range::one(h(k)) }).unwrap();
            }
        }
        b.commit().unwrap();
        assert!(kv.get("a").unwrap().is_none() && kv.get("b").unwrap().is_none());
        // A late repeat of migration 1's drop keeps what migration 2 brought back.
        let mut b = db.batch();
        {
            let mut t = StoreTable::new(&kv, &mut b, &mut state, true);
            let begin = Update::BeginPull { migration: 2, range: Range::one(h("a")), writers: Vec::new() };
            apply(&mut t, &begin).unwrap();
            apply(&mut t, &Update::Pulled { migration: 2, pairs: vec![(b"a".to_vec(), b"back".to_vec())] }).unwrap();
            apply(&mut t, &Update::DropRange { migration: 1, range: Range::one(h("a")) }).unwrap();
            assert!(t.dirty);
        }
        b.commit().unwrap();
        assert_eq!(kv.get("a").unwrap().as_deref(), Some(&b"back"[..]));
        assert_eq!(ShardState::decode(&state.encode()), Some(state.clone()));
    }
}
