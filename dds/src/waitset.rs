//! WaitSets: one thread waits on conditions of several readers at once.
//!
//! A [`ReadCondition`] is true while its reader holds a sample its [`StateMask`]
//! wants; a [`StatusCondition`] when one of its statuses changed since it last
//! fired; a [`GuardCondition`] when the application sets it. [`WaitSet::wait`]
//! sleeps (never spins) until one is true or the timeout passes, and says which.
//!
//! ```no_run
//! # fn demo(a: spindle_dds::DataReader<String>, b: spindle_dds::DataReader<u64>) {
//! use spindle_dds::instance::StateMask;
//! use spindle_dds::waitset::{GuardCondition, StatusKind, WaitSet};
//! use std::time::Duration;
//! let mut ws = WaitSet::new();
//! let on_a = ws.attach(a.read_condition(StateMask::not_read()));
//! let on_b = ws.attach(b.read_condition(StateMask::ANY));
//! let lost = ws.attach(a.status_condition(&[StatusKind::SampleLost]));
//! let stop = GuardCondition::new();
//! let on_stop = ws.attach(stop.clone());
//! for fired in ws.wait(Duration::from_secs(1)) {
//!     if fired == on_a { let _ = a.take(); }
//!     if fired == on_b { let _ = b.take(); }
//!     if fired == lost { eprintln!("lost: {}", a.status().lost); }
//!     if fired == on_stop { return; }
//! }
//! # }
//! ```

use crate::instance::StateMask;
use crate::queue::{ReaderCore, Signal, Watcher};
use crate::status::ReaderStatus;
use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_sst::sync::lock;
use spindle_views::group::Group;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// A condition's test and how it wakes a WaitSet.
trait Cond: Send + Sync {
    fn triggered(&self) -> bool;
    fn attach(&self, s: &Arc<Signal>);
    /// Reported as fired by a wait.
    fn fired(&self) {}
    /// How often it must be tested even without a wake-up (deadlines).
    fn every(&self) -> Option<Duration> {
        None
    }
    /// The group whose passes a wait may run (a member's reader, latency first).
    fn group(&self) -> Option<Arc<Group>> {
        None
    }
}

/// A condition to attach to a [`WaitSet`] (from a [`ReadCondition`],
/// [`StatusCondition`] or [`GuardCondition`]).
#[derive(Clone)]
pub struct Condition(Arc<dyn Cond>);

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Condition").field("triggered", &self.0.triggered()).finish()
    }
}

impl Condition {
    /// True if it holds now.
    pub fn triggered(&self) -> bool {
        self.0.triggered()
    }
}

/// True while a reader holds a sample its mask wants (see
/// [`crate::DataReader::read_condition`]).
#[derive(Clone)]
pub struct ReadCondition {
    pub(crate) core: Arc<ReaderCore>,
    pub(crate) mask: StateMask,
    /// A member reader's group (weak: a condition does not keep it running).
    pub(crate) group: Option<Weak<Group>>,
}

impl std::fmt::Debug for ReadCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadCondition").field("reader", &self.core.id).field("mask", &self.mask).finish()
    }
}

impl ReadCondition {
    /// Its mask.
    pub fn mask(&self) -> StateMask {
        self.mask
    }
}

impl Cond for ReadCondition {
    fn triggered(&self) -> bool {
        self.core.any(self.mask)
    }
    fn attach(&self, s: &Arc<Signal>) {
        self.core.watch(Watcher::Set(Arc::downgrade(s)));
    }
    fn group(&self) -> Option<Arc<Group>> {
        self.group.as_ref().and_then(Weak::upgrade)
    }
}

impl From<ReadCondition> for Condition {
    fn from(c: ReadCondition) -> Condition {
        Condition(Arc::new(c))
    }
}

/// A reader status a [`StatusCondition`] watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusKind {
    /// [`ReaderStatus::lost`] grew.
    SampleLost,
    /// [`ReaderStatus::rejected`] grew.
    SampleRejected,
    /// [`ReaderStatus::incompatible`] changed.
    RequestedIncompatibleQos,
    /// [`ReaderStatus::deadline_missed`] grew.
    RequestedDeadlineMissed,
    /// [`ReaderStatus::liveliness`] changed.
    LivelinessChanged,
}

impl StatusKind {
    fn changed(self, was: &ReaderStatus, now: &ReaderStatus) -> bool {
        match self {
            StatusKind::SampleLost => now.lost != was.lost,
            StatusKind::SampleRejected => now.rejected != was.rejected,
            StatusKind::RequestedIncompatibleQos => now.incompatible != was.incompatible,
            StatusKind::RequestedDeadlineMissed => now.deadline_missed != was.deadline_missed,
            StatusKind::LivelinessChanged => now.liveliness != was.liveliness,
        }
    }
}

/// True when one of its statuses changed since it last fired (or since it was
/// made; see [`crate::DataReader::status_condition`]).
#[derive(Clone)]
pub struct StatusCondition {
    core: Arc<ReaderCore>,
    kinds: Vec<StatusKind>,
    seen: Arc<Mutex<ReaderStatus>>,
    every: Option<Duration>,
}

