//! What a shard's member does with a request and with a log record, as pure
//! functions over the map and the store: the one place these rules are written,
//! used by the members and by the simulator.
//!
//! **Requests** ([`admit`]): a member serves a key only if its shard owns the key
//! in the map of its current view and that view is not ending (wedged);
//! otherwise it answers "moved" with the map's version (the client asks again
//! with a newer map) or "wait". A request for a key whose range is being pulled
//! here waits until the pull has begun in this shard's log (the old owner's table
//! of writers is in, so a retried request is recognised); a read of such a key
//! that no batch logged here reached and no write here claimed answers with the
//! old owner's value, read on demand.
//!
//! **No answer waits on the view.** A read answers with what the store holds
//! when it reads, and a write once its record is committed, whatever view the
//! member is in by then. A request admitted in view `v` started before the view
//! after it was installed anywhere (installation waits for every member to
//! wedge `v`), so it overlaps any request the new owner serves. The new owner
//! serves nothing of a moving range until its pull has begun, which waits for
//! the old owner to have installed the new view and finished every request it
//! admitted in an older one ([`source_ready`]): a write the old owner logged is
//! in what the new owner pulls, and a pulled copy never overwrites a write made
//! at the new owner (a claim).
//!
//! The simulator (`sim`) shows these rules needed: without the old owner's
//! drain, the claims, the table of writers, or the wait for the pull to begin,
//! seeds fail (a lost put or a stale read) within 20,000; without the drop's
//! exception for ranges that came back, seed 51,305 loses a put. Refusing requests in a
//! wedged view, closing a pull for good and dropping a range's claims with its
//! keys are kept as second guards: the simulator found no seed that needs them.
//! A member that is cut off but believes itself in its old view (a false
//! suspicion) can still answer reads of keys that moved, as the store of one
//! log can today: reads are not leased.
//!
//! **Records** ([`apply`]), decided by the store's own state at each record so
//! that every replica of the log decides alike: a write sets its key unless its
//! request was applied already, and claims the key if a pull open here covers
//! it; a pulled record sets its key only while its pull is open and no claim of
//! the key came first; the end of a pull closes it for good and forgets its
//! range's claims; a range that moved away is dropped, claims and all, except the
//! parts a later migration brought back (a drop asked again late, after its
//! range returned, must not remove what the return pulled).

use super::map::{key_hash, Migration, Range, Shard, ShardMap};
use crate::update::Writer;
use crate::{Pair, Update};
use std::collections::{BTreeMap, BTreeSet};

