//! The predicate thread: one per node, evaluating registered predicates over shared
//! state and running their triggers (Spindle §2.4, §3.2, §3.4).
//!
//! ```text
//!   application threads ── with_state(...) + notify() ──┐
//!   peers' writes land ── doorbell ─────────────────────┤
//!                                                        ▼
//!   loop: receive (tcp: read the sockets, apply frames) ─ lock state ─ evaluate
//!         predicates ─ run triggers (collect Pushes) ─ unlock ─ post the pushes ─
//!         flush ─ work done? spin : park (doorbell, timer; tcp: and the sockets)
//! ```
//!
//! Rules this thread keeps:
//! - triggers never touch the network: they return [`Pushes`], which are posted after
//!   the state lock is released (Spindle §3.4), so an application thread waiting for
//!   the lock never waits for a write;
//! - each pass takes whatever is ready; it never waits to fill a batch (§3.2);
//! - it spins while there is work and for `spin` after the last work, then parks on
//!   the doorbell until a peer's write lands, an application thread calls `notify`, or
//!   the next timer is due. An idle node costs only its timers (heartbeats).
//!
//! Predicate kinds: [`Kind::Recurrent`] (trigger whenever true), [`Kind::OneTime`]
//! (the first time true, then removed), [`Kind::Transition`] (each time it goes from
//! false to true) and timers ([`PredicateThread::every`]).
//!
//! Triggers run with the state lock held and must not call back into
//! [`PredicateThread::with_state`] (that would deadlock).
//!
//! An application thread that waits for what the passes bring may run them itself
//! for the time of its wait while this thread sleeps aside ([`Lender`], module
//! `lend`): triggers then run on that thread.

use crate::doorbell::Doorbell;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{lock, Arc, Condvar, Mutex};
pub use crate::table::Pushes;
use crate::transport::{PeerEvent, Transport};
use std::time::{Duration, Instant};
use worker::Worker;

mod lend;
mod worker;

pub use lend::{Lender, Lent};

/// Idle policy and naming of a predicate thread.
#[derive(Debug, Clone)]
pub struct PollConfig {
    /// How long to keep spinning after the last work before parking. Spinning buys
    /// latency (no ~35 µs wake-up) at the price of a core; with several nodes per core
    /// a long spin starves the others, so the default is short.
    pub spin: Duration,
    /// While spinning, give the core away (`sched_yield`) once this long has passed
    /// since the last work or the last yield (zero: never). A spinning predicate
    /// thread that shares a core with a busy thread (the application's sender, on a
    /// host with fewer cores than busy threads) otherwise holds that core for its
    /// whole time slice; the yield returns at once when nothing else waits for the
    /// core. See docs/benchmarks.md for what it bought.
    pub yield_every: Duration,
    /// While busy, give the core away (`sched_yield`) after each pass that did work
    /// once passes have done work without a break for this long (zero: never).
    /// Three busy threads on two cores (a sender and two nodes' predicate threads)
    /// otherwise take turns by time slice: the predicate thread runs pass after
    /// pass on a handful of new messages while the thread that makes them waits
    /// for the core. Yielding hands it over, and the next pass finds a larger
    /// batch; where no other thread waits for the core the yield returns at once
    /// and costs one system call. A stream keeps passes busy this long; the few
    /// passes one message of a round trip makes busy mostly end sooner (163 yields
    /// in 100,000 messages sent one at a time, 20 µs apart). See docs/benchmarks.md
    /// for what it bought and cost.
    pub busy_yield: Duration,
    /// Longest park when no timer is due (a safety net; doorbells wake it sooner).
    pub max_park: Duration,
    /// How often to run the transport's liveness probe ([`Transport::check_peers`]).
    pub probe_every: Duration,
    /// While a waiting application thread runs the passes itself ([`Lender`]), the
    /// predicate thread looks this often whether it still does, and runs them again
    /// once none has for this long: a thread that waits again within this time takes
    /// them without waking the predicate thread, and work that arrives after the
    /// last wait waits up to twice this long.
    pub lend_linger: Duration,
    /// Thread name.
    pub name: String,
}

