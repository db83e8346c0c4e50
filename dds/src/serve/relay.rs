//! What a member sends the clients it serves on a topic, gathered from the
//! engine's effects while a batch is delivered and sent at its end: samples for
//! client readers (one frame per reader) and acknowledgements for client writers.
//! Who gets what is the engine's decision (`crate::engine::Clients`); this holds
//! the sessions and the frames.

use crate::sample::SampleInfo;
use crate::sink::Src;
use crate::wire::client::{wire_sample, Push, WireSample};
use spindle_views::group::ClientSession;
use std::collections::HashMap;

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct ClientOut {
    /// The sessions of clients with readers or writers on the topic here.
    sessions: HashMap<u64, ClientSession>,
    /// The samples of the batch being delivered that client readers take.
    batch: Vec<WireSample>,
    /// Per client reader (client id, reader number): which samples of `batch`.
    picks: HashMap<(u64, u32), Vec<u32>>,
    /// Acknowledgements of the batch: per (client, writer), the highest number
    /// this member sent and delivered.
    acks: HashMap<(u64, u32), u64>,
    /// Clients whose session refused a frame (closed): forgotten at the flush.
    dead: Vec<u64>,
}

impl ClientOut {
    /// A client's session, for its readers' and writers' frames.
    pub(crate) fn attach(&mut self, s: &ClientSession) {
        self.sessions.entry(s.id()).or_insert_with(|| s.clone());
    }

    /// Forgets a client's session.
    pub(crate) fn detach(&mut self, client: u64) {
        self.sessions.remove(&client);
        self.picks.retain(|(c, _), _| *c != client);
    }

    /// Clients whose session closed since the last call.
    pub(crate) fn take_dead(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.dead)
    }

    /// A delivered sample for the client readers `to`.
    pub(crate) fn relay(&mut self, info: &SampleInfo, src: Src<'_>, to: &[(u64, u32)]) {
        let at = self.batch.len() as u32;
        for r in to {
            self.picks.entry(*r).or_default().push(at);
        }
        self.batch.push(wire_sample(info, src.copy_all()));
    }

    /// Client `client`'s writer `writer` is delivered up to `seq` here.
    pub(crate) fn ack(&mut self, client: u64, writer: u32, seq: u64) {
        let a = self.acks.entry((client, writer)).or_insert(0);
        *a = (*a).max(seq);
    }

    /// Sends what the batch gathered: one frame per reader, one acknowledgement
    /// per writer.
    ///
    /// The samples are encoded once for every reader that takes them all (the
    /// common case); a reader's frame is its own prefix and that shared encoding.
    pub(crate) fn flush(&mut self) {
        if !self.batch.is_empty() {
            let batch = std::mem::take(&mut self.batch);
            let all = postcard::to_stdvec(&batch).unwrap_or_default();
            for ((client, reader), picks) in self.picks.iter_mut() {
                if picks.is_empty() {
                    continue;
                }
                let picks = std::mem::take(picks);
                let Some(s) = self.sessions.get(client) else { continue };
                // `Push::Samples { reader, samples }` is its prefix, then `samples`.
                let mut prefix = Push::Samples { reader: *reader, samples: Vec::new() }.encode();
                prefix.pop(); // the empty list's length, 0
                let sent = if picks.len() == batch.len() {
                    s.push_parts(&[&prefix, &all])
                } else {
                    let some: Vec<&WireSample> = picks.iter().map(|i| &batch[*i as usize]).collect();
                    s.push_parts(&[&prefix, &postcard::to_stdvec(&some).unwrap_or_default()])
                };
                if !sent {
                    self.dead.push(*client);
                }
            }
        }
        for ((client, writer), seq) in self.acks.drain() {
            if let Some(s) = self.sessions.get(&client) {
                if !s.push(&Push::Acked { writer, seq }.encode()) {
                    self.dead.push(client);
                }
            }
        }
        for c in &self.dead {
            self.sessions.remove(c);
        }
    }
}