/// A shard's store as the record rules see it.
pub trait Table {
    /// The store's error.
    type Error;
    /// Sets `key` to `value` (`None`: removes it).
    fn set(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Self::Error>;
    /// Whether `key` has a claim.
    fn claimed(&mut self, key: &[u8]) -> Result<bool, Self::Error>;
    /// Records a claim of `key`.
    fn claim(&mut self, key: &[u8]) -> Result<(), Self::Error>;
    /// Forgets the claims of the keys whose hashes are in `range` and in none of
    /// `keep`.
    fn forget_claims(&mut self, range: Range, keep: &[Range]) -> Result<(), Self::Error>;
    /// Removes the keys whose hashes are in `range` and in none of `keep`.
    fn drop_range(&mut self, range: Range, keep: &[Range]) -> Result<(), Self::Error>;
    /// The last request of `client` the store applied (0: none).
    fn last_seq(&mut self, client: u64) -> Result<u64, Self::Error>;
    /// Records that the store applied `w`.
    fn set_last_seq(&mut self, w: Writer) -> Result<(), Self::Error>;
    /// The pulls open here: (migration, range).
    fn pulls(&mut self) -> Result<Vec<(u64, Range)>, Self::Error>;
    /// Opens migration `id`'s pull of `range`.
    fn open_pull(&mut self, id: u64, range: Range) -> Result<(), Self::Error>;
    /// Closes migration `id`'s pull for good; its range, if it was open.
    fn close_pull(&mut self, id: u64) -> Result<Option<Range>, Self::Error>;
    /// Whether migration `id`'s pull was closed here.
    fn closed(&mut self, id: u64) -> Result<bool, Self::Error>;
    /// The ranges of the pulls begun here (open or closed) of migrations after
    /// `id`.
    fn pulls_after(&mut self, id: u64) -> Result<Vec<Range>, Self::Error>;
}

/// Whether hash `h` is in `range` and in none of `keep`.
pub fn dropped(h: u64, range: Range, keep: &[Range]) -> bool {
    range.contains(h) && !keep.iter().any(|k| k.contains(h))
}

/// Applies record `u` to `t` (markers are the store's own business: not here).
pub fn apply<T: Table>(t: &mut T, u: &Update) -> Result<(), T::Error> {
    match u {
        Update::Put(k, v) => t.set(k, Some(v)),
        Update::Del(k) => t.set(k, None),
        Update::Marker { .. } => Ok(()),
        Update::Write { key, value, by } => {
            if t.last_seq(by.client)? >= by.seq {
                return Ok(());
            }
            t.set_last_seq(*by)?;
            let h = key_hash(key);
            if t.pulls()?.iter().any(|(_, r)| r.contains(h)) {
                t.claim(key)?;
            }
            t.set(key, value.as_deref())
        }
        Update::BeginPull { migration, range, writers } => {
            for w in writers {
                if t.last_seq(w.client)? < w.seq {
                    t.set_last_seq(*w)?;
                }
            }
            // A late repeat of a pull that ended opens nothing.
            if !t.closed(*migration)? && !t.pulls()?.iter().any(|(id, _)| id == migration) {
                t.open_pull(*migration, *range)?;
            }
            Ok(())
        }
        Update::Pulled { migration, pairs } => {
            if !t.pulls()?.iter().any(|(id, _)| id == migration) {
                return Ok(());
            }
            for (k, v) in pairs {
                if !t.claimed(k)? {
                    t.set(k, Some(v))?;
                }
            }
            Ok(())
        }
        Update::EndPull { migration } => match t.close_pull(*migration)? {
            Some(r) => t.forget_claims(r, &[]),
            None => Ok(()),
        },
        Update::DropRange { migration, range } => {
            // A later migration may have brought part of the range back here
            // (this drop is a late repeat): that part stays.
            let keep = t.pulls_after(*migration)?;
            t.forget_claims(*range, &keep)?;
            t.drop_range(*range, &keep)
        }
    }
}

/// The ends of pulls a member of a shard owes its log: every pull open in its
/// store (`pulls`) whose migration `map` no longer lists. The member appends
/// them once no request it admitted in an older view is still running.
pub fn ends_owed(pulls: &[(u64, Range)], map: &ShardMap) -> Vec<Update> {
    pulls
        .iter()
        .filter(|(id, _)| !map.migrations().iter().any(|m| m.id == *id))
        .map(|(id, _)| Update::EndPull { migration: *id })
        .collect()
}

/// What a member does with a request for a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Serve it: the shard owns the key.
    Serve {
        /// The migration pulling the key's range here, if one is: writes are
        /// claims, and a read pulls the key first.
        pulling: Option<Migration>,
    },
    /// Another shard owns the key in this map: answer "moved".
    Moved,
    /// Not now (the view is ending, or the old owner's writers are not in yet):
    /// the client asks again shortly.
    Wait,
}

/// What a member of `shard` does with a request for `key` under `map`, in a view
/// that is `wedged` or not; a key whose range is being pulled here waits until
/// its pull has `started` in this shard's log.
pub fn admit(map: &ShardMap, shard: Shard, key: &[u8], wedged: bool, started: impl FnOnce(u64) -> bool) -> Admit {
    let h = key_hash(key);
    if map.owner(h) != shard {
        return Admit::Moved;
    }
    let pulling = map.pulling(h).copied();
    if wedged || pulling.is_some_and(|m| !started(m.id)) {
        return Admit::Wait;
    }
    Admit::Serve { pulling }
}

/// The record for a write by `by` (`None` value: a delete).
pub fn write_record(key: &[u8], value: Option<&[u8]>, by: Writer) -> Update {
    Update::Write { key: key.to_vec(), value: value.map(<[u8]>::to_vec), by }
}

/// Whether a member of `shard`, in a view with map `map`, may serve the records
/// of `range` to the shard it moved to: it no longer owns the range, and
/// `drained` (no request it admitted in an older view is still running).
pub fn source_ready(map: &ShardMap, shard: Shard, range: Range, drained: bool) -> bool {
    drained && map.owner(range.first) != shard
}

/// A batch of the records of `range` after key `after`, at most `max` of them
/// and, past the first, at most `max_bytes` of keys and values, from `pairs` (a
/// store's keys in order, each read may fail); and whether more may follow.
/// Reads no further than the record after the batch.
pub fn take_batch<E>(
    pairs: impl Iterator<Item = Result<Pair, E>>,
    range: Range,
    after: Option<&[u8]>,
    max: u32,
    max_bytes: u32,
) -> Result<(Vec<Pair>, bool), E> {
    let mut out = Vec::new();
    let mut bytes = 0usize;
    for p in pairs {
        let (k, v) = p?;
        if after.is_some_and(|a| k.as_slice() <= a) || !range.contains(key_hash(&k)) {
            continue;
        }
        let size = k.len() + v.len();
        if out.len() == max as usize || (!out.is_empty() && bytes + size > max_bytes as usize) {
            return Ok((out, true));
        }
        bytes += size;
        out.push((k, v));
    }
    Ok((out, false))
}