impl Default for PollConfig {
    fn default() -> Self {
        PollConfig {
            spin: Duration::from_micros(DEFAULT_SPIN_US),
            yield_every: Duration::from_micros(DEFAULT_YIELD_US),
            busy_yield: Duration::from_micros(DEFAULT_BUSY_YIELD_US),
            max_park: Duration::from_millis(200),
            probe_every: Duration::from_millis(100),
            lend_linger: Duration::from_millis(5),
            name: "sst-predicates".into(),
        }
    }
}

/// Default spin budget in µs (see the README's sst_bench table for what it buys).
pub const DEFAULT_SPIN_US: u64 = 100;

/// Default [`PollConfig::yield_every`] in µs.
pub const DEFAULT_YIELD_US: u64 = 50;

/// Default [`PollConfig::busy_yield`] in µs.
pub const DEFAULT_BUSY_YIELD_US: u64 = 10;

/// When a predicate's trigger runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// On every pass where the predicate holds.
    Recurrent,
    /// The first time the predicate holds; then the predicate is removed.
    OneTime,
    /// Each time the predicate goes from false to true.
    Transition,
}

/// Identifies a registered predicate, for [`PredicateThread::remove`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PredicateId(u64);

type Cond<S> = Box<dyn FnMut(&S) -> bool + Send>;
type Action<S> = Box<dyn FnMut(&mut S, &mut Pushes) + Send>;
type OnEvent<S> = Box<dyn FnMut(&mut S, &PeerEvent, &mut Pushes) + Send>;

struct Entry<S> {
    id: PredicateId,
    cond: Option<Cond<S>>,
    kind: Kind,
    timer: Option<(Duration, Option<Instant>)>,
    last: bool,
    action: Action<S>,
}

struct Incoming<S> {
    add: Vec<Entry<S>>,
    remove: Vec<PredicateId>,
    handlers: Vec<OnEvent<S>>,
}

/// Counters of a predicate thread, for benchmarks and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Passes over the predicates.
    pub passes: u64,
    /// Triggers run.
    pub fired: u64,
    /// Times the thread parked on its doorbell.
    pub parks: u64,
    /// Writes posted to the transport.
    pub writes: u64,
    /// Writes the transport refused (disconnected peers and the like).
    pub write_errors: u64,
    /// Bytes the pushes copied: a push to k peers counts k times its length where it
    /// is a write per peer, once where it is published once (`mem`, `shm`).
    pub bytes_written: u64,
    /// Times the thread gave its core away while spinning ([`PollConfig::yield_every`]).
    pub yields: u64,
    /// Times the thread gave its core away after a pass that did work
    /// ([`PollConfig::busy_yield`]).
    pub busy_yields: u64,
}

#[derive(Default)]
struct AtomicStats {
    passes: AtomicU64,
    fired: AtomicU64,
    parks: AtomicU64,
    writes: AtomicU64,
    write_errors: AtomicU64,
    bytes_written: AtomicU64,
    yields: AtomicU64,
    busy_yields: AtomicU64,
}

struct Inner<S> {
    state: Mutex<S>,
    transport: Arc<dyn Transport>,
    incoming: Mutex<Incoming<S>>,
    has_incoming: AtomicBool,
    stop: AtomicBool,
    next_id: AtomicU64,
    stats: AtomicStats,
    cfg: PollConfig,
    /// The node's working set: whoever holds it runs the passes (the thread, or a
    /// waiting application thread that borrowed it: see [`Lender`]).
    worker: Mutex<Worker<S>>,
    /// A borrower holds or is about to take the working set.
    lend: AtomicBool,
    /// The borrower sleeps on the doorbell (the thread aside looks less often).
    borrower_parked: AtomicBool,
    /// When the last borrow ended, in ns since `origin`; the thread steps aside on
    /// it (see `lend`).
    last_end: AtomicU64,
    origin: Instant,
    /// The predicate thread's id: a trigger on it that would borrow is refused.
    thread: std::sync::OnceLock<std::thread::ThreadId>,
    /// What the stepped-aside thread sleeps on (a stop wakes it).
    lent: Mutex<()>,
    lent_cv: Condvar,
}

