//! The topic engine: everything one participant knows of one topic, as a state
//! machine with no threads, sockets, files, clocks or locks inside.
//!
//! Inputs are method calls: a delivered sample (with the view it came in and its
//! sender), the end of a delivered batch, a view entered or started, a catch-up
//! request or its result, a local reader or writer coming or going, a client's
//! reader or writer, and the time ([`Now`]) where a decision depends on it. Outputs
//! go to an [`Effects`] sink the caller passes in: offer this sample to that
//! reader, relay it to these client readers, acknowledge that client write, append
//! this entry to the log, wake the waiters. The drivers (`crate::topic`, the client
//! server, the catch-up threads) own the locks, the files and the sessions, and
//! apply the effects; the simulator (`crate::sim`) applies them to a model.
//!
//! The engine numbers samples by the topic's delivery count (`topic_seq`), which is
//! the same at every member of an ordered topic, and that is how a late joiner's
//! history and its live samples meet with no gap and no duplicate: the samples
//! delivered before the history is in wait in the engine and are numbered from the
//! seam the history ends at.

mod catchup;
mod clients;
mod deliver;
#[cfg(test)]
pub(crate) mod record;
#[cfg(test)]
mod tests;
mod view;

pub(crate) use catchup::Served;
#[cfg(test)]
pub(crate) use clients::ClientStart;
use clients::Clients;

use crate::error::CatchUpError;
use crate::history::{Entry, History};
use crate::qos::{Level, Qos};
use crate::sample::{SampleInfo, WriterId};
use crate::sink::Src;
use spindle_sst::transport::NodeId;
use spindle_views::view::ViewId;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Instant, SystemTime};

/// The time an input happens at: monotonic (pins of the history) and wall-clock
/// (the lifespan of samples, whose timestamps are wall-clock).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    pub(crate) at: Instant,
    pub(crate) wall: SystemTime,
}

impl Now {
    /// The time now (for drivers; the simulator makes its own).
    pub(crate) fn real() -> Now {
        Now { at: Instant::now(), wall: SystemTime::now() }
    }
}

/// The resend filter's state: per client writer (client id, number), the highest
/// sample number delivered.
pub(crate) type Seen = Vec<(u64, u32, u64)>;

/// Where this node stood in the topic at the start of a view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seam {
    pub(crate) view: ViewId,
    /// The topic's delivery count when the view began.
    pub(crate) seq: u64,
    /// False while this node was still catching up then (it had not got all the
    /// history before the view yet).
    pub(crate) complete: bool,
    /// The view brought a member new to the topic: the history is kept as it
    /// stood at `seq` (pinned), and so is the resend filter (`seen`), which the
    /// joiner needs: the history holds only the last samples (or none), and a
    /// client may send again one from before.
    pub(crate) joined: bool,
    pub(crate) seen: Seen,
}

/// A late join in progress: live samples wait here until the history is in.
#[derive(Debug)]
struct CatchUp {
    view: ViewId,
    buffered: Vec<(ViewId, NodeId, Vec<u8>)>,
    /// After a rejoin: where this node's order stopped (what the gap starts at).
    rejoined_at: Option<u64>,
}

/// A write this member sent, to acknowledge: its own writer's, or a client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ack {
    Own { writer: u32, seq: u64 },
    Client { client: u64, writer: u32, seq: u64 },
}

/// A local writer's state the topic tracks.
#[derive(Debug)]
struct WriterStatus {
    level: Level,
    /// Its highest sample delivered here (it is a member, so it delivers its own).
    delivered: u64,
}

/// A local reader: its number, the level it requests, and the driver's handle to
/// it (what [`Effects`] offers samples to).
#[derive(Debug)]
pub(crate) struct LocalReader<R> {
    pub(crate) id: u32,
    pub(crate) level: Level,
    pub(crate) handle: R,
}

pub(crate) use crate::status::Rejection;