impl std::fmt::Debug for StatusCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusCondition").field("reader", &self.core.id).field("kinds", &self.kinds).finish()
    }
}

impl StatusCondition {
    pub(crate) fn new(core: Arc<ReaderCore>, kinds: &[StatusKind], deadline: Option<Duration>) -> StatusCondition {
        let seen = Arc::new(Mutex::new(core.status()));
        let every = deadline.filter(|_| kinds.contains(&StatusKind::RequestedDeadlineMissed));
        StatusCondition { core, kinds: kinds.to_vec(), seen, every }
    }
}

impl Cond for StatusCondition {
    fn triggered(&self) -> bool {
        let now = self.core.status();
        let was = lock(&self.seen);
        self.kinds.iter().any(|k| k.changed(&was, &now))
    }
    fn attach(&self, s: &Arc<Signal>) {
        self.core.watch(Watcher::Set(Arc::downgrade(s)));
    }
    fn fired(&self) {
        *lock(&self.seen) = self.core.status();
    }
    fn every(&self) -> Option<Duration> {
        self.every
    }
}

impl From<StatusCondition> for Condition {
    fn from(c: StatusCondition) -> Condition {
        Condition(Arc::new(c))
    }
}

/// A condition the application sets and clears. Cheap to clone (clones share it).
#[derive(Debug, Clone, Default)]
pub struct GuardCondition {
    inner: Arc<Guard>,
}

#[derive(Debug, Default)]
struct Guard {
    on: AtomicBool,
    sets: Mutex<Vec<Weak<Signal>>>,
}

impl GuardCondition {
    /// A condition that is false.
    pub fn new() -> GuardCondition {
        GuardCondition::default()
    }
    /// Sets it (waking the WaitSets it is attached to) or clears it.
    pub fn set_trigger_value(&self, on: bool) {
        self.inner.on.store(on, Ordering::Release);
        if on {
            lock(&self.inner.sets).retain(|s| s.upgrade().map(|s| s.notify()).is_some());
        }
    }
}

impl Cond for GuardCondition {
    fn triggered(&self) -> bool {
        self.inner.on.load(Ordering::Acquire)
    }
    fn attach(&self, s: &Arc<Signal>) {
        lock(&self.inner.sets).push(Arc::downgrade(s));
    }
}

impl From<GuardCondition> for Condition {
    fn from(c: GuardCondition) -> Condition {
        Condition(Arc::new(c))
    }
}

/// Waits on several conditions at once (see the module docs).
pub struct WaitSet {
    signal: Arc<Signal>,
    conds: Vec<Condition>,
}

impl std::fmt::Debug for WaitSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitSet").field("conditions", &self.conds.len()).finish()
    }
}

impl Default for WaitSet {
    fn default() -> Self {
        WaitSet::new()
    }
}

impl WaitSet {
    /// An empty WaitSet.
    pub fn new() -> WaitSet {
        WaitSet { signal: Arc::new(Signal::default()), conds: Vec::new() }
    }

    /// Attaches a condition; returns its number, which [`WaitSet::wait`] reports.
    pub fn attach(&mut self, c: impl Into<Condition>) -> usize {
        let c = c.into();
        c.0.attach(&self.signal);
        self.conds.push(c);
        self.conds.len() - 1
    }

    /// Waits up to `timeout` until a condition holds; returns the numbers of those
    /// that hold (empty: the timeout passed). A status condition that is reported
    /// is reset (it fires again at the next change). Sleeps, unless a read
    /// condition of a latency-first member's reader is attached
    /// (`spindle_views::config::Config::latency_first`): then this thread runs that
    /// node's passes while it waits.
    pub fn wait(&self, timeout: Duration) -> Vec<usize> {
        let deadline = Instant::now() + timeout;
        let every = self.conds.iter().filter_map(|c| c.0.every()).min();
        loop {
            let gen = *lock(&self.signal.gen);
            let fired: Vec<usize> = (0..self.conds.len()).filter(|&i| self.conds[i].0.triggered()).collect();
            if !fired.is_empty() {
                for &i in &fired {
                    self.conds[i].0.fired();
                }
                return fired;
            }
            let mut left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return fired;
            }
            if let Some(e) = every {
                left = left.min(e);
            }
            // Latency first: run the node's passes until something changed.
            if let Some(g) = self.conds.iter().find_map(|c| c.0.group()) {
                let changed = || *lock(&self.signal.gen) != gen;
                if g.wait_running_passes(Instant::now() + left, changed).is_some() {
                    continue;
                }
            }
            let g = lock(&self.signal.gen);
            if *g == gen {
                self.signal.sleepers.fetch_add(1, Ordering::AcqRel);
                drop(self.signal.cond.wait_timeout(g, left).unwrap_or_else(|p| p.into_inner()));
                self.signal.sleepers.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}
