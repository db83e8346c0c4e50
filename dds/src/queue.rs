//! Where delivery puts a topic's samples for each local reader: the type-erased
//! side of a [`crate::DataReader`] (a listener, or a bounded queue), with the
//! reader's view of every instance (its state, its writers, its last sample). The
//! topic (or a client's pump) feeds it; the typed reader drains it.

use crate::instance::{
    parse_prefix, HandleMap, InstanceHandle, InstanceState, Kind, SampleState, StateMask, ViewState, PREFIX,
};
use crate::qos::{History, Level, Qos};
use crate::sample::{SampleInfo, WriterId, CLIENT_HEADER, HEADER};
use crate::sink::Src;
use crate::status::{InstanceCounts, ReaderStatus, Rejection};
use spindle_sst::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use spindle_sst::sync::lock;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

mod listen;
pub(crate) use listen::Listening;

/// A queued sample: its info and payload (the serialized sample, without header
/// or keyed prefix).
#[derive(Debug, Clone)]
pub(crate) struct Raw {
    pub(crate) info: SampleInfo,
    pub(crate) payload: Arc<[u8]>,
    pub(crate) read: bool,
}

/// A content filter over a sample's payload.
pub(crate) type FilterFn = Box<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// What a reader knows of one instance.
#[derive(Debug)]
struct Inst {
    state: InstanceState,
    /// No sample of it returned yet (since it came alive).
    new: bool,
    /// Writers that wrote it and did not unregister it, by [`WriterId::key`].
    writers: Vec<(u64, u32, bool)>,
    queued: usize,
    /// Its last sample (what a state change without data shows).
    last: Option<(SampleInfo, Arc<[u8]>)>,
    /// When its last sample arrived, and deadline periods counted since.
    last_at: Instant,
    missed: u64,
    counts: InstanceCounts,
}

#[derive(Debug, Default)]
pub(crate) struct Queue {
    pub(crate) samples: VecDeque<Raw>,
    pub(crate) status: ReaderStatus,
    instances: HandleMap<Inst>,
}

/// What a WaitSet sleeps on: a counter bumped by every change it may care about.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    pub(crate) gen: Mutex<u64>,
    pub(crate) cond: Condvar,
    /// WaitSets asleep on `cond` (raised under `gen`'s lock before they sleep): a
    /// notify is a system call, made only when one sleeps.
    pub(crate) sleepers: AtomicUsize,
}

impl Signal {
    pub(crate) fn notify(&self) {
        *lock(&self.gen) += 1;
        if self.sleepers.load(Ordering::Acquire) > 0 {
            self.cond.notify_all();
        }
    }
}

/// Who waits on a reader besides `wait`: WaitSets and async tasks.
pub(crate) enum Watcher {
    Set(Weak<Signal>),
    /// A reader's stream (only with the `async` feature).
    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    Task(std::task::Waker),
}

/// The type-erased side of a reader that delivery feeds.
pub(crate) struct ReaderCore {
    pub(crate) id: u32,
    pub(crate) level: Level,
    keyed: bool,
    per_instance: usize,
    total: usize,
    lifespan: Option<Duration>,
    deadline: Option<Duration>,
    filter: Option<FilterFn>,
    pub(crate) q: Mutex<Queue>,
    pub(crate) cond: Condvar,
    listener: Mutex<Listening>,
    /// True while a listener is set (changed under `listener`'s lock): a sample
    /// for the queue takes no listener lock to learn there is none.
    listening: AtomicBool,
    /// Samples handed to a listener (counted apart: no queue lock per sample, and
    /// no atomic add either: only the holder of `listener`'s lock stores it, so a
    /// status read from inside the listener takes no lock).
    taken_by_listener: AtomicU64,
    watchers: Mutex<Vec<Watcher>>,
    n_watchers: AtomicUsize,
    /// Threads in [`ReaderCore::wait_nonempty`] (a notify is a system call: only
    /// when one waits).
    sleepers: AtomicUsize,
}

impl std::fmt::Debug for ReaderCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReaderCore").field("id", &self.id).field("level", &self.level).finish_non_exhaustive()
    }
}

impl ReaderCore {
    pub(crate) fn new(id: u32, qos: &Qos, keyed: bool, filter: Option<FilterFn>) -> ReaderCore {
        let (per_instance, total) = match (qos.history, keyed) {
            (History::KeepLast(n), true) => (n.max(1) as usize, qos.max_samples.max(1) as usize),
            (History::KeepAll, true) => (usize::MAX, qos.max_samples.max(1) as usize),
            (_, false) => (usize::MAX, qos.keep()),
        };
        ReaderCore {
            id,
            level: qos.level,
            keyed,
            per_instance,
            total,
            lifespan: qos.lifespan,
            deadline: qos.deadline,
            filter,
            q: Mutex::new(Queue::default()),
            cond: Condvar::new(),
            listener: Mutex::new(Listening::default()),
            listening: AtomicBool::new(false),
            taken_by_listener: AtomicU64::new(0),
            watchers: Mutex::new(Vec::new()),
            n_watchers: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
        }
    }

