//! One topic in one participant: its delivery path, its history (Volatile and
//! Logged), its log file (Logged), its local readers and writers, and the seams
//! that late joiners catch up to.
//!
//! This is the driver of the topic's engine ([`crate::engine`]): every input
//! (a delivered batch, a view, a catch-up's end, a reader, a client) runs on the
//! engine under the topic's lock ([`TopicState::run`]), and its effects are applied
//! there to the readers' queues, the clients' outgoing frames and the log file.

use crate::engine::{Effects, LocalReader, Now, Rejection, TopicEngine};
use crate::error::CatchUpError;
pub(crate) use crate::history::Entry;
use crate::log::{Fsync, SampleLog};
use crate::qos::{Level, Qos};
use crate::queue::{Listening, ReaderCore};
use crate::sample::{SampleInfo, WriterId};
use crate::serve::relay::ClientOut;
use crate::sink::Src;
use crate::table::TopicEntry;
use crate::writer::sending::Sending;
use crossbeam_utils::CachePadded;
use log_writer::{Durability, LogWriter};
use spindle_sst::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use spindle_views::view::ViewId;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// What the topic's lock guards: the engine, and what its effects go to that
/// must change with it (the clients' outgoing frames, the log file).
#[derive(Debug)]
pub(crate) struct TopicInner {
    pub(crate) engine: TopicEngine<Arc<ReaderCore>>,
    pub(crate) out: ClientOut,
    log: Option<LogWriter>,
}

/// One topic of one participant.
#[derive(Debug)]
pub(crate) struct TopicState {
    pub(crate) name: String,
    pub(crate) qos: Qos,
    pub(crate) log_path: Option<PathBuf>,
    /// How far the log's records are durable (Logged topics).
    pub(crate) durability: Option<Durability>,
    pub(crate) inner: Mutex<TopicInner>,
    /// Signalled when a local writer's sample is delivered here, if
    /// `own.waiters` > 0 (both change under `inner`'s lock).
    pub(crate) delivered: Condvar,
    /// Signalled (under `inner`'s lock) when a view starts here and when a late
    /// join ends: a late joiner's request for the history of a view this node has
    /// not begun yet waits on it, and so does a client reader's start at a member
    /// still catching up.
    pub(crate) entered: Condvar,
    /// Statuses readable from listeners, which run under `inner`: their own locks.
    /// Why the last catch-up failed, if it did.
    pub(crate) catch_up_failed: Mutex<Option<CatchUpError>>,
    /// Per local writer: readers whose request it does not meet.
    pub(crate) writer_incompatible: Mutex<HashMap<u32, crate::IncompatibleQos>>,
    /// `(view id + 1) << 16 | (subgroup + 1)` of the last view a send looked up
    /// (read by every write).
    pick: AtomicU64,
    /// What delivery writes for local writers, on cache lines of its own: a
    /// writer's thread reads `pick` on every send, and a line written by the
    /// delivery thread beside it would move between the cores at every batch.
    own: CachePadded<OwnDelivered>,
    room_wakers: Mutex<Vec<std::task::Waker>>,
    /// The local writers' send state, to empty their caches when a view starts.
    senders: Mutex<Vec<Weak<Mutex<Sending>>>>,
}

/// Local writers' samples delivered here, and who waits for them.
#[derive(Debug, Default)]
struct OwnDelivered {
    /// Samples of local writers delivered here (added once per delivered batch).
    count: AtomicU64,
    /// Threads in [`TopicState::wait_own`] (changed under `inner`'s lock).
    waiters: AtomicUsize,
    /// Tasks waiting for room ([`TopicState::wake_on_delivery`]).
    room_wakers: AtomicUsize,
}

/// The effects of one input, applied under the topic's lock.
pub(crate) struct Apply<'a> {
    t: &'a TopicState,
    out: &'a mut ClientOut,
    log: &'a Option<LogWriter>,
    /// Records were queued for the log writer (woken after the input).
    appended: bool,
    /// Samples of local writers this input delivered (counted once, after it).
    own: u64,
    /// A delivered batch's local readers (cloned before it; empty for other
    /// inputs), and the listener of one of them held locked across a run of
    /// offers to it: one lock per run, not one per sample. Only one is held at a
    /// time, so a listener runs holding its own reader's lock alone, as it would
    /// sample by sample; any other effect on a reader lets go of it first.
    batch_readers: &'a [Arc<ReaderCore>],
    held: Option<(*const ReaderCore, MutexGuard<'a, Listening>)>,
}

