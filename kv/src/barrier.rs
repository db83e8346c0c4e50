//! The read barrier of one key at a log's primary: which records a read of a
//! key must wait for, so that a read need not wait for every record ahead of it
//! in the applier's queue (a migration's bulk batches, other keys' writes).
//!
//! It knows the records appended through this store ([`crate::Store::record`]):
//! for each key, how many of its records are being appended and the newest
//! one's number; for the records that touch no single key but can change what a
//! read sees (a pull's start and end, a dropped range), the same without a key.
//! It does not know records appended elsewhere (by an earlier primary): a store
//! uses it only at the log's primary, after a full `sync` in the primary's
//! current term (see `Store::sync_key`).

use crate::Update;
use spindle_sst::sync::lock;
use spindle_tailwind::service::Others;
use std::collections::HashMap;
use std::sync::Mutex;

/// What a read of a key must wait for (ordered: the most of several is what
/// they need together).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Need {
    /// Nothing past what is applied.
    Nothing,
    /// Records up to this one applied.
    Upto(u64),
    /// A record of this key (or of none) is being appended: everything committed.
    All,
}

#[derive(Default)]
struct Marks {
    /// Appends under way, and the newest record appended.
    busy: u32,
    last: Option<u64>,
}

impl Marks {
    fn need(&self, applied: u64) -> Need {
        match (self.busy, self.last) {
            (0, Some(l)) if l >= applied => Need::Upto(l),
            (0, _) => Need::Nothing,
            _ => Need::All,
        }
    }
}

#[derive(Default)]
struct State {
    keys: HashMap<Vec<u8>, Marks>,
    /// The records that touch no single key.
    unkeyed: Marks,
    /// The size of `keys` at which it is next cleared of applied records.
    tidy_at: usize,
}

impl State {
    /// `key`'s marks (new ones if it has none: the key is copied only then).
    fn marks(&mut self, key: &[u8]) -> &mut Marks {
        if !self.keys.contains_key(key) {
            self.keys.insert(key.to_vec(), Marks::default());
        }
        self.keys.get_mut(key).expect("just inserted")
    }
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct KeyBarrier {
    st: Mutex<State>,
}

/// The keys record `u` sets (`None`: it can change reads of keys it does not
/// name, or of none; markers change no read and give `Some` of none).
pub(crate) fn keys_of(u: &Update) -> Option<Vec<&[u8]>> {
    match u {
        Update::Put(k, _) | Update::Del(k) => Some(vec![k]),
        Update::Write { key, .. } => Some(vec![key]),
        Update::Pulled { pairs, .. } => Some(pairs.iter().map(|(k, _)| k.as_slice()).collect()),
        Update::Marker { .. } => Some(Vec::new()),
        Update::BeginPull { .. } | Update::EndPull { .. } | Update::DropRange { .. } => None,
    }
}

impl KeyBarrier {
    /// Record `keys` (see [`keys_of`]) is about to be appended.
    pub(crate) fn begin(&self, keys: &Option<Vec<&[u8]>>) {
        let mut st = lock(&self.st);
        match keys {
            Some(ks) => ks.iter().for_each(|k| st.marks(k).busy += 1),
            None => st.unkeyed.busy += 1,
        }
    }

    /// The append [`KeyBarrier::begin`] announced returned: as record `lsn`, or
    /// failed (`None`). A failed record may still reach the log, but it was
    /// acknowledged to no one, so no read has to see it; a read that does sees
    /// it applied, and so does every read after (the store only grows).
    /// `applied` tells how far the store applied, when the map is tidied.
    pub(crate) fn end(&self, keys: &Option<Vec<&[u8]>>, lsn: Option<u64>, applied: impl FnOnce() -> u64) {
        let mut st = lock(&self.st);
        let mark = |m: &mut Marks| {
            m.busy = m.busy.saturating_sub(1);
            m.last = m.last.max(lsn);
        };
        match keys {
            Some(ks) => ks.iter().for_each(|k| mark(st.marks(k))),
            None => mark(&mut st.unkeyed),
        }
        if st.keys.len() >= st.tidy_at {
            let applied = applied();
            st.keys.retain(|_, m| m.busy > 0 || m.last.is_some_and(|l| l >= applied));
            st.tidy_at = (st.keys.len() * 2).max(1024);
        }
    }