    /// The sample, copied out, into the queue (or, for a tracked reader, to its
    /// listener once its instance and filter are seen to).
    pub(super) fn enqueue(&self, info: &SampleInfo, src: Src<'_>) {
        let mut at = if info.writer.client.is_some() { CLIENT_HEADER } else { HEADER };
        let mut info = *info;
        let mut kind = Kind::Data;
        if self.keyed {
            let payload_len = src.len() - at;
            let parsed = (payload_len >= PREFIX).then(|| parse_prefix(src.word(at / 8), src.word(at / 8 + 1)));
            match parsed.flatten() {
                Some((h, k)) => (info.instance, kind) = (h, k),
                None => return self.reject(Rejection::NoInstance { seq: info.seq, writer: info.writer }),
            }
            at += PREFIX;
            info.valid_data = kind == Kind::Data;
        }
        // Small samples are copied out on the stack, then once into their shared
        // buffer (one allocation per sample).
        let len = src.len() - at;
        let mut small = [0u8; 256];
        let mut large = Vec::new();
        let buf: &mut [u8] = if len <= small.len() {
            &mut small[..len]
        } else {
            large.resize(len, 0);
            &mut large
        };
        src.read_at(at, buf);
        if kind == Kind::Data && self.filter.as_ref().is_some_and(|f| !f(buf)) {
            lock(&self.q).status.filtered += 1;
            return;
        }
        let payload: Arc<[u8]> = Arc::from(&*buf);
        let mut q = lock(&self.q);
        q.status.received += 1;
        info.instance_state = q.note(&info, kind, self.keyed.then_some(&payload));
        let mut payload = payload;
        if kind.key_only() {
            // A change by key: shown with this reader's last sample of the instance,
            // or, if it never had one, as the state alone (no sample).
            match q.instances.get(&info.instance).and_then(|i| i.last.as_ref()) {
                Some((_, last)) => payload = last.clone(),
                None => {
                    drop(q);
                    self.notify();
                    return;
                }
            }
        }
        if self.listening.load(Ordering::Acquire) {
            if let Some(f) = lock(&self.listener).f.as_mut() {
                drop(q);
                f(&info, &Src::Bytes(&payload), 0);
                return;
            }
        }
        self.push(&mut q, Raw { info, payload, read: false });
        drop(q);
        self.notify();
    }

    /// Queues `raw`, dropping the oldest past the history's limits.
    fn push(&self, q: &mut Queue, raw: Raw) {
        let h = raw.info.instance;
        q.samples.push_back(raw);
        let queued = q.instances.get_mut(&h).map_or(0, |i| {
            i.queued += 1;
            i.queued
        });
        if queued > self.per_instance {
            let oldest = q.samples.iter().position(|r| r.info.instance == h);
            if let Some(r) = oldest.and_then(|pos| q.samples.remove(pos)) {
                q.replaced(&r);
            }
        }
        while q.samples.len() > self.total {
            if let Some(r) = q.samples.pop_front() {
                q.replaced(&r);
            }
        }
    }

    /// Wakes whoever waits on this reader.
    pub(crate) fn notify(&self) {
        // A sleeper counts itself under the queue's lock before it sleeps, and
        // every change to the queue is made under that lock before this runs.
        if self.sleepers.load(Ordering::Acquire) > 0 {
            self.cond.notify_all();
        }
        if self.n_watchers.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut ws = lock(&self.watchers);
        let mut tasks = Vec::new();
        ws.retain(|x| match x {
            Watcher::Set(s) => s.upgrade().map(|s| s.notify()).is_some(),
            // A task is woken once: it registers again when it polls.
            Watcher::Task(t) => {
                tasks.push(t.clone());
                false
            }
        });
        self.n_watchers.store(ws.len(), Ordering::Release);
        drop(ws);
        for t in tasks {
            t.wake();
        }
    }

    /// True while a sample is queued.
    pub(crate) fn has_samples(&self) -> bool {
        !lock(&self.q).samples.is_empty()
    }