impl<'a> Apply<'a> {
    /// Reader `r`'s listener, locked until the next other effect or reader (`None`
    /// if `r` is not one of the batch's readers).
    fn hold(&mut self, r: &Arc<ReaderCore>) -> Option<&mut Listening> {
        let key = Arc::as_ptr(r);
        if self.held.as_ref().is_some_and(|(k, _)| *k != key) {
            self.held = None; // unlocked before the next one is locked
        }
        if self.held.is_none() {
            let mine = self.batch_readers.iter().find(|x| Arc::ptr_eq(x, r))?;
            self.held = Some((key, mine.hold_listener()));
        }
        self.held.as_mut().map(|(_, g)| &mut **g)
    }
}

impl Effects<Arc<ReaderCore>> for Apply<'_> {
    fn offer(&mut self, r: &Arc<ReaderCore>, info: &SampleInfo, src: Src<'_>) {
        if r.untracked() {
            if let Some(l) = self.hold(r) {
                return r.offer_held(l, info, src);
            }
        }
        self.held = None;
        r.offer(info, src);
    }
    fn reject(&mut self, r: &Arc<ReaderCore>, why: &Rejection) {
        self.held = None;
        r.reject(why.clone());
    }
    fn writers_now(&mut self, r: &Arc<ReaderCore>, alive: &[(u64, u32, bool)], lost: usize, tell: bool) {
        self.held = None;
        r.writers_now(alive, lost, tell);
    }
    fn missed(&mut self, r: &Arc<ReaderCore>, n: u64) {
        self.held = None;
        r.missed(n);
    }
    fn incompatible(&mut self, r: &Arc<ReaderCore>, writer: WriterId, offered: Level) {
        self.held = None;
        r.note_incompatible(writer, offered);
    }
    fn set_incompatible(&mut self, r: &Arc<ReaderCore>, bad: Vec<(WriterId, Level)>) {
        self.held = None;
        r.set_incompatible(bad);
    }
    fn writer_incompatible(&mut self, writer: u32, bad: Vec<(WriterId, Level)>) {
        lock(&self.t.writer_incompatible).entry(writer).or_default().update(bad);
    }
    fn relay(&mut self, info: &SampleInfo, src: Src<'_>, to: &[(u64, u32)]) {
        self.out.relay(info, src, to);
    }
    fn acked(&mut self, client: u64, writer: u32, seq: u64) {
        self.out.ack(client, writer, seq);
    }
    fn append(&mut self, e: &Entry) {
        if let Some(log) = self.log {
            let mut record = Vec::with_capacity(16 + e.bytes.len());
            record.extend_from_slice(&e.record_head());
            record.extend_from_slice(&e.bytes);
            log.push(record);
            self.appended = true;
        }
    }
    fn delivered_own(&mut self, _writer: u32, _seq: u64) {
        self.own += 1;
    }
    fn entered(&mut self) {
        self.t.entered.notify_all();
    }
    fn catch_up_failed(&mut self, why: CatchUpError) {
        *lock(&self.t.catch_up_failed) = Some(why);
    }
    fn flush(&mut self) {
        self.out.flush();
    }
}

/// A batch of a topic nobody reads here ([`TopicEngine::deliver_all`]), apart from
/// the loop of the others so that neither shapes the other's code.
#[inline(never)]
fn deliver_lean(
    e: &mut TopicEngine<Arc<ReaderCore>>,
    view: ViewId,
    batch: &spindle_views::group::InPlaceBatch<'_>,
    now: Now,
    fx: &mut Apply<'_>,
) {
    e.deliver_all(view, batch.iter().map(|m| (m.sender, Src::slot(m.message))), now, fx);
}

