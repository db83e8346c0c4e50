//! The driver: a node's subgroups served by its one predicate thread.
//!
//! ```text
//!   application threads                         predicate thread (one per node)
//!   handle.reserve(len): CAS claim ─┐            for each subgroup, when it has work:
//!     slot.write(..)   no lock held │              lock core: absorb, receive, nulls,
//!   slot.commit(): publish entry ───┴─▶ shared     send; take what is deliverable
//!     rings the doorbell              send state   upcall(batch)  ← no lock held
//!   full window: sleep on a condvar ◀─ notify ─    lock core: finish (delivered)
//!                                                  post the pushes (after every lock)
//! ```
//!
//! Each subgroup has its own table (its own region), its own lock and its own upcall,
//! and pushes only to its members. Senders never take the core's lock: they claim
//! slots and publish messages through atomics (`core::send`), which the predicate
//! thread takes in, in order, at its next pass. A sender that finds no free slot
//! sleeps on the subgroup's condvar; it never spins on a lock. The delivery upcall
//! runs with no lock held, so senders keep building messages meanwhile: on the predicate thread by default
//! ([`Delivery::Inline`], where a slow upcall also delays the node's other subgroups),
//! or on a thread of the subgroup's own ([`Delivery::Dedicated`], where it slows only
//! its subgroup). Either way the predicate thread is the only thread that posts.

use crate::core::{Claim, SendError, Sender, SmcCore};
use crate::message::Batch;
use crate::spec::{SmcLayout, SubgroupSpec};
use crate::stats::Stats;
use spindle_sst::predicate::{Kind, PollConfig, PredicateThread};
use spindle_sst::region::ReserveError;
use spindle_sst::sync::atomic::{fence, AtomicUsize, Ordering};
use spindle_sst::sync::{lock, Arc, Condvar, Mutex};
use spindle_sst::transport::{RegionId, Transport};
use spindle_sst::Table;
use std::time::Duration;
use thiserror::Error;

/// A batched delivery upcall: called with every batch of messages in delivery order.
pub type Upcall = Box<dyn FnMut(&Batch) + Send>;

/// One subgroup to run: its spec, the region of its table, and its upcall.
pub struct SubgroupSetup {
    /// The subgroup.
    pub spec: SubgroupSpec,
    /// The transport region that holds its table (at least [`SmcLayout::table_bytes`]).
    pub region: RegionId,
    /// Called with each delivery batch.
    pub upcall: Upcall,
    /// Which thread runs the upcall.
    pub delivery: Delivery,
}

/// Which thread runs a subgroup's delivery upcall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Delivery {
    /// The node's predicate thread, with no lock held: no hand-off, the lowest latency;
    /// a slow upcall delays the node's other subgroups.
    #[default]
    Inline,
    /// A thread of the subgroup's own: a slow or blocked upcall slows only this
    /// subgroup. The predicate thread hands it each batch and stays the only thread
    /// that posts writes; the hand-off costs a wake-up when the delivery thread sleeps.
    Dedicated,
}

impl std::fmt::Debug for SubgroupSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubgroupSetup").field("spec", &self.spec).field("region", &self.region).finish()
    }
}