/// A running predicate thread over state `S` (see the module docs).
///
/// ```
/// use spindle_sst::predicate::{Kind, PollConfig, PredicateThread};
/// use spindle_sst::transport::{mem::MemFabric, NodeId, RegionId, RegionSpec};
/// use spindle_sst::sync::Arc;
/// use std::time::Duration;
/// let fabric = MemFabric::new();
/// let t = fabric.join(NodeId(0), &[], &[RegionSpec { id: RegionId(0), len: 64 }], Duration::from_secs(1)).unwrap();
/// let pt = PredicateThread::spawn(0u64, Arc::new(t), PollConfig::default()).unwrap();
/// pt.register(Kind::OneTime, |n: &u64| *n == 1, |n, _pushes| *n = 2);
/// pt.with_state(|n| *n = 1);
/// pt.notify();
/// let deadline = std::time::Instant::now() + Duration::from_secs(5);
/// while pt.with_state(|n| *n) != 2 && std::time::Instant::now() < deadline {
///     std::thread::sleep(Duration::from_millis(1));
/// }
/// assert_eq!(pt.with_state(|n| *n), 2);
/// ```
pub struct PredicateThread<S> {
    inner: Arc<Inner<S>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<S: Send + 'static> std::fmt::Debug for PredicateThread<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PredicateThread").field("stats", &self.stats()).finish()
    }
}

