//! One topic in one participant: its delivery path, its history (Volatile and
//! Logged), its log file (Logged), its local readers and writers, and the seams
//! that late joiners catch up to.
//!
//! Every delivery of the topic's subgroup goes through [`TopicState::deliver`]
//! under the topic's lock, in delivery order; so do catch-up and the creation of a
//! reader, which is how a reader's history and live samples meet with no gap and no
//! duplicate: both are numbered by the topic's delivery count (`topic_seq`), which
//! is the same at every member of an ordered topic.

pub(crate) use crate::history::Entry;
use crate::history::History;
use crate::log::{Fsync, SampleLog};
use crate::qos::{Level, Qos};
use crate::queue::ReaderCore;
use crate::sample::{info_of, SampleInfo, WriterId};
use crate::serve::relay::Relay;
use crate::sink::Src;
use crate::table::{Endpoint, TopicEntry};
use sst::transport::NodeId;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use views::view::ViewId;

use sst::sync::lock;

/// Where this node stood in the topic at the start of a view.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seam {
    pub(crate) view: ViewId,
    /// The topic's delivery count when the view began.
    pub(crate) seq: u64,
    /// False while this node was still catching up then (it had not got all the
    /// history before the view yet).
    pub(crate) complete: bool,
}

/// A late join in progress: live samples wait here until the history is in.
#[derive(Debug)]
pub(crate) struct CatchUp {
    pub(crate) view: ViewId,
    pub(crate) buffered: Vec<(ViewId, NodeId, Vec<u8>)>,
    /// After a rejoin: where this node's order stopped (what the gap starts at).
    pub(crate) rejoined_at: Option<u64>,
}

/// A local writer's state the topic tracks.
#[derive(Debug, Default)]
pub(crate) struct WriterStatus {
    pub(crate) level: Level,
    /// Its highest sample delivered here (it is a member, so it delivers its own).
    pub(crate) delivered: u64,
}

#[derive(Debug)]
pub(crate) struct TopicInner {
    pub(crate) next_seq: u64,
    pub(crate) store: History,
    pub(crate) log: Option<SampleLog>,
    pub(crate) readers: Vec<Arc<ReaderCore>>,
    /// Local writers by number (a B-tree: a few comparisons, no hashing per sample).
    pub(crate) writers: BTreeMap<u32, WriterStatus>,
    /// Offered levels of the writers the table listed, as last seen (a short list:
    /// a linear scan beats hashing on the delivery path).
    pub(crate) writer_levels: Vec<((u32, u32), Level)>,
    pub(crate) catching_up: Option<CatchUp>,
    pub(crate) seams: VecDeque<Seam>,
    /// The last view this node was in the topic's subgroup.
    pub(crate) last_view: Option<ViewId>,
    /// This participant was removed from the domain and is back: the next view it
    /// is in the topic's subgroup catches up on what it missed (see
    /// [`TopicState::rejoined`]).
    pub(crate) rejoined: bool,
    /// Clients served here: their readers, their writers' acks, and the duplicate
    /// filter of client samples.
    pub(crate) clients: Relay,
    /// The members of the topic's subgroup in its last view here (a view with new
    /// ones pins the history for them: [`History::pin`]).
    subgroup: Vec<NodeId>,
    /// Members' writers alive at the last view start, by [`WriterId::key`].
    alive: Vec<(u64, u32, bool)>,
}

impl TopicInner {
    /// The level a sample's writer offers: a client's from its header, a member's
    /// as the table listed it (`None`: not listed, which meets any request).
    pub(crate) fn offered(&self, info: &SampleInfo, client_level: Option<Level>) -> Option<Level> {
        client_level.or_else(|| {
            let key = (info.writer.node.0, info.writer.id);
            self.writer_levels.iter().find(|(k, _)| *k == key).map(|(_, l)| *l)
        })
    }
}