    /// What a read of `key` waits for, with `applied` records applied and the
    /// log's appends for other members `others` (see [`Others`]).
    pub(crate) fn need(&self, key: &[u8], applied: u64, others: &Others) -> Need {
        let st = lock(&self.st);
        let theirs = Marks { busy: others.busy.min(1) as u32, last: others.last.map(|l| l.0) };
        let mine = st.keys.get(key).map_or(Need::Nothing, |m| m.need(applied));
        mine.max(st.unkeyed.need(applied)).max(theirs.need(applied))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spindle_tailwind::service::Lsn;

    fn one(k: &str) -> Option<Vec<&[u8]>> {
        Some(vec![k.as_bytes()])
    }

    const NONE: Others = Others { views: 1, busy: 0, last: None };

    #[test]
    fn a_read_waits_for_its_own_keys_records_only() {
        let b = KeyBarrier::default();
        assert_eq!(b.need(b"a", 0, &NONE), Need::Nothing);
        b.begin(&one("a"));
        assert_eq!(b.need(b"a", 0, &NONE), Need::All, "an append under way: everything committed");
        assert_eq!(b.need(b"b", 0, &NONE), Need::Nothing);
        b.end(&one("a"), Some(5), || 0);
        assert_eq!(b.need(b"a", 3, &NONE), Need::Upto(5));
        assert_eq!(b.need(b"a", 5, &NONE), Need::Upto(5), "record 5 is applied once 6 is next");
        assert_eq!(b.need(b"a", 6, &NONE), Need::Nothing);
        // A pulled batch names each of its keys.
        let batch = Some(vec![&b"x"[..], &b"y"[..]]);
        b.begin(&batch);
        b.end(&batch, Some(9), || 6);
        assert_eq!(b.need(b"y", 6, &NONE), Need::Upto(9));
        assert_eq!(b.need(b"a", 6, &NONE), Need::Nothing);
    }

    #[test]
    fn records_of_no_single_key_and_the_others_appends_hold_every_read() {
        let b = KeyBarrier::default();
        let begin = Update::BeginPull { migration: 1, range: crate::shard::Range::ALL, writers: Vec::new() };
        let keys = keys_of(&begin);
        assert_eq!(keys, None);
        b.begin(&keys);
        assert_eq!(b.need(b"a", 0, &NONE), Need::All);
        b.end(&keys, Some(2), || 0);
        assert_eq!(b.need(b"a", 1, &NONE), Need::Upto(2));
        assert_eq!(b.need(b"a", 3, &NONE), Need::Nothing);
        let busy = Others { views: 1, busy: 2, last: None };
        assert_eq!(b.need(b"a", 3, &busy), Need::All);
        let theirs = Others { views: 1, busy: 0, last: Some(Lsn(7)) };
        assert_eq!(b.need(b"a", 3, &theirs), Need::Upto(7));
        assert_eq!(b.need(b"a", 8, &theirs), Need::Nothing);
        assert_eq!(keys_of(&Update::Marker { node: 1, applied: 4 }), Some(Vec::new()), "markers hold no read");
    }

    #[test]
    fn a_failed_append_holds_reads_no_longer_and_applied_keys_are_forgotten() {
        let b = KeyBarrier::default();
        b.begin(&one("a"));
        b.end(&one("a"), None, || 0);
        assert_eq!(b.need(b"a", 0, &NONE), Need::Nothing, "acknowledged to no one");
        for i in 0..5_000u64 {
            let name = format!("k{i}");
            let k = one(&name);
            b.begin(&k);
            b.end(&k, Some(i), || i);
        }
        let left = lock(&b.st).keys.len();
        assert!(left < 2_100, "{left} keys kept after their records were applied");
        assert_eq!(b.need(b"k4999", 4_999, &NONE), Need::Upto(4_999), "the newest is kept");
    }
}
