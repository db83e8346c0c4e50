//! The new owner's side of a migration, as a state machine with no I/O: the
//! primary of the target shard runs one per migration it finds in the map, feeds
//! it what its requests brought back, and does the step it says next.
//!
//! The steps, in order: ask the old owner for the range's records in key order, a
//! batch at a time ([`Step::Ask`]); log the first answer's table of writers as
//! [`Update::BeginPull`] and each batch as [`Update::Pulled`]; once the old owner
//! has no more, have it drop the range ([`Step::Drop`]: every pulled record is in
//! this shard's log by then); edit the map to end the migration
//! ([`Step::Edit`]). The end of the pull in this shard's log (which forgets its
//! claims) is the member's to write once the map no longer lists the migration
//! ([`super::rules::ends_owed`]).
//!
//! While a batch is logged, the next one can be asked for at once
//! ([`Puller::ask_ahead`]): the old owner reads batch k+1 while this shard's log
//! takes batch k, so the two sides of the pull work at the same time, with at
//! most two batches in flight (asks stay in key order, each after the last key
//! of the batch before it, so there is no third to ask for). The answer waits in
//! the puller until that append is done ([`Puller::ahead_batch`]).
//!
//! Every step can be repeated: a pulled record never overwrites a claim, a drop
//! of a dropped range drops nothing, and the edit is a no-op once a view holds it.
//! So a new primary (the old one failed) starts its puller from the beginning,
//! and a failed request is simply asked again ([`Puller::retry`]). The old
//! owner's log keeps the range until the drop, which comes only after this
//! shard's log holds every record pulled (the lineage that makes a failure of
//! either side lose nothing).

use super::map::{MapEdit, Migration, Range, Shard};
use crate::update::Writer;
use crate::{Pair, Update};

/// The most records one batch asks for. A batch is one record of the new owner's
/// log, which appends and reads behind it wait for: 64 rather than 256 cut the
/// tails during a move by about a quarter, for a quarter slower moves
/// (docs/benchmarks.md).
pub const BATCH_KEYS: u32 = 64;
/// The most bytes of keys and values one batch asks for unless told.
pub const BATCH_BYTES: u32 = 256 * 1024;

/// What the puller's host does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Ask shard `from` for the records of `range` with keys after `after` (all
    /// when `None`), in key order, at most `max`; answer with [`Puller::batch`].
    Ask {
        /// The old owner.
        from: Shard,
        /// The migration's range.
        range: Range,
        /// The last key already pulled.
        after: Option<Vec<u8>>,
        /// The most records.
        max: u32,
        /// The most bytes of keys and values (past the first record).
        max_bytes: u32,
    },
    /// Append this record to this shard's log; then [`Puller::appended`].
    Append(Update),
    /// Have shard `from` log [`Update::DropRange`] of `range`; then
    /// [`Puller::dropped`].
    Drop {
        /// The old owner.
        from: Shard,
        /// The range.
        range: Range,
    },
    /// Edit the map; then [`Puller::edited`].
    Edit(MapEdit),
    /// The migration is over.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Asking,
    /// The writers are being logged; the first batch waits.
    Beginning,
    Logging {
        last: bool,
    },
    Dropping,
    Finishing,
    Done,
}

/// The batch asked for ahead of the one being logged.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ahead {
    None,
    Asked,
    Got(Vec<Pair>, bool),
}

/// One migration's puller (see the module docs).
#[derive(Debug, Clone)]
pub struct Puller {
    mig: Migration,
    /// Records per ask, and bytes.
    batch: u32,
    batch_bytes: u32,
    after: Option<Vec<u8>>,
    phase: Phase,
    pending: Option<Step>,
    /// The first batch, while the writers are logged.
    first: Option<(Vec<Pair>, bool)>,
    /// The writers are logged.
    begun: bool,
    ahead: Ahead,
    keys: u64,
    bytes: u64,
}

impl Puller {
    /// A puller for `mig` that asks for [`BATCH_KEYS`] records and
    /// [`BATCH_BYTES`] at a time, and its first step.
    pub fn new(mig: Migration) -> (Puller, Step) {
        Puller::with_batch(mig, BATCH_KEYS, BATCH_BYTES)
    }

