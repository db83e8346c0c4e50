//! A simulated member: its engine, its disk (the log, which outlives the engine),
//! its readers as the engine fed them, and the effects of its last input.

use crate::engine::record::{Fx, Recorder};
use crate::engine::{LocalReader, Mutation, Now, TopicEngine};
use crate::instance::{prefix, InstanceHandle, Kind};
use crate::qos::{Level, Qos};
use crate::sample::SampleInfo;
use spindle_sst::transport::NodeId;

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
    pub(crate) offers: Vec<(u64, SampleKey, bool, u64, u64)>,
    /// Samples it was told it will never get.
    pub(crate) missed: u64,
    pub(crate) rejected: u64,
    /// Offers the invariants checked already.
    pub(crate) checked: usize,
    /// Where its topic's order starts for it: the seam its late join ended at
    /// (0 for a member there from the start).
    pub(crate) start: u64,
    /// Each history it was given: (the index of its first offer, the step the
    /// serving began, the step it ended). Under a lifespan, what history holds
    /// depends on when it was served.
    pub(crate) histories: Vec<(usize, u64, u64)>,
}

/// The instance a sample's bytes name (0 for an unkeyed topic's).
pub(crate) fn instance_of(bytes: &[u8], keyed: bool) -> u64 {
    let at = crate::sample::header_len(u64::from_le_bytes(bytes[..8].try_into().expect("a header")));
    if !keyed || bytes.len() < at + 8 {
        return 0;
    }
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// The kind of a keyed sample's bytes (its prefix's second word; 0, data, for
/// an unkeyed topic's).
pub(crate) fn kind_of(bytes: &[u8], keyed: bool) -> u64 {
    let at = crate::sample::header_len(u64::from_le_bytes(bytes[..8].try_into().expect("a header")));
    if !keyed || bytes.len() < at + 16 {
        return 0;
    }
    u64::from_le_bytes(bytes[at + 8..at + 16].try_into().expect("8 bytes"))
}

/// What a keyed writer writes as its sample number `n`: mostly data, some
/// disposals and unregistrations (the same for a sample sent again).
fn kind_for(n: u64) -> Kind {
    match n % 13 {
        5 => Kind::Dispose,
        11 => Kind::Unregister,
        _ => Kind::Data,
    }
}

/// A sample's bytes: `header`, the instance's prefix if keyed (its kind chosen by
/// `payload`), 8 payload bytes.
pub(crate) fn sample_bytes(header: &[u64], instance: u64, payload: u64) -> Vec<u8> {
    let mut b: Vec<u8> = header.iter().flat_map(|w| w.to_le_bytes()).collect();
    if instance != 0 {
        for w in prefix(InstanceHandle(instance), kind_for(payload)) {
            b.extend_from_slice(&w.to_le_bytes());
        }
    }
    b.extend_from_slice(&payload.to_le_bytes());
    b
}

/// The samples a message holds: those of a pack (the simulator makes only whole
/// ones), else the message itself.
pub(crate) fn samples_of(bytes: &[u8]) -> Vec<&[u8]> {
    let w0 = u64::from_le_bytes(bytes[..8].try_into().expect("a word"));
    let Some(n) = crate::sample::pack_count(w0) else { return vec![bytes] };
    let mut at = 8;
    (0..n)
        .map(|_| {
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("a word")) as usize;
            let part = &bytes[at + 8..at + 8 + len];
            at += 8 + len.div_ceil(8) * 8;
            part
        })
        .collect()
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) id: NodeId,
    pub(crate) engine: Option<TopicEngine<u32>>,
    pub(crate) fx: Recorder,
    /// The topic's log on this member's disk (Logged topics): records durable,
    /// and records handed to the log's writer and not yet durable (lost if the
    /// member is killed).
    pub(crate) log: Vec<Vec<u8>>,
    pub(crate) pending: Vec<Vec<u8>>,
    /// An acknowledgement of a write its log did not hold yet (Logged topics).
    pub(crate) early_ack: Option<String>,
    pub(crate) readers: Vec<ReaderLog>,
    /// Its writer's next sample number and how many it has left to write.
    pub(crate) next_write: u64,
    pub(crate) writes_left: u64,
    /// Where it is in the view's order.
    pub(crate) cursor: usize,
    /// Times it was taken back into the view with its engine (a rejoin).
    pub(crate) rejoins: u32,
    /// Unordered topics: which messages of the view's log it delivered.
    pub(crate) taken: Vec<bool>,
    /// The highest number its engine said its writer had delivered (since that
    /// engine started).
    pub(crate) own_delivered: u64,
}