impl TopicState {
    /// The state of topic `name` with QoS `qos`; a Logged topic opens its log at
    /// `log_path` and starts from what it holds.
    pub(crate) fn open(
        name: &str,
        qos: Qos,
        keyed: bool,
        me: NodeId,
        log: Option<(PathBuf, Fsync)>,
    ) -> Result<Arc<TopicState>, crate::DdsError> {
        let (mut file, mut records, mut log_path) = (None, None, None);
        if let Some((path, fsync)) = log {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|source| crate::log::LogError::Io { path: dir.to_path_buf(), source })?;
            }
            let (f, r) = SampleLog::open(&path, fsync)?;
            (file, records, log_path) = (Some(f), Some(r), Some(path));
        }
        let engine = TopicEngine::open(qos, keyed, me, records.as_deref(), Now::real()).map_err(|bad| {
            tracing::error!(record = bad.seq, "a log record that holds no sample");
            let path = log_path.clone().unwrap_or_default();
            crate::log::LogError::Corrupt { path, offset: 0, why: crate::log::Corruption::NotASample }
        })?;
        let mut no_thread = None;
        let t = Arc::new_cyclic(|me: &std::sync::Weak<TopicState>| {
            let writer = file.and_then(|f| LogWriter::start(f, me.clone(), name).map_err(|e| no_thread = Some(e)).ok());
            TopicState {
                name: name.into(),
                qos,
                log_path: log_path.clone(),
                durability: writer.as_ref().map(LogWriter::durability),
                inner: Mutex::new(TopicInner { engine, out: ClientOut::default(), log: writer }),
                delivered: Condvar::new(),
                entered: Condvar::new(),
                catch_up_failed: Mutex::new(None),
                writer_incompatible: Mutex::new(HashMap::new()),
                pick: AtomicU64::new(0),
                own: CachePadded::default(),
                room_wakers: Mutex::new(Vec::new()),
                senders: Mutex::new(Vec::new()),
            }
        });
        if let Some(source) = no_thread {
            return Err(crate::log::LogError::Io { path: log_path.unwrap_or_default(), source }.into());
        }
        Ok(t)
    }

    /// Runs one input on the engine, under the topic's lock, and applies its
    /// effects (records for the log go to its writer, which reports them durable,
    /// or the log failed, as inputs of their own).
    pub(crate) fn run<T>(&self, f: impl FnOnce(&mut TopicEngine<Arc<ReaderCore>>, &mut Apply<'_>) -> T) -> T {
        self.run_input(false, f)
    }

    /// [`TopicState::run`]; with `batch`, the effects hold a reader's listener
    /// across a run of offers to it (see [`Apply`]).
    #[inline]
    fn run_input<T>(&self, batch: bool, f: impl FnOnce(&mut TopicEngine<Arc<ReaderCore>>, &mut Apply<'_>) -> T) -> T {
        let mut g = lock(&self.inner);
        let TopicInner { engine, out, log } = &mut *g;
        // Only an untracked reader's listener is held (a keyed one's is not).
        let readers: Vec<Arc<ReaderCore>> = match batch {
            true => engine.readers().iter().filter(|r| r.handle.untracked()).map(|r| r.handle.clone()).collect(),
            false => Vec::new(),
        };
        let mut fx = Apply { t: self, out, log, appended: false, own: 0, batch_readers: &readers, held: None };
        let r = f(engine, &mut fx);
        let (appended, own) = (fx.appended, fx.own);
        drop(fx); // the listener it holds, before anything is woken
        if appended {
            if let Some(w) = log {
                w.kick();
            }
        }
        if own > 0 {
            self.own.count.fetch_add(own, Ordering::Release);
            if self.own.room_wakers.load(Ordering::Acquire) > 0 {
                self.wake_room();
            }
            // A notify is a system call: only when someone waits.
            if self.own.waiters.load(Ordering::Relaxed) > 0 {
                self.delivered.notify_all();
            }
        }
        for c in out.take_dead() {
            engine.forget_client(c);
        }
        r
    }

    /// The topic's subgroup in `view` (the last view's answer is cached).
    pub(crate) fn subgroup_in(&self, view: &spindle_views::view::View) -> Option<usize> {
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

    /// A new view in which this node is in the topic's subgroup (see
    /// [`TopicEngine::enter_view`]): the members to catch up from, if any.
    pub(crate) fn enter_view(&self, view: ViewId, entry: &TopicEntry, members: &[NodeId]) -> Option<Vec<NodeId>> {
        self.run(|e, fx| e.enter_view(view, entry, members, Now::real(), fx))
    }

    /// A delivered batch of the topic's subgroup, under one lock.
    #[inline]
    pub(crate) fn deliver_batch(&self, view: ViewId, batch: &spindle_views::group::InPlaceBatch<'_>) {
        let now = Now::real();
        self.run_input(true, |e, fx| {
            if e.lean() {
                deliver_lean(e, view, batch, now, fx);
            } else {
                for m in batch.iter() {
                    e.deliver(view, m.sender, Src::slot(m.message), now, fx);
                }
            }
            e.batch_end(fx);
        })
    }

    /// How many samples of local writers were delivered here so far.
    pub(crate) fn delivered_count(&self) -> u64 {
        self.own.count.load(Ordering::Acquire)
    }

    /// Waits up to `timeout` until `done` holds of the engine, woken by each
    /// delivered batch that holds a local writer's sample, and looks at `give_up`
    /// (the group's state, which delivery does not signal) at least every `slice`.
    pub(crate) fn wait_own(
        &self,
        timeout: Duration,
        slice: Duration,
        mut done: impl FnMut(&TopicEngine<Arc<ReaderCore>>) -> bool,
        mut give_up: impl FnMut() -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        let mut g = lock(&self.inner);
        // Counted under the lock that delivery holds when it looks: no wake-up lost.
        self.own.waiters.fetch_add(1, Ordering::Relaxed);
        let ok = loop {
            if done(&g.engine) {
                break true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || give_up() {
                break false;
            }
            g = self.delivered.wait_timeout(g, left.min(slice)).unwrap_or_else(|p| p.into_inner()).0;
        };
        self.own.waiters.fetch_sub(1, Ordering::Relaxed);
        ok
    }

    /// Wakes `w` at the next delivery of a local writer's sample.
    pub(crate) fn wake_on_delivery(&self, w: std::task::Waker) {
        let mut ws = lock(&self.room_wakers);
        ws.push(w);
        self.own.room_wakers.store(ws.len(), Ordering::Release);
    }

    fn wake_room(&self) {
        let ws = std::mem::take(&mut *lock(&self.room_wakers));
        self.own.room_wakers.store(0, Ordering::Release);
        for w in ws {
            w.wake();
        }
    }

    /// Adds a local reader: it first gets the history this node holds.
    pub(crate) fn add_reader(&self, r: Arc<ReaderCore>) {
        let reader = LocalReader { id: r.id, level: r.level, handle: r };
        self.run(|e, fx| e.add_reader(reader, Now::real(), fx))
    }

    /// A view starts (see [`TopicEngine::view_started`]).
    pub(crate) fn view_started(&self, entry: &TopicEntry, members: &[NodeId]) {
        self.run(|e, fx| e.view_started(entry, members, fx))
    }

    /// Notes a local writer's send state (see [`TopicState::let_go_of_views`]).
    pub(crate) fn note_sender(&self, s: &Arc<Mutex<Sending>>) {
        let mut v = lock(&self.senders);
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(s));
    }

    /// A view started: every local writer lets go of the subgroup its last send
    /// went to (an idle writer would hold the view before until its next write).
    /// A writer in the middle of a send is skipped: its send either goes into the
    /// new view (and caches that) or finds the old subgroup wedged and lets go of
    /// it before it waits.
    pub(crate) fn let_go_of_views(&self) {
        let senders: Vec<Arc<Mutex<Sending>>> = lock(&self.senders).iter().filter_map(Weak::upgrade).collect();
        for s in senders {
            if let Ok(mut s) = s.try_lock() {
                s.let_go();
            }
        }
    }

    /// This participant was removed from the domain and is back (see
    /// [`TopicEngine::rejoined`]).
    pub(crate) fn rejoined(&self) {
        lock(&self.inner).engine.rejoined();
    }

    /// Ends a late join (see [`TopicEngine::caught_up`]).
    pub(crate) fn finish_catch_up(
        &self,
        entries: Vec<Entry>,
        seam: Option<u64>,
        seen: &[(u64, u32, u64)],
        failed: Option<CatchUpError>,
    ) {
        self.run(|e, fx| e.caught_up(entries, seam, seen, failed, Now::real(), fx))
    }
}

mod log_writer;
#[cfg(test)]
mod seam_tests;
#[cfg(test)]
mod wait_tests;