/// One topic of one participant.
#[derive(Debug)]
pub(crate) struct TopicState {
    pub(crate) name: String,
    pub(crate) qos: Qos,
    /// A keyed topic (see [`crate::instance`]).
    pub(crate) keyed: bool,
    pub(crate) me: NodeId,
    pub(crate) log_path: Option<PathBuf>,
    pub(crate) inner: Mutex<TopicInner>,
    /// Signalled when a local writer's sample is delivered here, if `waiters` > 0
    /// (both change under `inner`'s lock).
    pub(crate) delivered: Condvar,
    pub(crate) waiters: sst::sync::atomic::AtomicUsize,
    /// Signalled (under `inner`'s lock) when a view starts here and when a late
    /// join ends: a late joiner's request for the history of a view this node has
    /// not begun yet waits on it, and so does a client reader's start at a member
    /// still catching up.
    pub(crate) entered: Condvar,
    /// Statuses readable from listeners, which run under `inner`: their own locks.
    /// Why the last catch-up failed, if it did.
    pub(crate) catch_up_failed: Mutex<Option<String>>,
    /// Per local writer: readers whose request it does not meet.
    pub(crate) writer_incompatible: Mutex<HashMap<u32, crate::IncompatibleQos>>,
    /// `(view id + 1) << 16 | (subgroup + 1)` of the last view a send looked up.
    pick: sst::sync::atomic::AtomicU64,
    /// Samples of local writers delivered here, and tasks waiting for room.
    own_delivered: sst::sync::atomic::AtomicU64,
    room_wakers: Mutex<Vec<std::task::Waker>>,
    n_room_wakers: sst::sync::atomic::AtomicUsize,
}

/// Seams kept per topic (a late joiner asks about the view it joined in).
const SEAMS: usize = 64;
/// How long a pinned seam keeps the history as it stood (a late joiner's
/// catch-up normally takes milliseconds; it gives up after its own timeout).
const PIN_FOR: Duration = Duration::from_secs(60);

