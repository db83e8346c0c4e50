//! The store's side of the record rules ([`crate::shard::rules`]): the rules
//! applied to the fjall store, one write batch per run of records.
//!
//! What the rules keep besides keys and values (claims, each client's last
//! request, the pulls open and closed) lives in memory and in the store's meta
//! keyspace, written in the batch of the run that changed it, so it is always as
//! far along as the keys. Claims and clients' requests grow with what a move
//! sees and with the clients ever served: each is a key of its own there
//! (`claim/KEY`, `writer/CLIENT`), written when it changes; the pulls, few, are
//! one value written whole. A checkpoint for another member carries all of it
//! ([`crate::transfer`]).

use crate::shard::rules::{dropped, Table};
use crate::shard::{key_hash, Range};
use crate::update::Writer;
use fjall::{Keyspace, OwnedWriteBatch as WriteBatch, Readable};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The key of the pulls open and closed in the meta keyspace.
const PULLS: &[u8] = b"pulls";
/// The key the whole state was kept under by earlier versions (read once and
/// written in the present form).
const WHOLE: &[u8] = b"shard";
/// The prefix of a claim's key in the meta keyspace (the claimed key follows).
const CLAIM: &[u8] = b"claim/";
/// The prefix of a client's last request's key (the client, big-endian).
const WRITER: &[u8] = b"writer/";

fn claim_key(key: &[u8]) -> Vec<u8> {
    [CLAIM, key].concat()
}

fn writer_key(client: u64) -> Vec<u8> {
    [WRITER, &client.to_be_bytes()[..]].concat()
}

/// The pulls, as kept under [`PULLS`].
#[derive(Debug, Default, Serialize, Deserialize)]
struct Pulls {
    open: BTreeMap<u64, Range>,
    closed: BTreeMap<u64, Range>,
}

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

    /// The pulls' value under [`PULLS`].
    fn pulls_value(&self) -> Vec<u8> {
        let p = Pulls { open: self.pulls.clone(), closed: self.closed.clone() };
        postcard::to_stdvec(&p).unwrap_or_default()
    }

    /// The state kept in `meta` as `view` (a snapshot) sees it, and whether an
    /// earlier version kept it whole (to be written again with
    /// [`ShardState::rewrite`]); `Ok(None)` for stored bytes that are not one.
    pub(crate) fn load(view: &impl Readable, meta: &Keyspace) -> Result<Option<(ShardState, bool)>, fjall::Error> {
        if let Some(v) = view.get(meta, WHOLE)? {
            return Ok(ShardState::decode(&v).map(|st| (st, true)));
        }
        let mut st = ShardState::default();
        if let Some(v) = view.get(meta, PULLS)? {
            match postcard::take_from_bytes::<Pulls>(&v) {
                Ok((p, [])) => (st.pulls, st.closed) = (p.open, p.closed),
                _ => return Ok(None),
            }
        }
        for g in view.prefix(meta, CLAIM) {
            let k = g.key()?;
            st.claims.insert(k[CLAIM.len()..].to_vec());
        }
        for g in view.prefix(meta, WRITER) {
            let (k, v) = g.into_inner()?;
            let (Ok(client), Ok(seq)) = (<[u8; 8]>::try_from(&k[WRITER.len()..]), <[u8; 8]>::try_from(&v[..])) else {
                return Ok(None);
            };
            st.writers.insert(u64::from_be_bytes(client), u64::from_le_bytes(seq));
        }
        Ok(Some((st, false)))
    }

    /// Writes the whole state into `b` in place of what `meta` holds (`view` of
    /// it: the claims and clients' requests it holds are removed first): after a
    /// checkpoint, or a state an earlier version kept whole.
    pub(crate) fn rewrite(
        &self,
        view: &impl Readable,
        meta: &Keyspace,
        b: &mut WriteBatch,
    ) -> Result<(), fjall::Error> {
        for prefix in [CLAIM, WRITER] {
            for g in view.prefix(meta, prefix) {
                b.remove(meta, g.key()?.to_vec());
            }
        }
        b.remove(meta, WHOLE);
        b.insert(meta, PULLS, self.pulls_value());
        for k in &self.claims {
            b.insert(meta, claim_key(k), []);
        }
        for (client, seq) in &self.writers {
            b.insert(meta, writer_key(*client), seq.to_le_bytes());
        }
        Ok(())
    }
}

/// One run of records applied into `batch` (see the module docs).
pub(crate) struct StoreTable<'a> {
    pub(crate) kv: &'a Keyspace,
    pub(crate) meta: &'a Keyspace,
    pub(crate) batch: &'a mut WriteBatch,
    pub(crate) state: &'a mut ShardState,
    /// Keys this run set, when it holds a drop (a drop of a range must remove
    /// them too: the batch is not in the store yet).
    pub(crate) set: Option<BTreeSet<Vec<u8>>>,
    /// Whether the pulls changed (the rest is written as it changes).
    pub(crate) dirty: bool,
}