impl<S: Send + 'static> PredicateThread<S> {
    /// Starts the thread over `state`, posting through `transport`.
    pub fn spawn(state: S, transport: Arc<dyn Transport>, cfg: PollConfig) -> std::io::Result<Self> {
        let now = Instant::now();
        let inner = Arc::new(Inner {
            state: Mutex::new(state),
            transport,
            incoming: Mutex::new(Incoming { add: Vec::new(), remove: Vec::new(), handlers: Vec::new() }),
            has_incoming: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            stats: AtomicStats::default(),
            cfg: cfg.clone(),
            worker: Mutex::new(Worker::new(now + cfg.probe_every)),
            lend: AtomicBool::new(false),
            borrower_parked: AtomicBool::new(false),
            last_end: AtomicU64::new(0),
            origin: now,
            thread: std::sync::OnceLock::new(),
            lent: Mutex::new(()),
            lent_cv: Condvar::new(),
        });
        let i2 = inner.clone();
        let thread = std::thread::Builder::new().name(cfg.name.clone()).spawn(move || run(&i2))?;
        Ok(PredicateThread { inner, thread: Some(thread) })
    }

    fn add(&self, cond: Option<Cond<S>>, kind: Kind, timer: Option<Duration>, action: Action<S>) -> PredicateId {
        let id = PredicateId(self.inner.next_id.fetch_add(1, Ordering::Relaxed));
        let e = Entry { id, cond, kind, timer: timer.map(|p| (p, None)), last: false, action };
        lock(&self.inner.incoming).add.push(e);
        self.inner.has_incoming.store(true, Ordering::Release);
        self.notify();
        id
    }

    /// Registers a predicate and its trigger.
    pub fn register(
        &self,
        kind: Kind,
        cond: impl FnMut(&S) -> bool + Send + 'static,
        action: impl FnMut(&mut S, &mut Pushes) + Send + 'static,
    ) -> PredicateId {
        self.add(Some(Box::new(cond)), kind, None, Box::new(action))
    }

    /// Registers a predicate whose condition is looked at no more often than once
    /// per `at_most_every` while the thread is busy (a condition that costs more
    /// than the work it watches for arrives); it is always looked at before the
    /// thread parks, so a change never waits for a later wake-up.
    pub fn register_paced(
        &self,
        kind: Kind,
        at_most_every: Duration,
        cond: impl FnMut(&S) -> bool + Send + 'static,
        action: impl FnMut(&mut S, &mut Pushes) + Send + 'static,
    ) -> PredicateId {
        self.add(Some(Box::new(cond)), kind, Some(at_most_every), Box::new(action))
    }

    /// Registers a timer: `action` runs every `period` (first at the next pass).
    pub fn every(&self, period: Duration, action: impl FnMut(&mut S, &mut Pushes) + Send + 'static) -> PredicateId {
        self.add(None, Kind::Recurrent, Some(period), Box::new(action))
    }

    /// Registers a handler for transport events ([`PeerEvent`]).
    pub fn on_event(&self, handler: impl FnMut(&mut S, &PeerEvent, &mut Pushes) + Send + 'static) {
        lock(&self.inner.incoming).handlers.push(Box::new(handler));
        self.inner.has_incoming.store(true, Ordering::Release);
        self.notify();
    }

    /// Removes a predicate or timer (no-op if it already ran as a one-time predicate).
    pub fn remove(&self, id: PredicateId) {
        lock(&self.inner.incoming).remove.push(id);
        self.inner.has_incoming.store(true, Ordering::Release);
        self.notify();
    }

    /// Runs `f` on the state under its lock. Call [`PredicateThread::notify`] after a
    /// change the predicates should see promptly.
    pub fn with_state<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        f(&mut lock(&self.inner.state))
    }

    /// Wakes the thread (an application thread queued work).
    pub fn notify(&self) {
        self.inner.transport.doorbell().ring();
    }

    /// The transport.
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.inner.transport
    }

    /// Counters so far (updated at least once per park and every few thousand passes).
    pub fn stats(&self) -> Stats {
        let s = &self.inner.stats;
        Stats {
            passes: s.passes.load(Ordering::Relaxed),
            fired: s.fired.load(Ordering::Relaxed),
            parks: s.parks.load(Ordering::Relaxed),
            writes: s.writes.load(Ordering::Relaxed),
            write_errors: s.write_errors.load(Ordering::Relaxed),
            bytes_written: s.bytes_written.load(Ordering::Relaxed),
            yields: s.yields.load(Ordering::Relaxed),
            busy_yields: s.busy_yields.load(Ordering::Relaxed),
        }
    }

    /// A handle with which a waiting application thread runs this node's passes
    /// itself while it waits (see [`Lender`]).
    pub fn lender(&self) -> Lender<S> {
        Lender::new(self.inner.clone())
    }

    /// Stops the thread and waits for it. Also done on drop. A borrower's pass in
    /// progress ends first; no pass runs after this returns.
    pub fn stop(&mut self) {
        halt(&self.inner, self.thread.take());
    }
}

impl<S> Drop for PredicateThread<S> {
    fn drop(&mut self) {
        halt(&self.inner, self.thread.take());
    }
}

fn halt<S>(inner: &Inner<S>, thread: Option<std::thread::JoinHandle<()>>) {
    inner.stop.store(true, Ordering::Release);
    inner.transport.doorbell().ring();
    // The thread may be stepping aside for a borrower: wake it to see the stop.
    drop(lock(&inner.lent));
    inner.lent_cv.notify_all();
    // Stopped from its own thread, inside a pass (a callback that dropped the last
    // handle of what owns it): it ends by itself once the pass returns and it sees
    // the stop, and a borrower sees the stop once the pass lets go of the working
    // set's lock, which this thread holds.
    if inner.thread.get() == Some(&std::thread::current().id()) {
        return;
    }
    if let Some(t) = thread {
        let _ = t.join();
    }
    // A borrower checks the stop under the working set's lock before every pass:
    // once the lock was held here, none runs again.
    drop(lock(&inner.worker));
}

/// One idle step inside the spin budget: give the core away once `yield_every` has
/// passed since the last work (`since`) or the last yield, else a spin hint.
fn spin_or_yield(cfg: &PollConfig, now: Instant, since: Instant, yielded: &mut Instant, yields: &mut u64) {
    if !cfg.yield_every.is_zero() && now.duration_since((*yielded).max(since)) >= cfg.yield_every {
        std::thread::yield_now();
        *yielded = now;
        *yields += 1;
    } else {
        crate::sync::spin_loop();
    }
}