impl TopicState {
    /// The state of topic `name` with QoS `qos`; a Logged topic opens its log at
    /// `log_path` and starts from what it holds.
    pub(crate) fn open(
        name: &str,
        qos: Qos,
        keyed: bool,
        me: NodeId,
        log: Option<(PathBuf, Fsync)>,
    ) -> Result<TopicState, crate::DdsError> {
        let mut inner = TopicInner {
            next_seq: 0,
            store: History::new(&qos, keyed),
            log: None,
            readers: Vec::new(),
            writers: BTreeMap::new(),
            writer_levels: Vec::new(),
            catching_up: None,
            seams: VecDeque::new(),
            last_view: None,
            rejoined: false,
            clients: Relay::default(),
            subgroup: Vec::new(),
            alive: Vec::new(),
        };
        let mut log_path = None;
        if let Some((path, fsync)) = log {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|source| crate::log::LogError::Io { path: dir.to_path_buf(), source })?;
            }
            let (file, records) = SampleLog::open(&path, fsync)?;
            for (seq, r) in records.iter().enumerate() {
                let e = Entry::from_record(seq as u64, r).map_err(|why| crate::log::LogError::Corrupt {
                    path: path.clone(),
                    offset: 0,
                    why,
                })?;
                inner.clients.note(&e.info(true).0);
                inner.store.push(e);
            }
            inner.next_seq = records.len() as u64;
            inner.log = Some(file);
            log_path = Some(path);
        }
        Ok(TopicState {
            name: name.into(),
            qos,
            keyed,
            me,
            log_path,
            inner: Mutex::new(inner),
            delivered: Condvar::new(),
            waiters: sst::sync::atomic::AtomicUsize::new(0),
            entered: Condvar::new(),
            catch_up_failed: Mutex::new(None),
            writer_incompatible: Mutex::new(HashMap::new()),
            pick: sst::sync::atomic::AtomicU64::new(0),
            own_delivered: sst::sync::atomic::AtomicU64::new(0),
            room_wakers: Mutex::new(Vec::new()),
            n_room_wakers: sst::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// The topic's subgroup in `view` (the last view's answer is cached).
    pub(crate) fn subgroup_in(&self, view: &views::view::View) -> Option<usize> {
        use sst::sync::atomic::Ordering;
        let c = self.pick.load(Ordering::Relaxed);
        if c >> 16 == view.id().0 + 1 && c & 0xffff != 0 {
            return Some((c & 0xffff) as usize - 1);
        }
        let k = crate::table::TopicTable::decode(view.layout().bytes()).ok()?.subgroup_of(&self.name, view)?;
        if k < 0xffff {
            self.pick.store(((view.id().0 + 1) << 16) | (k as u64 + 1), Ordering::Relaxed);
        }
        Some(k)
    }

    fn keeps_history(&self) -> bool {
        self.qos.level >= Level::Volatile
    }

    /// A new view in which this node is in the topic's subgroup (`entry` as the
    /// view's table lists it, `members` the subgroup's). Returns the members to
    /// catch up from when this is the node's first view in the topic and the topic
    /// keeps history.
    pub(crate) fn enter_view(&self, view: ViewId, entry: &TopicEntry, members: &[NodeId]) -> Option<Vec<NodeId>> {
        let mut g = lock(&self.inner);
        let first = g.last_view.is_none();
        g.last_view = Some(view);
        // A rejoined Ordered topic asks too, for where the order is now (what it
        // missed); an Unordered one has no common numbering to ask about.
        let rejoined = first && std::mem::take(&mut g.rejoined) && self.qos.level >= Level::Ordered;
        let catch_up = first && (self.keeps_history() || rejoined);
        let complete = g.catching_up.is_none() && !catch_up;
        let seq = g.next_seq;
        if self.keeps_history() && members.iter().any(|m| *m != self.me && !g.subgroup.contains(m)) {
            // A late joiner asks for the history as it stands now: keep it so.
            g.store.pin(seq, PIN_FOR);
        }
        g.subgroup = members.to_vec();
        g.seams.push_back(Seam { view, seq, complete });
        if g.seams.len() > SEAMS {
            g.seams.pop_front();
        }
        self.entered.notify_all();
        for w in &entry.writers {
            match g.writer_levels.iter_mut().find(|(k, _)| *k == (w.node, w.id)) {
                Some(x) => x.1 = w.level,
                None => g.writer_levels.push(((w.node, w.id), w.level)),
            }
        }
        // Requested/offered: every pair of a local endpoint and a peer endpoint of a
        // member (endpoints of failed nodes stay in the table but are no peers).
        let unmet = |peers: &[Endpoint], ok: &dyn Fn(Level) -> bool| -> Vec<(WriterId, Level)> {
            peers
                .iter()
                .filter(|e| members.iter().any(|m| m.0 == e.node) && !ok(e.level))
                .map(|e| (WriterId { node: NodeId(e.node), id: e.id, client: None }, e.level))
                .collect()
        };
        for r in &g.readers {
            r.set_incompatible(unmet(&entry.writers, &|offered| offered.satisfies(r.level)));
        }
        let mut wi = lock(&self.writer_incompatible);
        for (id, w) in g.writers.iter() {
            wi.entry(*id).or_default().update(unmet(&entry.readers, &|requested| w.level.satisfies(requested)));
        }
        drop(wi);
        if catch_up {
            let others: Vec<NodeId> = members.iter().copied().filter(|n| *n != self.me).collect();
            if !others.is_empty() {
                let rejoined_at = rejoined.then_some(g.next_seq);
                g.catching_up = Some(CatchUp { view, buffered: Vec::new(), rejoined_at });
                return Some(others);
            }
            // Alone in the topic: its own history (its log, or nothing) is all there is.
            if let Some(s) = g.seams.back_mut() {
                s.complete = true;
            }
        }
        None
    }

    /// A delivered batch of the topic's subgroup, under one lock.
    pub(crate) fn deliver_batch(&self, view: ViewId, batch: &views::group::InPlaceBatch<'_>) {
        let mut g = lock(&self.inner);
        for m in batch.iter() {
            self.deliver_one(&mut g, view, m.sender, Src::Slot(m.message));
        }
        g.clients.flush();
    }

    fn deliver_one(&self, g: &mut TopicInner, view: ViewId, sender: NodeId, src: Src<'_>) {
        if !src.has_header() {
            for r in &g.readers {
                r.reject(format!("a {}-byte message from {sender} is shorter than a sample header", src.len()));
            }
            return;
        }
        if let Some(c) = g.catching_up.as_mut() {
            c.buffered.push((view, sender, src.copy_all()));
            return;
        }
        self.deliver_locked(g, view, sender, src, false);
    }

    pub(crate) fn deliver_locked(&self, g: &mut TopicInner, view: ViewId, sender: NodeId, src: Src<'_>, history: bool) {
        let seq = g.next_seq;
        let (info, client_level) = info_of(|i| src.word(i), sender, view, seq, history);
        let client_level = client_level.map(Level::from_wire);
        // A client's sample sent again after it moved to another member, which
        // every member drops alike (they all deliver the same order).
        if !g.clients.note(&info) {
            if sender == self.me {
                g.clients.ack(&info);
            }
            return;
        }
        g.next_seq += 1;
        if self.keeps_history() {
            // The oldest entry's buffer takes the new one once the history is full:
            // one copy per sample and no allocation in the steady state.
            let mut bytes = g.store.spare();
            bytes.resize(src.len(), 0);
            src.read_all(&mut bytes);
            let e = Entry { seq, view, node: sender.0, bytes };
            if let Some(log) = g.log.as_mut() {
                if let Err(e) = log.append_parts(&[&e.record_head(), &e.bytes]) {
                    tracing::error!(topic = %self.name, %e, "log append failed");
                    for r in &g.readers {
                        r.reject(format!("log append failed: {e}"));
                    }
                }
            }
            g.store.push(e);
        }
        let level = g.offered(&info, client_level);
        for r in &g.readers {
            match level {
                Some(l) if !l.satisfies(r.level) => {
                    if info.writer.client.is_some() {
                        r.note_incompatible(info.writer, l); // members' writers: from the table
                    }
                }
                _ => r.offer(&info, src),
            }
        }
        g.clients.relay(&info, level, &src);
        if sender == self.me && info.writer.client.is_some() {
            g.clients.ack(&info);
        } else if sender == self.me {
            if let Some(w) = g.writers.get_mut(&info.writer.id) {
                w.delivered = w.delivered.max(info.seq);
                self.own_delivered.fetch_add(1, sst::sync::atomic::Ordering::Release);
                if self.n_room_wakers.load(sst::sync::atomic::Ordering::Acquire) > 0 {
                    self.wake_room();
                }
                // A notify is a system call: only when someone waits.
                if self.waiters.load(sst::sync::atomic::Ordering::Relaxed) > 0 {
                    self.delivered.notify_all();
                }
            }
        }
    }

    /// How many samples of local writers were delivered here so far.
    pub(crate) fn delivered_count(&self) -> u64 {
        self.own_delivered.load(sst::sync::atomic::Ordering::Acquire)
    }

    /// Wakes `w` at the next delivery of a local writer's sample.
    pub(crate) fn wake_on_delivery(&self, w: std::task::Waker) {
        let mut ws = lock(&self.room_wakers);
        ws.push(w);
        self.n_room_wakers.store(ws.len(), sst::sync::atomic::Ordering::Release);
    }

    fn wake_room(&self) {
        let ws = std::mem::take(&mut *lock(&self.room_wakers));
        self.n_room_wakers.store(0, sst::sync::atomic::Ordering::Release);
        for w in ws {
            w.wake();
        }
    }

    /// Adds a local reader: it first gets the history this node holds.
    pub(crate) fn add_reader(&self, r: Arc<ReaderCore>) {
        let g = lock(&self.inner);
        for e in g.store.all() {
            let (info, client_level) = e.info(true);
            let level = g.offered(&info, client_level);
            if level.map_or(true, |l| l.satisfies(r.level)) {
                r.offer(&info, Src::Bytes(&e.bytes));
            }
        }
        // Writers that left before this reader came: their instances have none.
        if !g.alive.is_empty() || g.last_view.is_some() {
            r.writers_now(&g.alive, 0, false);
        }
        let mut g = g;
        g.readers.push(r);
    }

    /// A view starts (at every member, at the same point of the topic's order):
    /// `entry` is the topic as the view's table lists it, `members` the view's.
    /// Writers no longer listed or whose participant left are gone: the local
    /// readers' instances they alone wrote have no writers now.
    pub(crate) fn view_started(&self, entry: &TopicEntry, members: &[NodeId]) {
        let mut g = lock(&self.inner);
        let alive: Vec<(u64, u32, bool)> = entry
            .writers
            .iter()
            .filter(|w| w.id != crate::sample::PROXY && members.iter().any(|m| m.0 == w.node))
            .map(|w| (w.node as u64, w.id, false))
            .collect();
        let lost = g.alive.iter().filter(|w| !alive.contains(w) && !members.iter().any(|m| m.0 as u64 == w.0)).count();
        if alive == g.alive && lost == 0 {
            return;
        }
        for r in &g.readers {
            r.writers_now(&alive, lost, true);
        }
        g.alive = alive;
    }

    /// This participant was removed from the domain and is back (before the view
    /// that has it again starts): the next view it is in this topic's subgroup
    /// catches up from the others as a late joiner does, from where its own order
    /// stopped; what their history no longer holds counts as lost at its readers.
    pub(crate) fn rejoined(&self) {
        let mut g = lock(&self.inner);
        g.last_view = None;
        g.rejoined = true;
    }

    /// Ends a late join: `entries` (the history before the seam at `seam`) first,
    /// then the live samples that waited.
    pub(crate) fn finish_catch_up(&self, entries: Vec<Entry>, seam: Option<u64>, failed: Option<String>) {
        let mut g = lock(&self.inner);
        let mut got = 0u64;
        for e in entries {
            if e.seq < g.next_seq {
                continue; // held already (this node's own log)
            }
            got += 1;
            if g.log.as_ref().is_some_and(|l| l.len() != e.seq) {
                // A Logged member serves its whole log, so this is a gap in its answer.
                tracing::error!(topic = %self.name, seq = e.seq, "catch-up left a gap in the log");
                break;
            }
            g.next_seq = e.seq;
            let node = NodeId(e.node);
            self.deliver_locked(&mut g, e.view, node, Src::Bytes(&e.bytes), true);
        }
        if let Some(s) = seam {
            g.next_seq = g.next_seq.max(s);
        }
        if got > 0 {
            // The history may name writers that left before this member came.
            for r in &g.readers {
                r.writers_now(&g.alive, 0, false);
            }
        }
        let Some(c) = g.catching_up.take() else {
            g.clients.flush();
            return;
        };
        self.entered.notify_all();
        if let (Some(from), Some(seam)) = (c.rejoined_at, seam) {
            let missed = seam.saturating_sub(from).saturating_sub(got);
            if missed > 0 {
                tracing::warn!(topic = %self.name, missed, "samples delivered while this participant was out are gone");
                for r in &g.readers {
                    r.missed(missed);
                }
            }
        }
        // The seams of the view joined in and of every view begun while catching up
        // are known now: the seam, plus the held samples of earlier views.
        let at = g.next_seq;
        for s in g.seams.iter_mut().filter(|s| s.view >= c.view) {
            let before = c.buffered.iter().filter(|(v, _, _)| *v < s.view).count() as u64;
            *s = Seam { view: s.view, seq: at + before, complete: true };
        }
        if let Some(why) = failed {
            for r in &g.readers {
                r.reject(format!("history not received: {why}"));
            }
            *lock(&self.catch_up_failed) = Some(why);
        }
        for (view, sender, bytes) in c.buffered {
            self.deliver_locked(&mut g, view, sender, Src::Bytes(&bytes), false);
        }
        g.clients.flush();
    }
}

#[cfg(test)]
mod seam_tests;