/// What the engine asks its driver to do. Every method is an effect; none returns
/// anything the engine reads back (a failure comes back as a later input).
pub(crate) trait Effects<R> {
    /// A sample for local reader `r`.
    fn offer(&mut self, r: &R, info: &SampleInfo, src: Src<'_>);
    /// A sample reader `r` does not get, and why.
    fn reject(&mut self, r: &R, why: &Rejection);
    /// The writers alive now, and how many stopped being alive (see
    /// `crate::queue::ReaderCore::writers_now`).
    fn writers_now(&mut self, r: &R, alive: &[(u64, u32, bool)], lost: usize, tell: bool);
    /// `n` samples of the topic's order will never reach reader `r`.
    fn missed(&mut self, r: &R, n: u64);
    /// A client's writer whose offer is below reader `r`'s request.
    fn incompatible(&mut self, r: &R, writer: WriterId, offered: Level);
    /// The members' writers whose offer is below reader `r`'s request, as of a view.
    fn set_incompatible(&mut self, r: &R, bad: Vec<(WriterId, Level)>);
    /// The members' readers whose request local writer `writer`'s offer does not meet.
    fn writer_incompatible(&mut self, writer: u32, bad: Vec<(WriterId, Level)>);
    /// A sample for the client readers `to` (client id, reader number).
    fn relay(&mut self, info: &SampleInfo, src: Src<'_>, to: &[(u64, u32)]);
    /// Client `client`'s writer `writer` is delivered up to `seq` by this member.
    fn acked(&mut self, client: u64, writer: u32, seq: u64);
    /// Append `e` to the topic's log (Logged topics).
    fn append(&mut self, e: &Entry);
    /// Local writer `writer`'s sample `seq` is delivered here.
    fn delivered_own(&mut self, writer: u32, seq: u64);
    /// A view began here or a late join ended: wake whoever waits for either.
    fn entered(&mut self);
    /// A late join ended without the history.
    fn catch_up_failed(&mut self, why: CatchUpError);
    /// The end of a batch of inputs: send what was gathered for clients.
    fn flush(&mut self);
}

/// Seams kept per topic (a late joiner asks about the view it joined in).
const SEAMS: usize = 64;
/// How long a pinned seam keeps the history as it stood (a late joiner's
/// catch-up normally takes milliseconds; it gives up after its own timeout).
const PIN_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// One topic at one participant (see the module docs). `R` is the driver's handle
/// to a local reader.
#[derive(Debug)]
pub(crate) struct TopicEngine<R> {
    qos: Qos,
    keyed: bool,
    me: NodeId,
    next_seq: u64,
    store: History,
    /// Records in the topic's log (Logged topics): appended, and known durable.
    log_len: Option<u64>,
    durable: u64,
    /// Writes of this member delivered and waiting for the log to hold every
    /// record up to the first number (Logged topics).
    unacked: VecDeque<(u64, Ack)>,
    readers: Vec<LocalReader<R>>,
    /// Local writers by number (a B-tree: a few comparisons, no hashing per sample).
    writers: BTreeMap<u32, WriterStatus>,
    /// Offered levels of the writers the table listed, as last seen (a short list:
    /// a linear scan beats hashing on the delivery path).
    writer_levels: Vec<((u32, u32), Level)>,
    catching_up: Option<CatchUp>,
    seams: VecDeque<Seam>,
    /// The last view this node was in the topic's subgroup.
    last_view: Option<ViewId>,
    /// This participant was removed from the domain and is back: the next view it
    /// is in the topic's subgroup catches up on what it missed.
    rejoined: bool,
    /// Clients served here: their readers and writers, and the duplicate filter of
    /// client samples.
    clients: Clients,
    /// The members of the topic's subgroup in its last view here (a view with new
    /// ones pins the history for them: [`History::pin`]).
    subgroup: Vec<NodeId>,
    /// Members' writers alive at the last view start, by [`WriterId::key`].
    alive: Vec<(u64, u32, bool)>,
    /// Scratch: the client readers the sample being delivered goes to.
    picks: Vec<(u64, u32)>,
    /// A deliberate fault for the simulator to find (see [`Mutation`]).
    #[cfg(test)]
    pub(crate) mutation: Option<Mutation>,
}

/// Faults the simulator's own tests plant to show an invariant catches them.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mutation {
    /// A late joiner numbers its held live samples one past the seam.
    SeamOffByOne,
    /// A view that brings a late joiner does not keep the history as it stood.
    NoPin,
    /// A Logged topic acknowledges a write before its log holds it.
    AckEarly,
    /// A participant taken back into the domain does not tell its readers how
    /// many samples it missed while it was out.
    RejoinUntold,
    /// A pack's last sample is not delivered.
    PackShort,
    /// A sample of this member's on the path of a topic nobody reads here tells
    /// its writer it was delivered without raising the writer's delivered number.
    UnreadWriterBehind,
}

/// A record of the topic's log that does not hold a sample: its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BadRecord {
    pub(crate) seq: u64,
}