impl<'a> StoreTable<'a> {
    /// A run into `batch` (`kv`: the keys, `meta`: the rules' state); `drops`:
    /// whether it holds a drop of a range.
    pub(crate) fn new(
        kv: &'a Keyspace,
        meta: &'a Keyspace,
        batch: &'a mut WriteBatch,
        state: &'a mut ShardState,
        drops: bool,
    ) -> StoreTable<'a> {
        StoreTable { kv, meta, batch, state, set: drops.then(BTreeSet::new), dirty: false }
    }

    /// Writes the pulls into the batch if they changed.
    pub(crate) fn finish(self) {
        if self.dirty {
            self.batch.insert(self.meta, PULLS, self.state.pulls_value());
        }
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
        if self.state.claims.insert(key.to_vec()) {
            self.batch.insert(self.meta, claim_key(key), []);
        }
        Ok(())
    }

    fn forget_claims(&mut self, range: Range, keep: &[Range]) -> Result<(), Self::Error> {
        let (batch, meta) = (&mut *self.batch, self.meta);
        self.state.claims.retain(|k| {
            let gone = dropped(key_hash(k), range, keep);
            if gone {
                batch.remove(meta, claim_key(k));
            }
            !gone
        });
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
        if self.state.writers.insert(w.client, w.seq) != Some(w.seq) {
            self.batch.insert(self.meta, writer_key(w.client), w.seq.to_le_bytes());
        }
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

    /// A database in a fresh directory, with the store's two keyspaces.
    fn open(tag: &str) -> (testkit::TempDirs, Database, Keyspace, Keyspace) {
        let dirs = testkit::TempDirs::new(tag, 1);
        let db = Database::builder(&dirs[0]).open().unwrap();
        let kv = db.keyspace("kv", KeyspaceCreateOptions::default).unwrap();
        let meta = db.keyspace("meta", KeyspaceCreateOptions::default).unwrap();
        (dirs, db, kv, meta)
    }

    #[test]
    fn a_drop_removes_keys_set_earlier_in_its_own_batch_and_keeps_what_came_back() {
        let (_dirs, db, kv, meta) = open("kvtable");
        let mut state = ShardState::default();
        let w =
            |k: &str, seq| Update::Write { key: k.into(), value: Some(b"v".to_vec()), by: Writer { client: 1, seq } };
        let h = |k: &str| key_hash(k.as_bytes());
        // Committed before: "a"; in the batch: "b", then a drop of both.
        let mut b = db.batch();
        let Ok(()) = apply(&mut StoreTable::new(&kv, &meta, &mut b, &mut state, false), &w("a", 1)) else { panic!() };
        b.commit().unwrap();
        let mut b = db.batch();
        {
            let mut t = StoreTable::new(&kv, &meta, &mut b, &mut state, true);
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
            let mut t = StoreTable::new(&kv, &meta, &mut b, &mut state, true);
            let begin = Update::BeginPull { migration: 2, range: Range::one(h("a")), writers: Vec::new() };
            apply(&mut t, &begin).unwrap();
            apply(&mut t, &Update::Pulled { migration: 2, pairs: vec![(b"a".to_vec(), b"back".to_vec())] }).unwrap();
            apply(&mut t, &Update::DropRange { migration: 1, range: Range::one(h("a")) }).unwrap();
            assert!(t.dirty);
            t.finish();
        }
        b.commit().unwrap();
        assert_eq!(kv.get("a").unwrap().as_deref(), Some(&b"back"[..]));
        assert_eq!(ShardState::decode(&state.encode()), Some(state.clone()));
    }

    #[test]
    fn the_state_is_kept_key_by_key_and_read_back_whole() {
        let (_dirs, db, kv, meta) = open("kvstate");
        let mut state = ShardState::default();
        let range = Range { first: 0, last: u64::MAX / 2 };
        let (a, b_key) = (b"a".to_vec(), b"b".to_vec());
        let in_range = |k: &[u8]| range.contains(key_hash(k));
        // Keys of both halves of the hashes, to see a forget remove only some.
        let keys: Vec<Vec<u8>> = (0..40u32).map(|i| format!("k{i}").into_bytes()).collect();
        let mut b = db.batch();
        {
            let mut t = StoreTable::new(&kv, &meta, &mut b, &mut state, false);
            let begin =
                Update::BeginPull { migration: 3, range: Range::ALL, writers: vec![Writer { client: 9, seq: 4 }] };
            apply(&mut t, &begin).unwrap();
            for (i, k) in keys.iter().chain([&a, &b_key]).enumerate() {
                let by = Writer { client: 1 + i as u64 % 3, seq: 10 + i as u64 };
                apply(&mut t, &Update::Write { key: k.clone(), value: Some(b"v".to_vec()), by }).unwrap();
            }
            t.finish();
        }
        b.commit().unwrap();
        let (loaded, whole) = ShardState::load(&db.snapshot(), &meta).unwrap().unwrap();
        assert!(!whole);
        assert_eq!(loaded, state);
        assert_eq!(state.claims.len(), 42, "every write during the open pull claimed its key");
        assert_eq!(state.writers.len(), 4);
        // Forgetting a range's claims removes their keys from the meta keyspace.
        let mut b = db.batch();
        {
            let mut t = StoreTable::new(&kv, &meta, &mut b, &mut state, false);
            t.forget_claims(range, &[]).unwrap();
            t.finish();
        }
        b.commit().unwrap();
        assert!(state.claims.iter().all(|k| !in_range(k)) && !state.claims.is_empty());
        assert_eq!(ShardState::load(&db.snapshot(), &meta).unwrap().unwrap().0, state);
        // A state an earlier version kept whole is read and written anew.
        let mut old = state.clone();
        old.claims.insert(b"old".to_vec());
        meta.insert(WHOLE, old.encode()).unwrap();
        let (read, whole) = ShardState::load(&db.snapshot(), &meta).unwrap().unwrap();
        assert!(whole);
        assert_eq!(read, old);
        let mut b = db.batch();
        read.rewrite(&db.snapshot(), &meta, &mut b).unwrap();
        b.commit().unwrap();
        assert_eq!(ShardState::load(&db.snapshot(), &meta).unwrap().unwrap(), (old, false));
        // Bytes that are not a state are refused.
        meta.insert(PULLS, b"\xff\xff".to_vec()).unwrap();
        assert_eq!(ShardState::load(&db.snapshot(), &meta).unwrap(), None);
    }
}