/// Errors starting the runtime.
#[derive(Debug, Error)]
pub enum StartError {
    /// A spec is invalid.
    #[error(transparent)]
    Spec(#[from] crate::spec::SpecError),
    /// This node is not a member of a subgroup it was given.
    #[error("this node is not a member of subgroup {0}")]
    NotMember(usize),
    /// The region is missing or too small.
    #[error("subgroup {index}: region {region:?} missing or smaller than {need} bytes")]
    Region {
        /// Subgroup index.
        index: usize,
        /// Region.
        region: RegionId,
        /// Bytes needed.
        need: usize,
    },
    /// The table could not be built.
    #[error(transparent)]
    Table(#[from] spindle_sst::table::TableError),
    /// The shared memory under this node's counters could not be reserved (see
    /// [`spindle_sst::region::Region::reserve`]): `/dev/shm` is full; make room.
    #[error("subgroup {index}: {source}")]
    Reserve {
        /// Subgroup index.
        index: usize,
        /// What the reservation met.
        source: ReserveError,
    },
    /// The predicate thread could not start.
    #[error("spawn predicate thread: {0}")]
    Spawn(std::io::Error),
}

struct Shared {
    core: Mutex<SmcCore>,
    /// Lock-free reservations (senders only).
    sender: Option<Sender>,
    /// Senders waiting for a slot sleep on `space` under this lock.
    wait: Mutex<()>,
    space: Condvar,
    waiters: AtomicUsize,
    upcall: Mutex<Upcall>,
    /// `Some` in [`Delivery::Dedicated`] mode.
    handoff: Option<Handoff>,
}

/// The batch waiting for a dedicated delivery thread, and its signals.
struct Handoff {
    batch: Mutex<Option<crate::core::Deliverable>>,
    ready: Condvar,
    /// The delivery thread advanced `delivered`; the predicate thread must push it.
    delivered_dirty: spindle_sst::sync::atomic::AtomicBool,
    stop: spindle_sst::sync::atomic::AtomicBool,
}

/// The multicast runtime of one node (see the module docs).
pub struct Runtime {
    pt: PredicateThread<()>,
    subgroups: Vec<Subgroup>,
    delivery_threads: Vec<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("subgroups", &self.subgroups.len()).finish()
    }
}

/// A handle to one subgroup of a running [`Runtime`]: send and read counters.
#[derive(Clone)]
pub struct Subgroup {
    shared: Arc<Shared>,
    transport: Arc<dyn Transport>,
}

impl std::fmt::Debug for Subgroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subgroup").field("spec", lock(&self.shared.core).spec()).finish()
    }
}

impl Runtime {
    /// Starts the predicate thread for `subgroups` over `transport`. Every subgroup
    /// must include this node.
    pub fn start(
        transport: Arc<dyn Transport>,
        subgroups: Vec<SubgroupSetup>,
        poll: PollConfig,
    ) -> Result<Runtime, StartError> {
        let me = transport.local_id();
        let mut shared = Vec::new();
        for (index, s) in subgroups.into_iter().enumerate() {
            s.spec.validate()?;
            if s.spec.member_rank(me).is_none() {
                return Err(StartError::NotMember(index));
            }
            let lay = SmcLayout::new(&s.spec);
            let need = lay.table_bytes();
            if !transport.region(s.region).is_some_and(|r| r.len() >= need) {
                return Err(StartError::Region { index, region: s.region, need });
            }
            let row = Table::create_shared(lay.table_layout().clone(), &s.spec.members, me, s.region, &*transport)?;
            // The row's counters, which every member writes, reserved now where the
            // row lies in a file (`shm`): a full /dev/shm is this error, not a SIGBUS
            // mid-run. A sender's ring and arena are reserved as its sends first
            // reach their pages (`core::send::reserve`): a quiet topic's ring costs
            // no /dev/shm.
            row.reserve(lay.counters()).map_err(|source| StartError::Reserve { index, source })?;
            let core = SmcCore::new(s.spec, row);
            shared.push(Arc::new(Shared {
                sender: core.sender(),
                core: Mutex::new(core),
                wait: Mutex::new(()),
                space: Condvar::new(),
                waiters: AtomicUsize::new(0),
                upcall: Mutex::new(s.upcall),
                handoff: (s.delivery == Delivery::Dedicated).then(|| Handoff {
                    batch: Mutex::new(None),
                    ready: Condvar::new(),
                    delivered_dirty: spindle_sst::sync::atomic::AtomicBool::new(false),
                    stop: spindle_sst::sync::atomic::AtomicBool::new(false),
                }),
            }));
        }
        let pt = PredicateThread::spawn((), transport.clone(), poll).map_err(StartError::Spawn)?;
        for sh in &shared {
            let (c, t) = (sh.clone(), sh.clone());
            pt.register(Kind::Recurrent, move |_: &()| has_work(&c), move |_, pushes| pass(&t, pushes));
        }
        let mut delivery_threads = Vec::new();
        for (i, sh) in shared.iter().enumerate().filter(|(_, sh)| sh.handoff.is_some()) {
            let (sh, t) = (sh.clone(), transport.clone());
            let h = std::thread::Builder::new()
                .name(format!("smc-deliver-{}-{i}", me.0))
                .spawn(move || deliver_loop(&sh, t.as_ref()))
                .map_err(StartError::Spawn)?;
            delivery_threads.push(h);
        }
        let subgroups = shared.into_iter().map(|shared| Subgroup { shared, transport: transport.clone() }).collect();
        Ok(Runtime { pt, subgroups, delivery_threads })
    }

