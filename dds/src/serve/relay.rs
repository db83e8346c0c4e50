//! A member's per-topic state for the clients it serves, kept under the topic's
//! lock with the rest of the topic: the client readers it relays samples to, the
//! client writers it acknowledges, and the filter that drops a client sample sent
//! twice (once by the member that died, once again after the client moved).

use crate::client::wire::{wire_sample, Push, WireSample};
use crate::qos::Level;
use crate::sample::SampleInfo;
use crate::sink::Src;
use std::collections::HashMap;
use views::group::ClientSession;

/// A client reader this member relays to.
#[derive(Debug)]
pub(crate) struct ClientReader {
    pub(crate) session: ClientSession,
    pub(crate) reader: u32,
    pub(crate) level: Level,
    /// Samples before this `topic_seq` went to it already (it resumed here).
    pub(crate) from: u64,
    /// Which samples of the batch being delivered ([`Relay::batch`]) are for it.
    pub(crate) picks: Vec<u32>,
}

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Relay {
    pub(crate) readers: Vec<ClientReader>,
    /// Sessions of clients with writers on this topic here, by client id, with
    /// those writers (number, offered level).
    writers: HashMap<u64, (ClientSession, Vec<(u32, Level)>)>,
    /// The highest sequence number delivered per client writer (client id, number).
    seen: HashMap<(u64, u32), u64>,
    /// The samples of the batch being delivered that a client reader takes, sent at
    /// its end ([`Relay::flush`]).
    batch: Vec<WireSample>,
    /// Acknowledgements of the batch being delivered: per (client, writer), the
    /// highest number this member sent and delivered.
    acks: HashMap<(u64, u32), u64>,
    /// This member lists proxy endpoints on the topic: it stays in the topic while
    /// it has no endpoint of its own.
    pub(crate) proxied: bool,
}

impl Relay {
    /// Notes a delivered sample; false if it is a client sample delivered before
    /// (a resend), which every member drops alike.
    pub(crate) fn note(&mut self, info: &SampleInfo) -> bool {
        let Some(client) = info.writer.client else { return true };
        let last = self.seen.entry((client, info.writer.id)).or_insert(0);
        if info.seq <= *last {
            return false;
        }
        *last = info.seq;
        true
    }

    /// Notes that a client sample this member sent is delivered (acknowledged at
    /// the end of the batch).
    pub(crate) fn ack(&mut self, info: &SampleInfo) {
        let Some(client) = info.writer.client else { return };
        let a = self.acks.entry((client, info.writer.id)).or_insert(0);
        *a = (*a).max(info.seq);
    }

    /// Sends what the batch just delivered holds for each client: one frame per
    /// reader, one acknowledgement per writer.
    ///
    /// The samples are encoded once for every reader that takes them all (the
    /// common case); a reader's frame is its own prefix and that shared encoding.
    pub(crate) fn flush(&mut self) {
        if !self.batch.is_empty() {
            let batch = std::mem::take(&mut self.batch);
            let all = postcard::to_stdvec(&batch).unwrap_or_default();
            self.readers.retain_mut(|r| {
                if r.picks.is_empty() {
                    return true;
                }
                let picks = std::mem::take(&mut r.picks);
                // `Push::Samples { reader, samples }` is its prefix, then `samples`.
                let mut prefix = Push::Samples { reader: r.reader, samples: Vec::new() }.encode();
                prefix.pop(); // the empty list's length, 0
                if picks.len() == batch.len() {
                    r.session.push_parts(&[&prefix, &all])
                } else {
                    let some: Vec<&WireSample> = picks.iter().map(|i| &batch[*i as usize]).collect();
                    r.session.push_parts(&[&prefix, &postcard::to_stdvec(&some).unwrap_or_default()])
                }
            });
        }
        for ((client, writer), seq) in self.acks.drain() {
            if let Some((s, _)) = self.writers.get(&client) {
                if !s.push(&Push::Acked { writer, seq }.encode()) {
                    self.writers.remove(&client);
                }
            }
        }
    }

    /// Relays a delivered sample to the client readers whose request its writer's
    /// offer (`offered`; `None` meets any) meets (sent by [`Relay::flush`]).
    pub(crate) fn relay(&mut self, info: &SampleInfo, offered: Option<Level>, src: &Src<'_>) {
        if self.readers.is_empty() {
            return;
        }
        let at = self.batch.len() as u32;
        let mut taken = false;
        for r in &mut self.readers {
            if info.topic_seq >= r.from && offered.map_or(true, |l| l.satisfies(r.level)) {
                r.picks.push(at);
                taken = true;
            }
        }
        if taken {
            self.batch.push(wire_sample(info, src.copy_all()));
        }
    }

    /// A client writer on this topic here.
    pub(crate) fn add_writer(&mut self, s: &ClientSession, id: u32, level: Level) {
        let e = self.writers.entry(s.id()).or_insert_with(|| (s.clone(), Vec::new()));
        e.1.retain(|(w, _)| *w != id);
        e.1.push((id, level));
    }

    /// A client writer closed.
    pub(crate) fn remove_writer(&mut self, client: u64, id: u32) {
        if let Some(e) = self.writers.get_mut(&client) {
            e.1.retain(|(w, _)| *w != id);
        }
    }

    /// The client writers and readers this member serves on the topic.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.writers.values().map(|e| e.1.len()).sum(), self.readers.len())
    }

    /// The client readers here whose request `offered` does not meet, as
    /// (client id, reader number, requested level).
    pub(crate) fn readers_above(&self, offered: Level) -> Vec<(u64, u32, Level)> {
        self.readers
            .iter()
            .filter(|r| !offered.satisfies(r.level))
            .map(|r| (r.session.id(), r.reader, r.level))
            .collect()
    }

    /// Forgets a session's readers and writer (it ended).
    pub(crate) fn forget(&mut self, client: u64) {
        self.readers.retain(|r| r.session.id() != client);
        self.writers.remove(&client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::WriterId;
    use sst::transport::NodeId;
    use views::view::ViewId;

    fn info(client: Option<u64>, id: u32, seq: u64) -> SampleInfo {
        let (mut i, _) = crate::sample::info_of(|_| 0, NodeId(1), ViewId(1), 0, false);
        (i.writer, i.seq) = (WriterId { node: NodeId(1), id, client }, seq);
        i
    }

    #[test]
    fn a_client_sample_sent_again_is_dropped_and_members_samples_never_are() {
        let mut r = Relay::default();
        assert!(r.note(&info(Some(7), 0, 1)));
        assert!(r.note(&info(Some(7), 0, 2)));
        assert!(!r.note(&info(Some(7), 0, 2)), "a resend of 2");
        assert!(!r.note(&info(Some(7), 0, 1)), "a resend of 1");
        assert!(r.note(&info(Some(7), 1, 1)), "another writer of the same client");
        assert!(r.note(&info(Some(8), 0, 1)), "another client");
        assert!(r.note(&info(Some(7), 0, 5)), "a gap is no duplicate");
        assert!(
            r.note(&info(None, 0, 1)) && r.note(&info(None, 0, 1)),
            "members' samples pass (a restarted writer starts again at 1)"
        );
    }
}