/// A store in memory: the simulator's, and a model for tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemTable {
    /// The keys and values.
    pub keys: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The claimed keys.
    pub claims: BTreeSet<Vec<u8>>,
    /// Each client's last request applied.
    pub writers: BTreeMap<u64, u64>,
    /// The pulls open.
    pub pulls: BTreeMap<u64, Range>,
    /// The pulls closed, with their ranges.
    pub closed: BTreeMap<u64, Range>,
}

impl Table for MemTable {
    type Error = std::convert::Infallible;
    fn set(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Self::Error> {
        match value {
            Some(v) => self.keys.insert(key.to_vec(), v.to_vec()),
            None => self.keys.remove(key),
        };
        Ok(())
    }
    fn claimed(&mut self, key: &[u8]) -> Result<bool, Self::Error> {
        Ok(self.claims.contains(key))
    }
    fn claim(&mut self, key: &[u8]) -> Result<(), Self::Error> {
        self.claims.insert(key.to_vec());
        Ok(())
    }
    fn forget_claims(&mut self, range: Range, keep: &[Range]) -> Result<(), Self::Error> {
        self.claims.retain(|k| !dropped(key_hash(k), range, keep));
        Ok(())
    }
    fn drop_range(&mut self, range: Range, keep: &[Range]) -> Result<(), Self::Error> {
        self.keys.retain(|k, _| !dropped(key_hash(k), range, keep));
        Ok(())
    }
    fn last_seq(&mut self, client: u64) -> Result<u64, Self::Error> {
        Ok(self.writers.get(&client).copied().unwrap_or(0))
    }
    fn set_last_seq(&mut self, w: Writer) -> Result<(), Self::Error> {
        self.writers.insert(w.client, w.seq);
        Ok(())
    }
    fn pulls(&mut self) -> Result<Vec<(u64, Range)>, Self::Error> {
        Ok(self.pulls.iter().map(|(i, r)| (*i, *r)).collect())
    }
    fn open_pull(&mut self, id: u64, range: Range) -> Result<(), Self::Error> {
        self.pulls.insert(id, range);
        Ok(())
    }
    fn close_pull(&mut self, id: u64) -> Result<Option<Range>, Self::Error> {
        let r = self.pulls.remove(&id);
        if let Some(r) = r {
            self.closed.insert(id, r);
        }
        Ok(r)
    }
    fn closed(&mut self, id: u64) -> Result<bool, Self::Error> {
        Ok(self.closed.contains_key(&id))
    }
    fn pulls_after(&mut self, id: u64) -> Result<Vec<Range>, Self::Error> {
        Ok(self.pulls.range(id + 1..).chain(self.closed.range(id + 1..)).map(|(_, r)| *r).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::MapEdit;

    fn run(t: &mut MemTable, us: &[Update]) {
        for u in us {
            let Ok(()) = apply(t, u);
        }
    }

    fn w(key: &[u8], value: Option<&[u8]>, client: u64, seq: u64) -> Update {
        Update::Write { key: key.to_vec(), value: value.map(<[u8]>::to_vec), by: Writer { client, seq } }
    }

    fn begin(id: u64, writers: Vec<Writer>) -> Update {
        Update::BeginPull { migration: id, range: Range::ALL, writers }
    }

    fn pulled(id: u64, pairs: &[Pair]) -> Update {
        Update::Pulled { migration: id, pairs: pairs.to_vec() }
    }

    fn value(t: &MemTable, k: &[u8]) -> Option<Vec<u8>> {
        t.keys.get(k).cloned()
    }

    #[test]
    fn a_pulled_record_never_overwrites_a_write_made_while_the_pull_is_open() {
        let k = b"k".to_vec();
        let old = [(k.clone(), b"old".to_vec())];
        let mut t = MemTable::default();
        run(&mut t, &[begin(1, Vec::new()), w(&k, Some(b"new"), 1, 1), pulled(1, &old)]);
        assert_eq!(value(&t, &k), Some(b"new".to_vec()));
        // A delete stays a delete.
        let mut t = MemTable::default();
        run(&mut t, &[begin(1, Vec::new()), w(&k, None, 1, 1), pulled(1, &old)]);
        assert_eq!(value(&t, &k), None);
        // Pulled first: the write that follows wins.
        let mut t = MemTable::default();
        run(&mut t, &[begin(1, Vec::new()), pulled(1, &old), w(&k, Some(b"x"), 1, 1)]);
        assert_eq!(value(&t, &k), Some(b"x".to_vec()));
        // The end closes the pull for good: its claims go, and a late repeat of
        // its records (a puller that lagged) changes nothing.
        let map = ShardMap::new(2).unwrap();
        assert_eq!(ends_owed(&t.pulls().unwrap_or_default(), &map), vec![Update::EndPull { migration: 1 }]);
        run(&mut t, &[Update::EndPull { migration: 1 }]);
        assert!(t.claims.is_empty() && t.pulls.is_empty());
        assert!(ends_owed(&t.pulls().unwrap_or_default(), &map).is_empty());
        run(&mut t, &[begin(1, Vec::new()), pulled(1, &old)]);
        assert_eq!(value(&t, &k), Some(b"x".to_vec()));
        assert!(t.pulls.is_empty(), "a closed pull does not open again");
        // Records of a pull never opened here change nothing either.
        run(&mut t, &[pulled(2, &old)]);
        assert_eq!(value(&t, &k), Some(b"x".to_vec()));
        // A late repeat of the drop of an earlier migration keeps what migration
        // 1 brought back; the drop of a later one removes it.
        let range = Range::one(key_hash(&k));
        run(&mut t, &[Update::DropRange { migration: 0, range }]);
        assert_eq!(value(&t, &k), Some(b"x".to_vec()));
        run(&mut t, &[Update::DropRange { migration: 5, range }]);
        assert_eq!(value(&t, &k), None);
    }

    #[test]
    fn a_request_applied_once_is_not_applied_again_even_after_a_move() {
        let k = b"k".to_vec();
        let mut t = MemTable::default();
        run(&mut t, &[w(&k, Some(b"a"), 1, 1), w(&k, Some(b"b"), 2, 1), w(&k, Some(b"a"), 1, 1)]);
        assert_eq!(value(&t, &k), Some(b"b".to_vec()), "the retry of (1, 1) changed nothing");
        // At the new owner: the old owner's writers came with the pull's start.
        let mut t = MemTable::default();
        run(&mut t, &[begin(1, vec![Writer { client: 1, seq: 1 }])]);
        run(&mut t, &[w(&k, Some(b"b"), 2, 1), w(&k, Some(b"a"), 1, 1)]);
        assert_eq!(value(&t, &k), Some(b"b".to_vec()));
    }

    #[test]
    fn members_serve_what_their_shard_owns() {
        let map = ShardMap::new(2).unwrap();
        let key = b"colour";
        let owner = map.owner_of(key);
        let yes = |_| true;
        assert_eq!(admit(&map, owner, key, false, yes), Admit::Serve { pulling: None });
        assert_eq!(admit(&map, owner, key, true, yes), Admit::Wait, "a wedged view serves nothing");
        assert_eq!(admit(&map, 1 - owner, key, false, yes), Admit::Moved);
        let range = Range::one(key_hash(key));
        let moved = map.apply(&MapEdit::Migrate { range, to: 1 - owner }).unwrap().unwrap();
        assert_eq!(admit(&moved, owner, key, false, yes), Admit::Moved);
        assert_eq!(admit(&moved, 1 - owner, key, false, |_| false), Admit::Wait, "the pull has not begun");
        let a = admit(&moved, 1 - owner, key, false, yes);
        assert_eq!(a, Admit::Serve { pulling: moved.migrations().first().copied() });
        assert!(source_ready(&moved, owner, range, true) && !source_ready(&moved, owner, range, false));
        assert!(!source_ready(&map, owner, range, true), "it still owns the range in the old map");
    }

    #[test]
    fn batches_follow_key_order_within_the_range() {
        let pairs: Vec<Pair> = (0..10u8).map(|i| (vec![i], vec![i])).collect();
        let ok = |p: &Vec<Pair>| p.clone().into_iter().map(Ok::<Pair, ()>);
        let (b, more) = take_batch(ok(&pairs), Range::ALL, Some(&[3]), 4, u32::MAX).unwrap();
        assert_eq!(b.iter().map(|p| p.0[0]).collect::<Vec<_>>(), vec![4, 5, 6, 7]);
        assert!(more);
        let (b, more) = take_batch(ok(&pairs), Range::ALL, Some(&[7]), 4, u32::MAX).unwrap();
        assert_eq!(b.len(), 2);
        assert!(!more);
        // Bytes bound a batch too (keys and values: 2 bytes each here), but
        // never below one record.
        let (b, more) = take_batch(ok(&pairs), Range::ALL, None, 8, 5).unwrap();
        assert_eq!(b.iter().map(|p| p.0[0]).collect::<Vec<_>>(), vec![0, 1]);
        assert!(more);
        let (b, more) = take_batch(ok(&pairs), Range::ALL, Some(&[8]), 8, 1).unwrap();
        assert_eq!(b.iter().map(|p| p.0[0]).collect::<Vec<_>>(), vec![9], "one record past the bound");
        assert!(!more);
    }
}