    /// Handles to the subgroups, in the order given to [`Runtime::start`].
    pub fn subgroups(&self) -> &[Subgroup] {
        &self.subgroups
    }

    /// The node's predicate thread, for a layer above that adds its own predicates,
    /// timers and event handlers (the view-change engine does).
    pub fn predicates(&self) -> &PredicateThread<()> {
        &self.pt
    }

    /// The predicate thread's counters.
    pub fn poll_stats(&self) -> spindle_sst::predicate::Stats {
        self.pt.stats()
    }

    /// Stops the predicate thread and the delivery threads (also on drop); returns the
    /// predicate thread's final counters.
    pub fn stop(mut self) -> spindle_sst::predicate::Stats {
        self.shutdown();
        self.pt.stats()
    }

    fn shutdown(&mut self) {
        self.pt.stop();
        for sg in &self.subgroups {
            if let Some(h) = &sg.shared.handoff {
                h.stop.store(true, Ordering::Release);
                let _guard = lock(&h.batch);
                h.ready.notify_all();
            }
        }
        for t in self.delivery_threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A dedicated delivery thread: runs the upcall for each handed-over batch, records it
/// as delivered, and asks the predicate thread to push `delivered`.
fn deliver_loop(sh: &Shared, transport: &dyn Transport) {
    let h = sh.handoff.as_ref().expect("dedicated delivery");
    loop {
        let d = {
            let mut slot = lock(&h.batch);
            loop {
                if let Some(d) = slot.take() {
                    break d;
                }
                if h.stop.load(Ordering::Acquire) {
                    return;
                }
                slot = match h.ready.wait(slot) {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
            }
        };
        if !d.batch.is_empty() {
            (lock(&sh.upcall))(&d.batch);
        }
        // `finish` queues a push of `delivered`; the predicate thread posts it instead,
        // so it stays the only thread that posts (see the loom model
        // `two_posters_after_lock_release_are_caught`).
        lock(&sh.core).finish(d, &mut spindle_sst::Pushes::default());
        h.delivered_dirty.store(true, Ordering::Release);
        transport.doorbell().ring();
        wake_waiters(sh);
    }
}

/// Wakes senders sleeping for a slot if one is free now (after something that may
/// have freed one), then yields the core to them.
///
/// The yield matters when threads outnumber cores: a predicate thread that has just
/// freed the window otherwise keeps polling on its core while the woken sender waits
/// for the scheduler to preempt someone, and the window stays full meanwhile. On this
/// 2-core machine it measured 1.5x more messages at 128 B (see the README); where the
/// sender has a core of its own the yield returns at once.
fn wake_waiters(sh: &Shared) {
    // Pairs with the fence in `Subgroup::reserve_waiting`: either the waiter sees what
    // freed the slot when it looks again, or this sees the waiter.
    fence(Ordering::SeqCst);
    if sh.waiters.load(Ordering::Relaxed) > 0 && sh.sender.as_ref().is_some_and(Sender::can_reserve) {
        {
            let _g = lock(&sh.wait);
            sh.space.notify_all();
        }
        std::thread::yield_now();
    }
}

/// The predicate: is there anything for this subgroup's pass to do?
fn has_work(sh: &Shared) -> bool {
    match sh.core.try_lock() {
        Ok(core) => {
            core.has_work()
                || (sh.waiters.load(Ordering::Acquire) > 0 && core.can_reserve())
                || sh.handoff.as_ref().is_some_and(|h| h.delivered_dirty.load(Ordering::Acquire))
        }
        // An application thread holds the lock for a moment: look again next pass.
        Err(_) => true,
    }
}

/// One pass for one subgroup; the upcall runs with no lock held.
fn pass(sh: &Shared, pushes: &mut spindle_sst::predicate::Pushes) {
    let mut core = lock(&sh.core);
    core.poll(pushes);
    if let Some(h) = &sh.handoff {
        if h.delivered_dirty.swap(false, Ordering::AcqRel) {
            pushes.push(core.delivered_push());
        }
        // At most one batch is out at a time (`take_deliverable` returns None until
        // it is finished), so the hand-off slot is always free here.
        if let Some(d) = core.take_deliverable() {
            drop(core);
            *lock(&h.batch) = Some(d);
            h.ready.notify_one();
        }
        wake_waiters(sh);
        return;
    }
    let ready = core.take_deliverable();
    drop(core);
    if let Some(d) = ready {
        if !d.batch.is_empty() {
            (lock(&sh.upcall))(&d.batch);
        }
        lock(&sh.core).finish(d, pushes);
    }
    wake_waiters(sh);
}

/// A reserved slot being built in place; [`SendSlot::commit`] sends it.
#[derive(Debug)]
#[must_use = "an uncommitted slot blocks further sends; commit or drop it"]
pub struct SendSlot<'a> {
    /// The subgroup's sender handle: the state the claim was made on.
    sender: &'a Sender,
    transport: &'a dyn Transport,
    claim: Option<Claim>,
}

impl SendSlot<'_> {
    /// The message's index among this sender's messages.
    pub fn index(&self) -> u64 {
        self.claim.as_ref().map_or(0, Claim::index)
    }
    /// Writes `data` at byte `at` (a multiple of 8) of the payload, in place.
    pub fn write(&mut self, at: usize, data: &[u8]) {
        self.claim.as_ref().expect("live slot").write(self.sender.state(), at, data)
    }
    /// Stores payload word `i`, in place.
    #[inline]
    pub fn write_word(&mut self, i: usize, value: u64) {
        self.claim.as_ref().expect("live slot").write_word(self.sender.state(), i, value)
    }
    /// Stores payload words `i..i + values.len()`, in place (one bounds check).
    #[inline]
    pub fn write_words(&mut self, i: usize, values: &[u64]) {
        self.claim.as_ref().expect("live slot").write_words(self.sender.state(), i, values)
    }
    /// Sends the message; returns its index. Takes no lock: the slot is published
    /// through an atomic that the predicate thread picks up on its next pass.
    #[inline]
    pub fn commit(mut self) -> u64 {
        let index = self.claim.take().expect("live slot").publish(self.sender.state());
        // The sender's own node's doorbell, in this process: no fence per message.
        self.transport.doorbell().ring_local();
        index
    }
}

impl Drop for SendSlot<'_> {
    /// An uncommitted slot goes out as a null (its index is skipped), without a lock.
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take() {
            claim.abandon(self.sender.state());
            self.transport.doorbell().ring();
        }
    }
}

