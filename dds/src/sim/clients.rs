//! Simulated clients: one writer and one reader each, through one member at a
//! time. A client's writes go out through its member; on a failover it moves to
//! another member, sends again what was not acknowledged, and resumes its reader
//! where it stopped (history in pages, then live samples).

use super::member::{key_of, SampleKey};
use crate::engine::record::Fx;
use crate::engine::{Now, TopicEngine};
use crate::qos::Level;
use spindle_sst::transport::NodeId;

/// The reader number and the writer number every client uses.
pub(crate) const READER: u32 = 0;
pub(crate) const WRITER: u32 = 0;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Client {
    pub(crate) id: u64,
    /// The member it is attached to.
    pub(crate) at: Option<NodeId>,
    pub(crate) next_write: u64,
    pub(crate) writes_left: u64,
    /// The highest number acknowledged (by any member: an ack means delivered).
    pub(crate) acked: u64,
    /// (topic_seq, identity, from history) of each sample its reader got.
    pub(crate) offers: Vec<(u64, SampleKey, bool)>,
    /// Samples its reader was told are lost (no longer held where it resumed).
    pub(crate) lost: u64,
    /// The next topic_seq its reader wants.
    pub(crate) expected: u64,
    /// Where its reader started (the oldest sample held where it first attached).
    pub(crate) origin: Option<u64>,
    /// Pages of history it fetched.
    pub(crate) pages: u64,
    /// Each attachment: the index of the first offer after it, and its step.
    pub(crate) attaches: Vec<(usize, u64)>,
    /// Offers the invariants checked already.
    pub(crate) checked: usize,
}

impl Client {
    pub(crate) fn new(id: u64, writes: u64) -> Client {
        Client {
            id,
            at: None,
            next_write: 1,
            writes_left: writes,
            acked: 0,
            offers: Vec::new(),
            lost: 0,
            expected: 0,
            origin: None,
            pages: 0,
            attaches: Vec::new(),
            checked: 0,
        }
    }

    /// Its sample number `seq`, as its member sends it.
    pub(crate) fn sample(&self, level: Level, seq: u64, instance: u64, wall_ns: u64) -> Vec<u8> {
        let h = crate::sample::client_header(self.id, WRITER, level as u8, seq, wall_ns);
        super::member::sample_bytes(&h, instance, seq)
    }

    /// Attaches its reader at member engine `e` (resuming where it stopped if it
    /// read before) and fetches the history the member owes it, in pages of
    /// `page` bytes (at `step`).
    pub(crate) fn attach(&mut self, at: NodeId, e: &mut TopicEngine<u32>, page: usize, (now, step): (Now, u64)) {
        self.attaches.push((self.offers.len(), step));
        let resume = (!self.offers.is_empty() || self.at.is_some()).then_some(self.expected);
        self.at = Some(at);
        let start = e.add_client_reader(self.id, READER, Level::Unordered, resume);
        self.lost += start.lost;
        self.origin.get_or_insert(start.history.0);
        if super::tracing_on() {
            eprintln!(
                "client {} attaches at {at}: resume {resume:?} start {start:?} had {:?}",
                self.id,
                self.offers.last()
            );
        }
        let (mut from, to) = start.history;
        while from < to {
            let Some(p) = e.client_history(self.id, READER, (from, to), page, now) else { break };
            self.pages += 1;
            self.lost += p.lost;
            for entry in p.entries {
                let (info, _) = entry.info(true);
                self.accept(entry.seq, key_of(&info), true);
            }
            if p.next <= from {
                break;
            }
            from = p.next;
        }
        self.expected = self.expected.max(to);
    }

    /// A sample for its reader, dropped if it had it: a member it moved to that
    /// had delivered less than the one before relays some again (the client's
    /// driver drops those the same way, by number).
    fn accept(&mut self, seq: u64, key: SampleKey, history: bool) {
        if self.offers.last().is_some_and(|l| seq <= l.0) {
            return;
        }
        self.offers.push((seq, key, history));
        self.expected = seq + 1;
    }

    /// Takes what member `from` emitted for clients: its samples and acks.
    pub(crate) fn take(&mut self, from: NodeId, fx: &[Fx]) {
        for f in fx {
            match f {
                Fx::Acked { client, writer: WRITER, seq } if *client == self.id => self.acked = self.acked.max(*seq),
                Fx::Relay { info, to, .. } if self.at == Some(from) && to.contains(&(self.id, READER)) => {
                    self.accept(info.topic_seq, key_of(info), false);
                }
                _ => {}
            }
        }
    }

    /// The numbers it must send again after a failover (written, not acknowledged).
    pub(crate) fn unacked(&self) -> std::ops::Range<u64> {
        self.acked + 1..self.next_write
    }
}
