//! A topic's history at one member (Volatile and Logged): the last samples, kept
//! per instance for a keyed topic, and the samples a late joiner still needs.
//!
//! A late joiner asks for the history before the view it joined in (its seam), but
//! the topic goes on delivering while it asks; each new sample may push an older
//! one out. So when a view brings a new member into the topic, the seam is
//! *pinned*: until the pin expires, samples before it that the history drops are
//! kept aside, and a late joiner gets exactly the history as it stood at the seam
//! (the last `n` of each instance under `KeepLast(n)`).

use crate::instance::{HandleMap, InstanceHandle, PREFIX};
use crate::qos::Level;
use crate::qos::{History as Policy, Qos};
use crate::sample::{info_of, SampleInfo, HEADER};
use crate::sink::Src;
use spindle_sst::transport::NodeId;
use spindle_views::view::ViewId;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime};

/// A sample kept in history: where it stands in the topic's order and its bytes
/// (header and payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) seq: u64,
    pub(crate) view: ViewId,
    pub(crate) node: u32,
    pub(crate) bytes: Vec<u8>,
}

impl Entry {
    /// The 16 bytes in front of the sample in its log record: view, node, zero.
    pub(crate) fn record_head(&self) -> [u8; 16] {
        let mut h = [0u8; 16];
        h[..8].copy_from_slice(&self.view.0.to_le_bytes());
        h[8..12].copy_from_slice(&self.node.to_le_bytes());
        h
    }

    /// Decodes log record `seq` (`None` if it is too short to hold a sample).
    pub(crate) fn from_record(seq: u64, r: &[u8]) -> Option<Entry> {
        if r.len() < 16 + HEADER || !Src::Bytes(&r[16..]).has_header() {
            return None;
        }
        let view = ViewId(u64::from_le_bytes(r[..8].try_into().expect("8 bytes")));
        let node = u32::from_le_bytes(r[8..12].try_into().expect("4 bytes"));
        Some(Entry { seq, view, node, bytes: r[16..].to_vec() })
    }

    /// Its info, and for a client's sample the level its writer offered. (Entries
    /// hold at least a whole header: delivery, the log and catch-up check that.)
    pub(crate) fn info(&self, from_history: bool) -> (SampleInfo, Option<Level>) {
        let src = Src::Bytes(&self.bytes);
        let (info, level) = info_of(|i| src.word(i), NodeId(self.node), self.view, self.seq, from_history);
        (info, level.map(Level::from_wire))
    }
}

/// The history of one topic at one member.
#[derive(Debug)]
pub(crate) struct History {
    /// Per instance (keyed topics): the most kept of one instance.
    per_instance: usize,
    /// The most kept in all.
    total: usize,
    keyed: bool,
    lifespan: Option<Duration>,
    /// Unkeyed topics: in order.
    flat: VecDeque<Entry>,
    /// Keyed topics: by topic sequence number, and each instance's, oldest first.
    by_seq: BTreeMap<u64, Entry>,
    per: HandleMap<VecDeque<u64>>,
    /// Seams late joiners may still ask about (seq, until when), and the samples
    /// before one that the history dropped since it was pinned, each with the
    /// sequence number of the sample whose arrival dropped it.
    pins: Vec<(u64, Instant)>,
    pinned: BTreeMap<u64, (Entry, u64)>,
}

impl History {
    pub(crate) fn new(qos: &Qos, keyed: bool) -> History {
        let (per_instance, total) = match (qos.history, keyed) {
            (Policy::KeepLast(n), true) => (n.max(1) as usize, qos.max_samples.max(1) as usize),
            (Policy::KeepAll, true) => (usize::MAX, qos.max_samples.max(1) as usize),
            (_, false) => (usize::MAX, qos.keep()),
        };
        History {
            per_instance,
            total,
            keyed,
            lifespan: qos.lifespan,
            flat: VecDeque::new(),
            by_seq: BTreeMap::new(),
            per: HandleMap::default(),
            pins: Vec::new(),
            pinned: BTreeMap::new(),
        }
    }