impl Subgroup {
    /// Reserves a slot for a `len`-byte message, sleeping while the window is full
    /// (and yielding for the moment the predicate thread inserts nulls). Takes no lock
    /// unless it has to sleep. Errors only for what waiting cannot fix.
    pub fn reserve(&self, len: usize) -> Result<SendSlot<'_>, SendError> {
        let sender = self.shared.sender.as_ref().ok_or(SendError::NotSender)?;
        let backoff = crossbeam_utils::Backoff::new();
        loop {
            match sender.claim(len) {
                Ok(claim) => return Ok(self.slot(sender, claim)),
                Err(SendError::Busy) if !backoff.is_completed() => backoff.snooze(),
                Err(SendError::Full | SendError::Busy) => return self.reserve_waiting(sender, len),
                Err(e) => return Err(e),
            }
        }
    }

    /// The slow path of [`Subgroup::reserve`]: sleep on the condvar until a slot frees.
    fn reserve_waiting<'a>(&'a self, sender: &'a Sender, len: usize) -> Result<SendSlot<'a>, SendError> {
        let mut guard = lock(&self.shared.wait);
        self.shared.waiters.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let out = loop {
            match sender.claim(len) {
                Ok(claim) => break Ok(self.slot(sender, claim)),
                Err(SendError::Full | SendError::Busy) => {
                    // Make sure the predicate thread looks at this subgroup again.
                    self.transport.doorbell().ring();
                    // The timeout is a safety net; the predicate thread notifies.
                    guard = match self.shared.space.wait_timeout(guard, Duration::from_millis(50)) {
                        Ok((g, _)) => g,
                        Err(p) => p.into_inner().0,
                    };
                }
                Err(e) => break Err(e),
            }
        };
        self.shared.waiters.fetch_sub(1, Ordering::Relaxed);
        out
    }

    /// Sleeps until a reservation could succeed (a slot, and arena room for the large
    /// message that last found none), the subgroup is woken (a wedge), or `timeout`
    /// passes. For a caller that must not hold its own locks while it waits: it calls
    /// [`Subgroup::try_reserve`] again afterwards.
    pub fn wait_for_room(&self, timeout: Duration) {
        let Some(sender) = self.shared.sender.as_ref() else { return };
        let guard = lock(&self.shared.wait);
        self.shared.waiters.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `wake_waiters`, as in `reserve_waiting`.
        fence(Ordering::SeqCst);
        if !sender.can_reserve() {
            self.transport.doorbell().ring();
            drop(self.shared.space.wait_timeout(guard, timeout));
        }
        self.shared.waiters.fetch_sub(1, Ordering::Relaxed);
    }

    /// Like [`Subgroup::reserve`] but never waits.
    pub fn try_reserve(&self, len: usize) -> Result<SendSlot<'_>, SendError> {
        let sender = self.shared.sender.as_ref().ok_or(SendError::NotSender)?;
        Ok(self.slot(sender, sender.claim(len)?))
    }

    #[inline]
    fn slot<'a>(&'a self, sender: &'a Sender, claim: Claim) -> SendSlot<'a> {
        SendSlot { sender, transport: &*self.transport, claim: Some(claim) }
    }

    /// Sends a copy of `data` (reserve, write, commit); returns its index.
    pub fn send(&self, data: &[u8]) -> Result<u64, SendError> {
        let mut slot = self.reserve(data.len())?;
        slot.write(0, data);
        Ok(slot.commit())
    }

    /// This node's counters for the subgroup.
    pub fn stats(&self) -> Stats {
        lock(&self.shared.core).stats().clone()
    }

    /// Runs `f` on the subgroup's core under its lock (for the view-change engine:
    /// wedge, received counts, the trim).
    pub fn with_core<R>(&self, f: impl FnOnce(&mut SmcCore) -> R) -> R {
        f(&mut lock(&self.shared.core))
    }

    /// Hands a batch taken from the core outside the normal pass (the trimmed one of a
    /// view change) to the upcall, with no lock held, then finishes it.
    pub fn deliver(&self, d: crate::core::Deliverable, pushes: &mut spindle_sst::Pushes) {
        if !d.batch.is_empty() {
            (lock(&self.shared.upcall))(&d.batch);
        }
        lock(&self.shared.core).finish(d, pushes);
        wake_waiters(&self.shared);
    }

    /// Wakes senders waiting for a slot (after a wedge they find the subgroup wedged).
    pub fn wake_senders(&self) {
        let _guard = lock(&self.shared.wait);
        self.shared.space.notify_all();
    }

    /// Packs this node's small messages (see [`crate::core::Sender::set_packing`]):
    /// messages committed while the predicate thread is busy share one entry and
    /// one index. No effect where this node does not send.
    pub fn set_packing(&self, on: bool) {
        if let Some(s) = &self.shared.sender {
            s.set_packing(on);
        }
    }

    /// The subgroup's spec.
    pub fn spec(&self) -> SubgroupSpec {
        lock(&self.shared.core).spec().clone()
    }
}