impl<R> TopicEngine<R> {
    /// A topic with QoS `qos` at node `me`; a Logged topic starts from its log's
    /// `records` (`Some`, possibly empty), a record that holds no sample refused.
    pub(crate) fn open(
        qos: Qos,
        keyed: bool,
        me: NodeId,
        records: Option<&[Vec<u8>]>,
        now: Now,
    ) -> Result<TopicEngine<R>, BadRecord> {
        let mut e = TopicEngine {
            qos,
            keyed,
            me,
            next_seq: 0,
            store: History::new(&qos, keyed),
            log_len: None,
            durable: 0,
            unacked: VecDeque::new(),
            readers: Vec::new(),
            writers: BTreeMap::new(),
            writer_levels: Vec::new(),
            catching_up: None,
            seams: VecDeque::new(),
            last_view: None,
            rejoined: false,
            clients: Clients::new(qos.level == Level::Unordered),
            subgroup: Vec::new(),
            alive: Vec::new(),
            picks: Vec::new(),
            #[cfg(test)]
            mutation: None,
        };
        if let Some(records) = records {
            for (seq, r) in records.iter().enumerate() {
                let entry = Entry::from_record(seq as u64, r).ok_or(BadRecord { seq: seq as u64 })?;
                e.clients.note(&entry.info(true).0);
                e.store.push(entry, now.at);
            }
            e.next_seq = records.len() as u64;
            e.log_len = Some(records.len() as u64);
            e.durable = records.len() as u64;
        }
        Ok(e)
    }

    fn keeps_history(&self) -> bool {
        self.qos.level >= Level::Volatile
    }

    /// The topic's delivery count here (the next sample's `topic_seq`).
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Records in the topic's log (Logged topics).
    #[cfg(test)]
    pub(crate) fn log_len(&self) -> Option<u64> {
        self.log_len
    }

    /// True while a late join waits for the history.
    pub(crate) fn catching_up(&self) -> bool {
        self.catching_up.is_some()
    }

    /// The oldest sample held, or the delivery count if none is.
    pub(crate) fn oldest(&self) -> u64 {
        self.store.front_seq().unwrap_or(self.next_seq)
    }

    /// The level a sample's writer offers: a client's from its header, a member's
    /// as the table listed it (`None`: not listed, which meets any request).
    fn offered(&self, info: &SampleInfo, client_level: Option<Level>) -> Option<Level> {
        client_level.or_else(|| {
            let key = (info.writer.node.0, info.writer.id);
            self.writer_levels.iter().find(|(k, _)| *k == key).map(|(_, l)| *l)
        })
    }

    /// Adds a local reader: it first gets the history this node holds.
    pub(crate) fn add_reader(&mut self, r: LocalReader<R>, now: Now, fx: &mut impl Effects<R>) {
        for e in self.store.range(0, u64::MAX, Some(now.wall)) {
            let (info, client_level) = e.info(true);
            if self.offered(&info, client_level).map_or(true, |l| l.satisfies(r.level)) {
                fx.offer(&r.handle, &info, Src::Bytes(&e.bytes));
            }
        }
        // Writers that left before this reader came: their instances have none.
        if !self.alive.is_empty() || self.last_view.is_some() {
            fx.writers_now(&r.handle, &self.alive, 0, false);
        }
        self.readers.push(r);
    }

    /// Removes local readers for which `gone` holds.
    pub(crate) fn remove_readers(&mut self, gone: impl Fn(&LocalReader<R>) -> bool) {
        self.readers.retain(|r| !gone(r));
    }

    /// The local readers.
    pub(crate) fn readers(&self) -> &[LocalReader<R>] {
        &self.readers
    }

    /// A local writer offering `level`.
    pub(crate) fn add_writer(&mut self, id: u32, level: Level) {
        self.writers.insert(id, WriterStatus { level, delivered: 0 });
    }

    /// A local writer closed.
    pub(crate) fn remove_writer(&mut self, id: u32) {
        self.writers.remove(&id);
    }

    /// The local writers and the levels they offer.
    pub(crate) fn writers(&self) -> impl Iterator<Item = (u32, Level)> + '_ {
        self.writers.iter().map(|(id, w)| (*id, w.level))
    }

    /// The highest sample of local writer `id` delivered here (`None`: no such writer).
    pub(crate) fn delivered(&self, id: u32) -> Option<u64> {
        self.writers.get(&id).map(|w| w.delivered)
    }

    /// With no endpoint and no client left here, this node is out of the topic:
    /// the next time it enters, it catches up on what it missed.
    pub(crate) fn leave_if_idle(&mut self) {
        if self.writers.is_empty() && self.readers.is_empty() && !self.clients.proxied {
            self.last_view = None;
        }
    }
}