    /// The instance of a keyed sample's bytes (`NIL` if they hold no prefix: the
    /// readers reject such a sample; the history keeps it with the unkeyed ones).
    fn instance_of(bytes: &[u8]) -> InstanceHandle {
        let src = Src::Bytes(bytes);
        let at = src.header_len();
        if bytes.len() < at + PREFIX {
            return InstanceHandle::NIL;
        }
        InstanceHandle(src.word(at / 8))
    }

    /// A buffer to copy the next sample into: the oldest entry's, when the history
    /// is full and no seam is pinned (no allocation in the steady state).
    pub(crate) fn spare(&mut self) -> Vec<u8> {
        if !self.keyed && self.pins.is_empty() && self.flat.len() >= self.total {
            if let Some(e) = self.flat.pop_front() {
                return e.bytes;
            }
        }
        Vec::new()
    }

    /// Adds the newest sample at `now`; drops what the policy no longer keeps.
    pub(crate) fn push(&mut self, e: Entry, now: Instant) {
        let seq = e.seq;
        if !self.keyed {
            self.flat.push_back(e);
            while self.flat.len() > self.total {
                if let Some(old) = self.flat.pop_front() {
                    self.dropped(old, seq, now);
                }
            }
            return;
        }
        let h = History::instance_of(&e.bytes);
        self.by_seq.insert(seq, e);
        let mine = self.per.entry(h).or_default();
        mine.push_back(seq);
        let mut out = Vec::new();
        if mine.len() > self.per_instance {
            out.extend(mine.pop_front());
        }
        while self.by_seq.len() - out.len() > self.total {
            let Some((&oldest, _)) = self.by_seq.iter().find(|(s, _)| !out.contains(s)) else { break };
            out.push(oldest);
        }
        for s in out {
            if let Some(old) = self.by_seq.remove(&s) {
                let hi = History::instance_of(&old.bytes);
                if let Some(q) = self.per.get_mut(&hi) {
                    q.retain(|x| *x != s);
                    if q.is_empty() {
                        self.per.remove(&hi);
                    }
                }
                self.dropped(old, seq, now);
            }
        }
    }

    /// An entry the policy dropped when sample `by` came: kept aside if a pinned
    /// seam still needs it (it stood in the history at that seam).
    fn dropped(&mut self, e: Entry, by: u64, now: Instant) {
        self.pins.retain(|(_, until)| *until > now);
        if self.pins.is_empty() {
            self.pinned.clear();
        } else if self.pins.iter().any(|(seam, _)| e.seq < *seam && by >= *seam) {
            self.pinned.insert(e.seq, (e, by));
        }
    }

    /// A view that brings a new member into the topic starts at `seq`: keep what
    /// stands before it for `for_how_long` from `now` (the late joiner's catch-up).
    pub(crate) fn pin(&mut self, seq: u64, for_how_long: Duration, now: Instant) {
        self.pins.retain(|(_, until)| *until > now);
        self.pins.push((seq, now + for_how_long));
    }

    /// The oldest sequence number held (not the pinned ones, which only the late
    /// joiners of their seams get: a reader that starts here is owed the rest).
    pub(crate) fn front_seq(&self) -> Option<u64> {
        if self.keyed {
            self.by_seq.keys().next().copied()
        } else {
            self.flat.front().map(|e| e.seq)
        }
    }