/// Passes between clock reads while busy or spinning.
const CLOCK_EVERY: u32 = 32;

fn run<S>(inner: &Inner<S>) {
    let cfg = &inner.cfg;
    let bell: &Doorbell = inner.transport.doorbell();
    inner.transport.attach_driver();
    let _ = inner.thread.set(std::thread::current().id());
    let mut w = lock(&inner.worker);
    let mut now = Instant::now();
    let mut idle_since: Option<Instant> = None;
    // The last work or yield while spinning (see `PollConfig::yield_every`).
    let mut yielded = now;
    let mut tick: u32 = 0;
    // Since when passes have done work without a break (see `PollConfig::busy_yield`).
    let mut busy_since: Option<Instant> = None;
    while !inner.stop.load(Ordering::Acquire) {
        if inner.lend.load(Ordering::Acquire) {
            // An application thread wants to run the passes while it waits.
            w.publish(&inner.stats);
            drop(w);
            lend::step_aside(inner);
            w = lock(&inner.worker);
            (now, idle_since, tick) = (Instant::now(), None, 0);
            continue;
        }
        tick = tick.wrapping_add(1);
        if tick % CLOCK_EVERY == 0 {
            now = Instant::now();
            w.probe(inner, now, cfg.probe_every);
        }
        if tick % 4096 == 0 {
            w.publish(&inner.stats);
        }
        if w.pass(inner, now, false) {
            idle_since = None;
            // A pass that did work may have run long (a large copy, an upcall that
            // digests megabytes): the next one looks at the clock, or timers such as
            // the heartbeat would wait for CLOCK_EVERY such passes.
            now = Instant::now();
            let since = *busy_since.get_or_insert(now);
            if !cfg.busy_yield.is_zero() && now.duration_since(since) >= cfg.busy_yield {
                std::thread::yield_now();
                w.local.busy_yields += 1;
            }
            continue;
        }
        busy_since = None;
        // A zero budget parks after the first idle pass; otherwise the clock is read
        // every CLOCK_EVERY passes to see whether the budget is spent.
        if tick % CLOCK_EVERY != 0 && !cfg.spin.is_zero() {
            crate::sync::spin_loop();
            continue;
        }
        if tick % CLOCK_EVERY != 0 {
            now = Instant::now();
        }
        let since = *idle_since.get_or_insert(now);
        if now.duration_since(since) < cfg.spin {
            spin_or_yield(cfg, now, since, &mut yielded, &mut w.local.yields);
            continue;
        }
        // Park: announce, look for work once more, then sleep until rung or due.
        let ticket = bell.prepare();
        if inner.stop.load(Ordering::Acquire)
            || inner.lend.load(Ordering::Acquire)
            || w.pass(inner, Instant::now(), true)
        {
            bell.cancel(ticket);
            idle_since = None;
            busy_since = Some(Instant::now());
            continue;
        }
        // Wake for the next timer; the liveness probe rides on timer wake-ups (it only
        // gets a wake-up of its own when no timer is registered), so an idle node
        // with heartbeats wakes once per heartbeat period, not twice.
        let wake_by = w.next_due().unwrap_or(w.next_probe()).min(now + cfg.max_park);
        w.local.parks += 1;
        w.publish(&inner.stats);
        let now2 = Instant::now();
        if wake_by > now2 {
            inner.transport.park(ticket, Some(wake_by - now2));
        } else {
            bell.cancel(ticket);
        }
        now = Instant::now();
        w.probe(inner, now, cfg.probe_every);
        idle_since = None;
        // Make the first pass after waking look idle-fresh: spin again before parking.
        tick = 0;
    }
    inner.transport.detach_driver();
    w.publish(&inner.stats);
}

#[cfg(all(test, not(loom)))]
mod tests;
