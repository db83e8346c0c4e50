//! Where delivery puts a topic's samples for each local reader: the type-erased
//! side of a [`crate::DataReader`] (a listener, or a bounded queue), and the sample
//! bytes as delivery hands them over ([`Src`]). The topic feeds it; the typed reader
//! drains it. Neither depends on the other.

use crate::qos::{Level, Qos};
use crate::sample::{SampleInfo, WriterId, HEADER};
use crate::IncompatibleQos;
use sst::sync::lock;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

/// A sample's bytes (header and payload) as delivery hands them over: in their
/// slot, or in a buffer (history, catch-up).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Src<'a> {
    Slot(smc::Message<'a>),
    Bytes(&'a [u8]),
}

impl Src<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Src::Slot(m) => m.len(),
            Src::Bytes(b) => b.len(),
        }
    }
    pub(crate) fn word(&self, i: usize) -> u64 {
        match self {
            Src::Slot(m) => m.word(i),
            Src::Bytes(b) => u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("a whole word")),
        }
    }
    pub(crate) fn copy_all(self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        self.read_all(&mut v);
        v
    }
    /// Copies header and payload into `out`, which is as long as them.
    pub(crate) fn read_all(&self, out: &mut [u8]) {
        match self {
            Src::Slot(m) => m.read(out),
            Src::Bytes(b) => out.copy_from_slice(b),
        }
    }
    /// The header's length (a member's or a client's sample; see [`crate::sample`]).
    pub(crate) fn header_len(&self) -> usize {
        crate::sample::header_len(self.word(0))
    }
    /// True if the bytes hold a whole header (checked before any other use).
    pub(crate) fn has_header(&self) -> bool {
        self.len() >= HEADER && self.len() >= self.header_len()
    }
    /// Copies the payload (after the header) into `out`, which is as long as it.
    pub(crate) fn read_payload(&self, out: &mut [u8]) {
        let h = self.header_len();
        match self {
            Src::Slot(m) => m.read_at(h, out),
            Src::Bytes(b) => out.copy_from_slice(&b[h..]),
        }
    }
    /// Copies `out.len()` bytes from byte `at` (a multiple of 8) of the message.
    pub(crate) fn read_at(&self, at: usize, out: &mut [u8]) {
        match self {
            Src::Slot(m) => m.read_at(at, out),
            Src::Bytes(b) => out.copy_from_slice(&b[at..at + out.len()]),
        }
    }
    pub(crate) fn payload_len(&self) -> usize {
        self.len() - self.header_len()
    }
}

/// A reader's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReaderStatus {
    /// Samples that reached this reader (live and history).
    pub received: u64,
    /// Samples dropped because the queue held its history's limit untaken (the
    /// oldest go first), and samples of the topic's order this reader never got:
    /// those delivered while its participant was out of the domain (removed, then
    /// rejoined; see `views::config::Config::rejoin`) that the other members' history
    /// no longer held (an Ordered topic keeps none).
    pub lost: u64,
    /// Samples that could not be decoded or stored, and other failures (history
    /// not received, log write failed).
    pub rejected: u64,
    /// Why the last one was rejected.
    pub last_rejected: Option<String>,
    /// Writers whose offer does not meet this reader's request.
    pub incompatible: IncompatibleQos,
}

pub(crate) struct Raw {
    pub(crate) info: SampleInfo,
    pub(crate) payload: Box<[u8]>,
}

pub(crate) type InPlaceFn = Box<dyn FnMut(&SampleInfo, &Src<'_>) + Send>;

pub(crate) struct Queue {
    pub(crate) samples: VecDeque<Raw>,
    pub(crate) status: ReaderStatus,
}

/// The type-erased side of a reader that delivery feeds.
pub(crate) struct ReaderCore {
    pub(crate) id: u32,
    pub(crate) level: Level,
    keep: usize,
    pub(crate) q: Mutex<Queue>,
    pub(crate) cond: Condvar,
    pub(crate) listener: Mutex<Option<InPlaceFn>>,
    /// Samples handed to a listener (counted apart: no queue lock per sample).
    pub(crate) taken_by_listener: sst::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for ReaderCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReaderCore").field("id", &self.id).field("level", &self.level).finish_non_exhaustive()
    }
}

impl ReaderCore {
    pub(crate) fn new(id: u32, qos: &Qos) -> ReaderCore {
        ReaderCore {
            id,
            level: qos.level,
            keep: qos.keep(),
            q: Mutex::new(Queue { samples: VecDeque::new(), status: ReaderStatus::default() }),
            cond: Condvar::new(),
            listener: Mutex::new(None),
            taken_by_listener: sst::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A sample for this reader: to its listener, or into its queue.
    pub(crate) fn offer(&self, info: &SampleInfo, src: Src<'_>) {
        if let Some(f) = lock(&self.listener).as_mut() {
            self.taken_by_listener.fetch_add(1, sst::sync::atomic::Ordering::Relaxed);
            f(info, &src);
            return;
        }
        let mut payload = vec![0u8; src.payload_len()].into_boxed_slice();
        src.read_payload(&mut payload);
        let mut q = lock(&self.q);
        q.status.received += 1;
        q.samples.push_back(Raw { info: *info, payload });
        if q.samples.len() > self.keep {
            q.samples.pop_front();
            q.status.lost += 1;
        }
        drop(q);
        self.cond.notify_all();
    }

    /// `n` samples of the topic's order will never reach this reader.
    pub(crate) fn missed(&self, n: u64) {
        lock(&self.q).status.lost += n;
    }

    pub(crate) fn reject(&self, why: String) {
        let mut q = lock(&self.q);
        q.status.rejected += 1;
        q.status.last_rejected = Some(why);
    }

    /// A writer whose sample this reader does not get: its offer is below the
    /// request (a client's writer, whose level its samples carry).
    pub(crate) fn note_incompatible(&self, w: WriterId, level: Level) {
        lock(&self.q).status.incompatible.add(w, level);
    }

    pub(crate) fn set_incompatible(&self, bad: Vec<(WriterId, Level)>) {
        lock(&self.q).status.incompatible.update(bad);
    }
}