    /// The entries with `from <= seq < to` that stood in the history when sample
    /// `to` came (pinned ones included), in order; with `wall`, only those that
    /// have not outlived the topic's lifespan at that wall-clock time.
    pub(crate) fn range(&self, from: u64, to: u64, wall: Option<SystemTime>) -> Vec<&Entry> {
        let mut out: Vec<&Entry> = if self.keyed {
            self.by_seq.range(from..to.max(from)).map(|(_, e)| e).collect()
        } else {
            self.flat.iter().filter(|e| e.seq >= from && e.seq < to).collect()
        };
        if !self.pinned.is_empty() {
            out.extend(self.pinned.range(from..to.max(from)).filter(|(_, (_, by))| *by >= to).map(|(_, (e, _))| e));
            out.sort_by_key(|e| e.seq);
            out.dedup_by_key(|e| e.seq);
        }
        if let (Some(life), Some(wall)) = (self.lifespan, wall) {
            out.retain(|e| !expired(e, life, wall));
        }
        out
    }

    /// The instances it holds samples of.
    #[cfg(test)]
    fn instances(&self) -> usize {
        if self.keyed {
            self.per.len()
        } else {
            usize::from(!self.flat.is_empty())
        }
    }
}

/// True if the entry's source timestamp is more than `life` before `wall`.
fn expired(e: &Entry, life: Duration, wall: SystemTime) -> bool {
    let (info, _) = e.info(true);
    wall.duration_since(info.source_timestamp).is_ok_and(|age| age > life)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::{prefix, Kind};
    use crate::qos::History as Policy;
    use spindle_views::view::ViewId;

    fn entry(seq: u64, instance: u64) -> Entry {
        let mut bytes = crate::sample::header(1, seq + 1, std::time::SystemTime::now())
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect::<Vec<u8>>();
        for w in prefix(InstanceHandle(instance), Kind::Data) {
            bytes.extend(w.to_le_bytes());
        }
        Entry { seq, view: ViewId(1), node: 0, bytes }
    }

    fn seqs(h: &History, from: u64, to: u64) -> Vec<u64> {
        h.range(from, to, Some(SystemTime::now())).iter().map(|e| e.seq).collect()
    }

    #[test]
    fn keyed_history_keeps_the_last_n_of_every_instance() {
        let mut h = History::new(&Qos::volatile(Policy::KeepLast(2)), true);
        for (seq, inst) in [(0, 1), (1, 2), (2, 1), (3, 1), (4, 3), (5, 1)] {
            h.push(entry(seq, inst), Instant::now());
        }
        assert_eq!(seqs(&h, 0, 99), vec![1, 3, 4, 5], "instance 1 keeps 3 and 5; 2 and 3 keep theirs");
        assert_eq!(h.instances(), 3);
        assert_eq!(h.front_seq(), Some(1));
    }

    #[test]
    fn a_pinned_seam_keeps_what_stood_before_it() {
        let mut h = History::new(&Qos::volatile(Policy::KeepLast(3)), false);
        for seq in 0..5 {
            let spare = h.spare();
            let mut e = entry(seq, 1);
            if !spare.is_empty() {
                assert!(spare.capacity() >= e.bytes.len());
            }
            e.bytes.extend_from_slice(&[]);
            h.push(e, Instant::now());
        }
        assert_eq!(seqs(&h, 0, 5), vec![2, 3, 4]);
        h.pin(5, Duration::from_secs(60), Instant::now());
        for seq in 5..9 {
            h.push(entry(seq, 1), Instant::now());
        }
        assert_eq!(seqs(&h, 0, 5), vec![2, 3, 4], "the last three before the seam, though the history moved on");
        assert_eq!(h.front_seq(), Some(6), "what a reader starting now can have");
        assert_eq!(
            h.range(0, u64::MAX, Some(SystemTime::now())).iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![6, 7, 8]
        );
        // A second joiner, later: it gets the history as it stood at its own seam,
        // not what the first seam kept aside.
        h.pin(9, Duration::from_secs(60), Instant::now());
        for seq in 9..11 {
            h.push(entry(seq, 1), Instant::now());
        }
        assert_eq!(seqs(&h, 0, 9), vec![6, 7, 8]);
        assert_eq!(seqs(&h, 0, 5), vec![2, 3, 4], "the first seam's view is unchanged");
    }
}