impl Member {
    /// A member with no engine yet (not started).
    pub(crate) fn new(id: NodeId, writes: u64) -> Member {
        Member {
            id,
            engine: None,
            fx: Recorder::default(),
            log: Vec::new(),
            pending: Vec::new(),
            early_ack: None,
            readers: Vec::new(),
            next_write: 1,
            writes_left: writes,
            cursor: 0,
            rejoins: 0,
            taken: Vec::new(),
            own_delivered: 0,
        }
    }

    /// Starts (or restarts) the engine, from the log for a Logged topic, with a
    /// reader (if it `reads`) and a writer made before it enters any view (as an
    /// application makes them right after creating the topic). A restart's reader
    /// is new.
    pub(crate) fn start(
        &mut self,
        qos: Qos,
        keyed: bool,
        reads: bool,
        (now, step): (Now, u64),
        mutation: Option<Mutation>,
    ) -> Result<(), String> {
        let records = (qos.level == Level::Logged).then_some(&self.log[..]);
        let mut e = TopicEngine::open(qos, keyed, self.id, records, now)
            .map_err(|b| format!("{} could not reopen its log: record {} holds no sample", self.id, b.seq))?;
        if reads {
            let id = self.readers.len() as u32;
            // A restarted Logged member's reader gets its log's history now.
            self.readers.push(ReaderLog { id, histories: vec![(0, step, step)], ..ReaderLog::default() });
            e.add_reader(LocalReader { id, level: Level::Unordered, handle: id }, now, &mut self.fx);
        }
        e.add_writer(WRITER, qos.level);
        e.mutation = mutation;
        self.engine = Some(e);
        self.cursor = 0;
        self.own_delivered = 0;
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
                    let (instance, kind) = (instance_of(&bytes, keyed), kind_of(&bytes, keyed));
                    r.offers.push((info.topic_seq, key_of(&info), info.from_history, instance, kind));
                }
                Fx::Missed { reader, n } => self.readers[reader as usize].missed += n,
                Fx::Reject { reader, .. } => self.readers[reader as usize].rejected += 1,
                Fx::Append(e) => {
                    let mut rec = e.record_head().to_vec();
                    rec.extend_from_slice(&e.bytes);
                    self.pending.push(rec);
                }
                Fx::DeliveredOwn { writer, seq } => {
                    self.own_delivered = self.own_delivered.max(seq);
                    self.check_logged(((self.id.0, writer, None), seq))
                }
                f @ Fx::Acked { client, writer, seq } => {
                    self.check_logged(((self.id.0, writer, Some(client)), seq));
                    out.push(f);
                }
                f @ Fx::Relay { .. } => out.push(f),
                _ => {}
            }
        }
        out
    }

    /// An acknowledgement of `key` leaves here now: on a Logged topic its log
    /// must hold it (a client's sample by client, writer and number: the copy
    /// logged may have come through another member).
    fn check_logged(&mut self, key: SampleKey) {
        let Some(e) = &self.engine else { return };
        if e.log_len().is_none() || self.early_ack.is_some() {
            return;
        }
        let same = |k: &SampleKey| match (key.0 .2, k.0 .2) {
            (Some(c), Some(d)) => c == d && key.0 .1 == k.0 .1 && key.1 == k.1,
            (None, None) => k == &key,
            _ => false,
        };
        let held = self
            .log
            .iter()
            .rev()
            .any(|r| crate::history::Entry::from_record(0, r).is_some_and(|e| same(&key_of(&e.info(false).0))));
        if !held {
            self.early_ack = Some(format!("{} acknowledged {key:?} with {} records durable", self.id, self.log.len()));
        }
    }

    /// The log's writer makes what it was handed durable (all of it, or the first
    /// `n` records); the engine hears so.
    pub(crate) fn flush_log(&mut self, n: usize, keyed: bool) -> Vec<Fx> {
        let n = n.min(self.pending.len());
        self.log.extend(self.pending.drain(..n));
        let durable = self.log.len() as u64;
        if let Some(e) = self.engine.as_mut() {
            e.durable(durable, &mut self.fx);
        }
        self.drain(keyed)
    }
}
