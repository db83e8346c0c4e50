//! A simulated member: its engine, its disk (the log, which outlives the engine),
//! its readers as the engine fed them, and the effects of its last input.

use crate::engine::record::{Fx, Recorder};
use crate::engine::{LocalReader, Mutation, Now, TopicEngine};
use crate::instance::{prefix, InstanceHandle, Kind};
use crate::qos::{Level, Qos};
use crate::sample::SampleInfo;
use sst::transport::NodeId;

/// The writer number every member writes as.
pub(crate) const WRITER: u32 = 1;

/// A sample's identity in the topic: (node, writer, client), number.
pub(crate) type SampleKey = ((u32, u32, Option<u64>), u64);

/// The identity of a sample as a reader got it.
pub(crate) fn key_of(info: &SampleInfo) -> SampleKey {
    ((info.writer.node.0, info.writer.id, info.writer.client), info.seq)
}

/// What one reader got, in order.
#[derive(Debug, Default)]
pub(crate) struct ReaderLog {
    pub(crate) id: u32,
    /// (topic_seq, identity, from history, instance) of each sample offered.
    pub(crate) offers: Vec<(u64, SampleKey, bool, u64)>,
    /// Samples it was told it will never get.
    pub(crate) missed: u64,
    pub(crate) rejected: u64,
    /// Offers the invariants checked already.
    pub(crate) checked: usize,
    /// Where its topic's order starts for it: the seam its late join ended at
    /// (0 for a member there from the start).
    pub(crate) start: u64,
}

/// The instance a sample's bytes name (0 for an unkeyed topic's).
pub(crate) fn instance_of(bytes: &[u8], keyed: bool) -> u64 {
    let at = crate::sample::header_len(u64::from_le_bytes(bytes[..8].try_into().expect("a header")));
    if !keyed || bytes.len() < at + 8 {
        return 0;
    }
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// A sample's bytes: `header`, the instance's prefix if keyed, 8 payload bytes.
pub(crate) fn sample_bytes(header: &[u64], instance: u64, payload: u64) -> Vec<u8> {
    let mut b: Vec<u8> = header.iter().flat_map(|w| w.to_le_bytes()).collect();
    if instance != 0 {
        for w in prefix(InstanceHandle(instance), Kind::Data) {
            b.extend_from_slice(&w.to_le_bytes());
        }
    }
    b.extend_from_slice(&payload.to_le_bytes());
    b
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) id: NodeId,
    pub(crate) engine: Option<TopicEngine<u32>>,
    pub(crate) fx: Recorder,
    /// The topic's log on this member's disk (Logged topics): records as appended.
    pub(crate) log: Vec<Vec<u8>>,
    pub(crate) readers: Vec<ReaderLog>,
    /// Its writer's next sample number and how many it has left to write.
    pub(crate) next_write: u64,
    pub(crate) writes_left: u64,
    /// Where it is in the view's order.
    pub(crate) cursor: usize,
    /// The highest topic_seq this member acknowledged (its writer's or a client's).
    pub(crate) acked_upto: Option<u64>,
}

impl Member {
    /// A member with no engine yet (not started).
    pub(crate) fn new(id: NodeId, writes: u64) -> Member {
        Member {
            id,
            engine: None,
            fx: Recorder::default(),
            log: Vec::new(),
            readers: Vec::new(),
            next_write: 1,
            writes_left: writes,
            cursor: 0,
            acked_upto: None,
        }
    }

    /// Starts (or restarts) the engine, from the log for a Logged topic, with a
    /// reader and a writer made before it enters any view (as an application
    /// makes them right after creating the topic). A restart's reader is new.
    pub(crate) fn start(&mut self, qos: Qos, keyed: bool, now: Now, mutation: Option<Mutation>) -> Result<(), String> {
        let records = (qos.level == Level::Logged).then_some(&self.log[..]);
        let mut e = TopicEngine::open(qos, keyed, self.id, records, now)
            .map_err(|b| format!("{} could not reopen its log: record {}: {}", self.id, b.seq, b.why))?;
        let id = self.readers.len() as u32;
        self.readers.push(ReaderLog { id, ..ReaderLog::default() });
        e.add_reader(LocalReader { id, level: Level::Unordered, handle: id }, now, &mut self.fx);
        e.add_writer(WRITER, qos.level);
        e.mutation = mutation;
        self.engine = Some(e);
        self.cursor = 0;
        Ok(())
    }

    /// True while its engine runs and is not catching up.
    pub(crate) fn complete(&self) -> bool {
        self.engine.as_ref().is_some_and(|e| !e.catching_up())
    }

    /// Applies the effects its last inputs emitted; returns the client effects
    /// (relays and acks), which the clients take.
    pub(crate) fn drain(&mut self, keyed: bool) -> Vec<Fx> {
        let mut out = Vec::new();
        for f in self.fx.take() {
            match f {
                Fx::Offer { reader, info, bytes } => {
                    let r = &mut self.readers[reader as usize];
                    r.offers.push((info.topic_seq, key_of(&info), info.from_history, instance_of(&bytes, keyed)));
                }
                Fx::Missed { reader, n } => self.readers[reader as usize].missed += n,
                Fx::Reject { reader, .. } => self.readers[reader as usize].rejected += 1,
                Fx::Append(e) => {
                    let mut rec = e.record_head().to_vec();
                    rec.extend_from_slice(&e.bytes);
                    self.log.push(rec);
                }
                Fx::DeliveredOwn { .. } => self.note_ack(),
                f @ Fx::Acked { .. } => {
                    self.note_ack();
                    out.push(f);
                }
                f @ Fx::Relay { .. } => out.push(f),
                _ => {}
            }
        }
        out
    }

    /// An acknowledgement leaves here now: everything delivered so far counts.
    fn note_ack(&mut self) {
        if let Some(e) = &self.engine {
            self.acked_upto = e.next_seq().checked_sub(1).max(self.acked_upto);
        }
    }
}