    /// A puller for `mig` that asks for `batch` records (at least one) and at
    /// most `bytes` of keys and values (past the first record) at a time: a
    /// batch is one record of the new owner's log, which must fit its buffer.
    pub fn with_batch(mig: Migration, batch: u32, bytes: u32) -> (Puller, Step) {
        let mut p = Puller {
            mig,
            batch: batch.max(1),
            batch_bytes: bytes,
            after: None,
            phase: Phase::Asking,
            pending: None,
            first: None,
            begun: false,
            ahead: Ahead::None,
            keys: 0,
            bytes: 0,
        };
        let s = p.ask();
        (p, s)
    }

    /// Its migration.
    pub fn migration(&self) -> &Migration {
        &self.mig
    }

    /// Records and bytes pulled so far.
    pub fn pulled(&self) -> (u64, u64) {
        (self.keys, self.bytes)
    }

    /// Whether it is over.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    fn step(&mut self, phase: Phase, s: Step) -> Step {
        self.phase = phase;
        self.pending = Some(s.clone());
        s
    }

    /// The ask for the records after the last key pulled.
    fn next_ask(&self) -> Step {
        let (range, after) = (self.mig.range, self.after.clone());
        Step::Ask { from: self.mig.from, range, after, max: self.batch, max_bytes: self.batch_bytes }
    }

    fn ask(&mut self) -> Step {
        let s = self.next_ask();
        self.step(Phase::Asking, s)
    }

    fn drop_step(&mut self) -> Step {
        self.step(Phase::Dropping, Step::Drop { from: self.mig.from, range: self.mig.range })
    }

    /// The old owner's answer to [`Step::Ask`]: `pairs` in key order, whether it
    /// has more, and (to the first ask) its table of writers. A batch out of
    /// order or out of the range, or a first one without writers (a broken peer),
    /// is asked again.
    pub fn batch(&mut self, pairs: Vec<Pair>, writers: Option<Vec<Writer>>, more: bool) -> Step {
        let first = !self.begun;
        if self.phase != Phase::Asking || (first && writers.is_none()) {
            return self.retry();
        }
        if !self.follows(&pairs) {
            return self.retry();
        }
        if let (true, Some(writers)) = (first, writers) {
            self.first = Some((pairs, more));
            let rec = Update::BeginPull { migration: self.mig.id, range: self.mig.range, writers };
            return self.step(Phase::Beginning, Step::Append(rec));
        }
        self.log_batch(pairs, more)
    }

    /// Whether `pairs` are in key order, after the last key pulled, and in the
    /// range.
    fn follows(&self, pairs: &[Pair]) -> bool {
        pairs.windows(2).all(|w| w[0].0 < w[1].0)
            && pairs.first().map_or(true, |(k, _)| self.after.as_ref().map_or(true, |a| k > a))
            && pairs.iter().all(|(k, _)| self.mig.range.contains(super::key_hash(k)))
    }

    /// While a batch is being logged and the old owner has more: the ask for
    /// the next batch, to do at the same time (once per batch; `None` otherwise).
    /// Its answer goes to [`Puller::ahead_batch`], or [`Puller::ahead_failed`]
    /// if there was none, before [`Puller::appended`] is called.
    pub fn ask_ahead(&mut self) -> Option<Step> {
        if self.phase != (Phase::Logging { last: false }) || self.ahead != Ahead::None {
            return None;
        }
        self.ahead = Ahead::Asked;
        Some(self.next_ask())
    }

    /// The old owner's answer to the ask of [`Puller::ask_ahead`]; kept until the
    /// batch being logged is in. Whether it was taken: an answer nothing asked for
    /// (a late one, after [`Puller::ahead_failed`] or a step that moved on), or
    /// out of order or range, is not, and the batch is asked for again in turn.
    pub fn ahead_batch(&mut self, pairs: Vec<Pair>, more: bool) -> bool {
        let asked = self.ahead == Ahead::Asked && self.phase == (Phase::Logging { last: false });
        self.ahead = match asked && self.follows(&pairs) {
            true => Ahead::Got(pairs, more),
            false => Ahead::None,
        };
        matches!(self.ahead, Ahead::Got(..))
    }

    /// The ask of [`Puller::ask_ahead`] brought nothing: the batch is asked for
    /// again once the one being logged is in.
    pub fn ahead_failed(&mut self) {
        if self.ahead == Ahead::Asked {
            self.ahead = Ahead::None;
        }
    }

    fn log_batch(&mut self, pairs: Vec<Pair>, more: bool) -> Step {
        if pairs.is_empty() {
            return if more { self.ask() } else { self.drop_step() };
        }
        if let Some((k, _)) = pairs.last() {
            self.after = Some(k.clone());
        }
        self.keys += pairs.len() as u64;
        self.bytes += pairs.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum::<u64>();
        let rec = Update::Pulled { migration: self.mig.id, pairs };
        self.step(Phase::Logging { last: !more }, Step::Append(rec))
    }

    /// The record of the last [`Step::Append`] is in this shard's log.
    pub fn appended(&mut self) -> Step {
        match self.phase {
            Phase::Beginning => {
                self.begun = true;
                let (pairs, more) = self.first.take().unwrap_or_default();
                self.log_batch(pairs, more)
            }
            Phase::Logging { last: false } => match std::mem::replace(&mut self.ahead, Ahead::None) {
                Ahead::Got(pairs, more) => self.log_batch(pairs, more),
                // Not asked, or its answer is not in: asked (again) now.
                Ahead::None | Ahead::Asked => self.ask(),
            },
            Phase::Logging { last: true } => self.drop_step(),
            _ => self.retry(),
        }
    }

    /// The old owner logged the drop.
    pub fn dropped(&mut self) -> Step {
        if self.phase != Phase::Dropping {
            return self.retry();
        }
        self.step(Phase::Finishing, Step::Edit(MapEdit::Finish { id: self.mig.id }))
    }

    /// A view holds the edit that ends the migration.
    pub fn edited(&mut self) -> Step {
        if self.phase != Phase::Finishing {
            return self.retry();
        }
        self.step(Phase::Done, Step::Done)
    }

    /// The last step failed (or its answer made no sense): the same step again.
    pub fn retry(&mut self) -> Step {
        self.pending.clone().unwrap_or(Step::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::key_hash;

    fn pair(k: &str) -> Pair {
        (k.as_bytes().to_vec(), b"v".to_vec())
    }

    #[test]
    fn a_pull_asks_logs_drops_and_finishes_in_order() {
        let mig = Migration { id: 3, range: Range::ALL, from: 0, to: 1 };
        let (mut p, s) = Puller::new(mig);
        let max_bytes = BATCH_BYTES;
        assert_eq!(s, Step::Ask { from: 0, range: Range::ALL, after: None, max: BATCH_KEYS, max_bytes });
        assert_eq!(p.batch(vec![pair("a")], None, true), p.retry(), "the first batch brings the writers");
        let ws = vec![Writer { client: 4, seq: 9 }];
        let s = p.batch(vec![pair("a"), pair("b")], Some(ws.clone()), true);
        assert_eq!(s, Step::Append(Update::BeginPull { migration: 3, range: Range::ALL, writers: ws }));
        assert_eq!(p.retry(), s, "a failed append is appended again");
        let s = p.appended();
        assert_eq!(s, Step::Append(Update::Pulled { migration: 3, pairs: vec![pair("a"), pair("b")] }));
        let s = p.appended();
        assert_eq!(s, Step::Ask { from: 0, range: Range::ALL, after: Some(b"b".to_vec()), max: BATCH_KEYS, max_bytes });
        assert_eq!(p.batch(vec![pair("a")], None, false), s, "a batch that goes back is asked again");
        let s = p.batch(vec![pair("c")], None, false);
        assert_eq!(s, Step::Append(Update::Pulled { migration: 3, pairs: vec![pair("c")] }));
        assert_eq!(p.appended(), Step::Drop { from: 0, range: Range::ALL });
        assert_eq!(p.dropped(), Step::Edit(MapEdit::Finish { id: 3 }));
        assert_eq!(p.edited(), Step::Done);
        assert!(p.is_done());
        assert_eq!(p.pulled(), (3, 6));
    }

    /// A pull that asks each next batch while the last is logged.
    fn begun() -> Puller {
        let mig = Migration { id: 3, range: Range::ALL, from: 0, to: 1 };
        let (mut p, _) = Puller::new(mig);
        assert!(p.ask_ahead().is_none(), "nothing is logged yet");
        assert!(matches!(p.batch(vec![pair("a")], Some(Vec::new()), true), Step::Append(Update::BeginPull { .. })));
        assert!(p.ask_ahead().is_none(), "the writers are logged first: no batch is in the log yet");
        assert_eq!(p.appended(), Step::Append(Update::Pulled { migration: 3, pairs: vec![pair("a")] }));
        p
    }

    #[test]
    fn the_next_batch_is_asked_while_the_last_is_logged() {
        let mut p = begun();
        let max_bytes = BATCH_BYTES;
        let ask = Step::Ask { from: 0, range: Range::ALL, after: Some(b"a".to_vec()), max: BATCH_KEYS, max_bytes };
        assert_eq!(p.ask_ahead(), Some(ask));
        assert_eq!(p.ask_ahead(), None, "one ask ahead at a time");
        assert!(p.ahead_batch(vec![pair("b"), pair("c")], true));
        assert_eq!(p.ask_ahead(), None, "its answer is in already");
        // The append of "a" is done: "b", "c" are logged without another ask.
        assert_eq!(p.appended(), Step::Append(Update::Pulled { migration: 3, pairs: vec![pair("b"), pair("c")] }));
        assert!(p.ask_ahead().is_some());
        assert!(p.ahead_batch(vec![pair("d")], false));
        assert_eq!(p.appended(), Step::Append(Update::Pulled { migration: 3, pairs: vec![pair("d")] }));
        assert_eq!(p.ask_ahead(), None, "the old owner has no more");
        assert_eq!(p.appended(), Step::Drop { from: 0, range: Range::ALL });
        assert_eq!(p.pulled().0, 4);
    }

    #[test]
    fn an_answer_ahead_that_failed_came_late_or_goes_back_is_asked_again_in_turn() {
        let max_bytes = BATCH_BYTES;
        let next = Step::Ask { from: 0, range: Range::ALL, after: Some(b"a".to_vec()), max: BATCH_KEYS, max_bytes };
        // Failed: asked again once the append is in.
        let mut p = begun();
        assert!(p.ask_ahead().is_some());
        p.ahead_failed();
        assert_eq!(p.appended(), next);
        // Out of order: refused, asked again in turn.
        let mut p = begun();
        assert!(p.ask_ahead().is_some());
        assert!(!p.ahead_batch(vec![pair("a")], true), "a batch that goes back");
        assert_eq!(p.appended(), next);
        // Not answered before the append was in: asked again; the late answer is not taken.
        let mut p = begun();
        assert!(p.ask_ahead().is_some());
        assert_eq!(p.appended(), next);
        assert!(!p.ahead_batch(vec![pair("b")], false), "an answer nothing waits for");
        assert_eq!(
            p.batch(vec![pair("b")], None, false),
            Step::Append(Update::Pulled { migration: 3, pairs: vec![pair("b")] })
        );
        // Never asked: nothing is taken.
        let mut p = begun();
        assert!(!p.ahead_batch(vec![pair("b")], false));
        assert_eq!(p.appended(), next);
    }

    #[test]
    fn a_failed_append_keeps_the_answer_ahead() {
        let mut p = begun();
        assert!(p.ask_ahead().is_some());
        assert!(p.ahead_batch(vec![pair("b")], false));
        let again = p.retry();
        assert_eq!(again, Step::Append(Update::Pulled { migration: 3, pairs: vec![pair("a")] }));
        assert_eq!(p.ask_ahead(), None, "the answer is kept, not asked for again");
        assert_eq!(p.appended(), Step::Append(Update::Pulled { migration: 3, pairs: vec![pair("b")] }));
    }

    #[test]
    fn records_outside_the_range_are_refused() {
        let h = key_hash(b"a");
        let mig = Migration { id: 1, range: Range::one(h), from: 0, to: 1 };
        let (mut p, first) = Puller::new(mig);
        assert_eq!(p.batch(vec![pair("zz-not-in-it")], Some(Vec::new()), false), first);
        assert!(matches!(p.batch(vec![pair("a")], Some(Vec::new()), false), Step::Append(_)));
        // An empty first batch logs the writers, then goes to the drop.
        let (mut p, _) = Puller::new(mig);
        assert!(matches!(p.batch(Vec::new(), Some(Vec::new()), false), Step::Append(Update::BeginPull { .. })));
        assert_eq!(p.appended(), Step::Drop { from: 0, range: Range::one(h) });
    }
}
