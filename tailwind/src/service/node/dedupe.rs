//! Safe retries: appends that carry a [`Tag`] (producer, number) land once.
//!
//! The tag is written with the record ([`crate::format::TAGGED`]), so the log
//! itself says which producer numbers it holds. The primary keeps, per producer,
//! the numbers of its last [`PER_PRODUCER`] tagged records and where they are;
//! a new primary rebuilds that from the last [`SCAN_SEGMENTS`] committed segments
//! (after dropping what it had noted past the recovered end). A tagged append is
//! then:
//! - already in the log (every number of the batch noted): its numbers are
//!   returned and nothing is written;
//! - new (its first number above every number noted for the producer): appended;
//! - anything else (part of the batch in the log, or a number below the newest
//!   noted one that the log does not hold): refused with
//!   [`AppendError::Sequence`]: a producer retries a batch whole, in order.
//!
//! A retry is recognized while its first attempt is among the producer's last
//! [`PER_PRODUCER`] tagged records and, across a failover, in the last
//! [`SCAN_SEGMENTS`] segments.

use super::*;
use crate::format::Tag;

/// Tagged records remembered per producer.
pub const PER_PRODUCER: usize = 1024;
/// Committed segments a new primary reads the tags of.
pub const SCAN_SEGMENTS: usize = 4;

/// The primary's record of the tagged appends in the log.
#[derive(Debug, Default)]
pub struct Dedupe {
    producers: HashMap<u64, BTreeMap<u64, u64>>,
    /// Everything before this record number has been noted (or scanned).
    pub covered: u64,
}

/// What to do with a tagged append.
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// Not in the log: append it.
    New,
    /// In the log already, at these numbers.
    Done(Vec<Lsn>),
    /// Neither: refuse, saying why.
    Bad(String),
}

impl Dedupe {
    /// What to do with `n` records numbered from `first.seq` by `first.producer`.
    pub fn check(&self, first: Tag, n: usize) -> Check {
        let Some(seen) = self.producers.get(&first.producer) else { return Check::New };
        let newest = seen.keys().next_back().copied().unwrap_or(0);
        let lsns: Vec<Lsn> = (0..n as u64).filter_map(|i| seen.get(&(first.seq + i)).map(|l| Lsn(*l))).collect();
        if lsns.len() == n && n > 0 {
            return Check::Done(lsns);
        }
        if lsns.is_empty() && first.seq > newest {
            return Check::New;
        }
        Check::Bad(format!(
            "producer {} numbers {}..{}: {} of them in the log, its newest there is {newest}",
            first.producer,
            first.seq,
            first.seq + n as u64,
            lsns.len()
        ))
    }

    /// Notes that `tag`'s record is record `lsn` of the log.
    pub fn note(&mut self, tag: Tag, lsn: u64) {
        let seen = self.producers.entry(tag.producer).or_default();
        seen.insert(tag.seq, lsn);
        while seen.len() > PER_PRODUCER {
            seen.pop_first();
        }
    }

    /// Forgets records from `end` on (not in the log a view change recovered).
    pub fn cut(&mut self, end: u64) {
        for seen in self.producers.values_mut() {
            seen.retain(|_, l| *l < end);
        }
        self.producers.retain(|_, s| !s.is_empty());
        self.covered = self.covered.min(end);
    }
}

impl Shared {
    /// At a new primary, before it takes appends: the tags of the log up to
    /// `next`, from the committed segments (`segments`, first record -> records)
    /// it has not noted yet (the last [`SCAN_SEGMENTS`] at most).
    pub fn rebuild_dedupe(&self, segments: &BTreeMap<u64, u64>, next: u64) -> Result<(), String> {
        let mut d = lock(&self.dedupe);
        d.cut(next);
        let from = d.covered;
        let recent: Vec<(u64, u64)> = segments.iter().rev().take(SCAN_SEGMENTS).map(|(b, c)| (*b, *c)).collect();
        for (base, count) in recent.into_iter().rev() {
            if base + count <= from {
                continue;
            }
            let tags = self.read_segment_tags(base, count).map_err(|e| e.to_string())?;
            for (i, tag) in tags.into_iter().enumerate() {
                if let (Some(t), lsn) = (tag, base + i as u64) {
                    if lsn >= from {
                        d.note(t, lsn);
                    }
                }
            }
        }
        d.covered = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(producer: u64, seq: u64) -> Tag {
        Tag { producer, seq }
    }

    #[test]
    fn new_done_and_refused() {
        let mut d = Dedupe::default();
        assert_eq!(d.check(tag(1, 5), 2), Check::New);
        d.note(tag(1, 5), 10);
        d.note(tag(1, 6), 11);
        assert_eq!(d.check(tag(1, 5), 2), Check::Done(vec![Lsn(10), Lsn(11)]));
        assert_eq!(d.check(tag(1, 6), 1), Check::Done(vec![Lsn(11)]));
        assert_eq!(d.check(tag(1, 7), 3), Check::New);
        assert_eq!(d.check(tag(2, 0), 1), Check::New);
        assert!(matches!(d.check(tag(1, 6), 2), Check::Bad(_)), "half in the log");
        assert!(matches!(d.check(tag(1, 3), 1), Check::Bad(_)), "below the newest, not held");
        // A view change recovered the log up to record 11: number 6 is not in it.
        d.cut(11);
        assert_eq!(d.check(tag(1, 6), 1), Check::New);
        assert_eq!(d.check(tag(1, 5), 1), Check::Done(vec![Lsn(10)]));
        for i in 0..(PER_PRODUCER as u64 + 10) {
            d.note(tag(3, i), 100 + i);
        }
        assert_eq!(d.producers[&3].len(), PER_PRODUCER);
        assert!(matches!(d.check(tag(3, 0), 1), Check::Bad(_)), "forgotten: refused, not appended twice");
    }
}