    /// Waits up to `timeout` until a sample is queued; true if one is.
    pub(crate) fn wait_nonempty(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut q = lock(&self.q);
        while q.samples.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            self.sleepers.fetch_add(1, Ordering::AcqRel);
            q = self.cond.wait_timeout(q, left).unwrap_or_else(|p| p.into_inner()).0;
            self.sleepers.fetch_sub(1, Ordering::AcqRel);
        }
        true
    }

    /// Registers a WaitSet or a task to wake at the next sample or status change.
    pub(crate) fn watch(&self, w: Watcher) {
        let mut ws = lock(&self.watchers);
        if let Watcher::Task(t) = &w {
            if ws.iter().any(|x| matches!(x, Watcher::Task(o) if o.will_wake(t))) {
                return;
            }
        }
        ws.push(w);
        self.n_watchers.store(ws.len(), Ordering::Release);
    }

    /// Takes or reads up to `max` queued samples that `mask` (and `instance`, if
    /// given) wants, in delivery order, with their states filled in; a read
    /// leaves them queued and marks them read.
    pub(crate) fn collect(
        &self,
        max: usize,
        mask: StateMask,
        instance: Option<InstanceHandle>,
        take: bool,
    ) -> Vec<Raw> {
        let mut q = lock(&self.q);
        if let Some(life) = self.lifespan {
            q.expire(life);
        }
        let mut out = Vec::new();
        let mut i = 0;
        while i < q.samples.len() && out.len() < max {
            let r = &q.samples[i];
            if instance.is_some_and(|h| h != r.info.instance) {
                i += 1;
                continue;
            }
            let (ss, vs, is) = q.states(r);
            if !mask.matches(ss, vs, is) {
                i += 1;
                continue;
            }
            let mut info = r.info;
            (info.sample_state, info.view_state, info.instance_state) = (ss, vs, is);
            if take {
                let Some(r) = q.samples.remove(i) else { break };
                q.dequeued(r.info.instance);
                out.push(Raw { info, payload: r.payload, read: true });
            } else {
                q.samples[i].read = true;
                out.push(Raw { info, payload: q.samples[i].payload.clone(), read: true });
                i += 1;
            }
        }
        for r in &out {
            if let Some(x) = q.instances.get_mut(&r.info.instance) {
                x.new = false;
            }
        }
        out
    }

    /// True if a queued sample is one `mask` wants.
    pub(crate) fn any(&self, mask: StateMask) -> bool {
        let q = lock(&self.q);
        if mask == StateMask::ANY {
            return !q.samples.is_empty();
        }
        q.samples.iter().any(|r| {
            let (ss, vs, is) = q.states(r);
            mask.matches(ss, vs, is)
        })
    }

    /// The reader's statuses now (deadlines counted up to now).
    pub(crate) fn status(&self) -> ReaderStatus {
        let mut q = lock(&self.q);
        if let Some(period) = self.deadline {
            q.count_deadlines(period);
        }
        q.status.instances = q.instances.len();
        q.status.clone()
    }

    /// The state of instance `h`, if this reader knows it.
    pub(crate) fn instance_state(&self, h: InstanceHandle) -> Option<InstanceState> {
        lock(&self.q).instances.get(&h).map(|i| i.state)
    }

    /// What this reader counted of instance `h`, if it knows it.
    pub(crate) fn instance_counts(&self, h: InstanceHandle) -> Option<InstanceCounts> {
        lock(&self.q).instances.get(&h).map(|i| i.counts)
    }

    /// The writers alive now (members' writers listed in the table, by
    /// [`WriterId::key`]) and how many stopped being alive since the last view (their
    /// participant left): instances whose every writer is gone have no writers.
    /// With `tell`, a reader of a keyed topic that had a sample of such an
    /// instance gets a sample telling so (`valid_data` false); unkeyed topics
    /// change the state only.
    pub(crate) fn writers_now(&self, alive: &[(u64, u32, bool)], lost: usize, tell: bool) {
        let mut q = lock(&self.q);
        let live = &mut q.status.liveliness;
        if live.alive_count != alive.len() as u64 || lost > 0 {
            live.alive_count = alive.len() as u64;
            live.not_alive_count += lost as u64;
            live.changes += 1;
        }
        let mut notices = Vec::new();
        for (h, inst) in q.instances.iter_mut() {
            let before = inst.writers.len();
            inst.writers.retain(|w| w.2 || alive.contains(w));
            if inst.writers.len() < before && inst.writers.is_empty() && inst.state == InstanceState::Alive {
                inst.state = InstanceState::NoWriters;
                if let Some((info, payload)) = inst.last.as_ref().filter(|_| tell && self.keyed) {
                    let mut info = *info;
                    (info.valid_data, info.instance, info.instance_state) = (false, *h, InstanceState::NoWriters);
                    info.from_history = false;
                    info.source_timestamp = SystemTime::now();
                    notices.push(Raw { info, payload: payload.clone(), read: false });
                }
            }
        }
        if notices.is_empty() {
            drop(q);
            self.notify();
            return;
        }
        notices.sort_by_key(|r| r.info.topic_seq);
        let listening = self.listening.load(Ordering::Acquire) && lock(&self.listener).f.is_some();
        if listening {
            drop(q);
            if let Some(f) = lock(&self.listener).f.as_mut() {
                for r in &notices {
                    f(&r.info, &Src::Bytes(&r.payload), 0);
                }
            }
        } else {
            for r in notices {
                self.push(&mut q, r);
            }
            drop(q);
        }
        self.notify();
    }

    /// `n` samples of the topic's order will never reach this reader.
    pub(crate) fn missed(&self, n: u64) {
        lock(&self.q).status.lost += n;
        self.notify();
    }

    pub(crate) fn reject(&self, why: Rejection) {
        let mut q = lock(&self.q);
        q.status.rejected += 1;
        q.status.last_rejected = Some(why);
        drop(q);
        self.notify();
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

impl Queue {
    /// A queued sample's states now: its own, and its instance's at this reader.
    fn states(&self, r: &Raw) -> (SampleState, ViewState, InstanceState) {
        let ss = if r.read { SampleState::Read } else { SampleState::NotRead };
        match self.instances.get(&r.info.instance) {
            Some(x) => (ss, if x.new { ViewState::New } else { ViewState::NotNew }, x.state),
            None => (ss, ViewState::New, InstanceState::Alive),
        }
    }

    /// Notes a sample's effect on its instance; returns the instance's state.
    /// `payload` is kept as the instance's last sample (keyed readers only: only
    /// they show one for a change without data).
    fn note(&mut self, info: &SampleInfo, kind: Kind, payload: Option<&Arc<[u8]>>) -> InstanceState {
        let now = Instant::now();
        let inst = self.instances.entry(info.instance).or_insert_with(|| Inst {
            state: InstanceState::Alive,
            new: true,
            writers: Vec::new(),
            queued: 0,
            last: None,
            last_at: now,
            missed: 0,
            counts: InstanceCounts::default(),
        });
        inst.counts.received += 1;
        inst.counts.from_history += u64::from(info.from_history);
        let w = info.writer.key();
        match kind {
            Kind::Data => {
                if inst.state != InstanceState::Alive {
                    inst.state = InstanceState::Alive;
                    inst.new = true;
                }
                if !inst.writers.contains(&w) {
                    inst.writers.push(w);
                }
                if let Some(p) = payload {
                    inst.last = Some((*info, p.clone()));
                }
                inst.last_at = now;
                inst.missed = 0;
            }
            Kind::Dispose | Kind::DisposeKey => inst.state = InstanceState::Disposed,
            Kind::Unregister | Kind::UnregisterKey => {
                inst.writers.retain(|x| *x != w);
                if inst.writers.is_empty() && inst.state == InstanceState::Alive {
                    inst.state = InstanceState::NoWriters;
                }
            }
        }
        inst.state
    }

    /// `r` left the queue untaken, replaced by a newer sample.
    fn replaced(&mut self, r: &Raw) {
        self.dequeued(r.info.instance);
        self.status.lost += 1;
        if let Some(i) = self.instances.get_mut(&r.info.instance) {
            i.counts.lost += 1;
            i.counts.history_lost += u64::from(r.info.from_history);
        }
    }

    fn dequeued(&mut self, h: InstanceHandle) {
        if let Some(i) = self.instances.get_mut(&h) {
            i.queued = i.queued.saturating_sub(1);
        }
    }

    /// Drops queued samples older than `life`.
    fn expire(&mut self, life: Duration) {
        let before = self.samples.len();
        let mut gone = Vec::new();
        self.samples.retain(|r| {
            let old = r.info.source_timestamp.elapsed().is_ok_and(|age| age > life);
            if old {
                gone.push(r.info.instance);
            }
            !old
        });
        for h in gone {
            self.dequeued(h);
        }
        self.status.expired += (before - self.samples.len()) as u64;
    }

    /// Counts the deadline periods alive instances missed up to now.
    fn count_deadlines(&mut self, period: Duration) {
        let now = Instant::now();
        for (h, inst) in self.instances.iter_mut().filter(|(_, i)| i.state == InstanceState::Alive) {
            let periods = (now.duration_since(inst.last_at).as_nanos() / period.as_nanos().max(1)) as u64;
            if periods > inst.missed {
                self.status.deadline_missed.total_count += periods - inst.missed;
                self.status.deadline_missed.last_instance = *h;
                inst.missed = periods;
            }
        }
    }
}
