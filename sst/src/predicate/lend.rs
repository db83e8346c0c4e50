//! Lending the passes: an application thread that waits for something the passes
//! bring (a delivery) runs them itself while it waits, and the predicate thread
//! steps aside.
//!
//! On a host with fewer cores than busy threads the hand-off is what a round trip
//! pays for: the predicate thread delivers, wakes the sleeping application thread,
//! and the two then share a core with the peer's. A borrower takes the node's
//! working set (its predicates, timers, pushes) for the time of its wait, so one
//! thread per node spins instead of two, and the delivery it waits for lands on the
//! thread that waits.
//!
//! ```text
//!   borrower: lend = true ─ ring ─ lock working set ─ pass until done or deadline
//!             (spin, then park on the doorbell as the thread would) ─ last_end = now
//!             ─ lend = false ─ unlock
//!   thread:   sees lend ─ unlock ─ look every lend_linger; once no borrower has
//!             held it for lend_linger ─ lock ─ run the passes again
//! ```
//!
//! One borrower at a time: a second waiter, and a trigger that would wait (on the
//! predicate thread or inside a borrower's pass), is told [`Lent::Unavailable`]
//! and waits its usual way. Triggers run on the borrower's thread, so the caller must hold no
//! lock a trigger takes (a waiting reader holds none). After
//! [`super::PredicateThread::stop`] no borrower runs a pass.

use super::{Inner, CLOCK_EVERY};
use crate::sync::atomic::Ordering;
use crate::sync::{lock, Arc};
use std::time::{Duration, Instant};

/// Passes after which a borrower publishes the counters.
const STATS_EVERY: u64 = 4096;

/// The longest a borrower spins idle before it parks on the doorbell.
const BORROW_SPIN: Duration = Duration::from_millis(1);

/// How a borrowed wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lent {
    /// The condition held.
    Done,
    /// The deadline passed first.
    TimedOut,
    /// The passes could not be borrowed: another thread has them, or the predicate
    /// thread stopped. Wait the usual way instead.
    Unavailable,
}

/// Runs a node's passes on the calling thread while it waits (see the module docs).
/// Cheap to clone; holds the predicate thread's shared state, not the thread.
pub struct Lender<S> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for Lender<S> {
    fn clone(&self) -> Self {
        Lender { inner: self.inner.clone() }
    }
}

impl<S> std::fmt::Debug for Lender<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lender").finish_non_exhaustive()
    }
}

impl<S> Lender<S> {
    pub(super) fn new(inner: Arc<Inner<S>>) -> Self {
        Lender { inner }
    }

    /// Runs the node's passes on this thread until `done` returns true (looked at
    /// before the first pass and after every pass) or `deadline` passes. Spins while
    /// there is work and for a while after, then parks on the node's doorbell as the
    /// predicate thread would.
    ///
    /// `done` and the triggers run on this thread: hold no lock a trigger may take.
    pub fn run_until(&self, deadline: Instant, mut done: impl FnMut() -> bool) -> Lent {
        let inner = &*self.inner;
        // A trigger that waits (on the predicate thread, or on a borrower's thread,
        // where `lend` is set) cannot take the working set its own pass holds.
        if inner.stop.load(Ordering::Acquire)
            || inner.thread.get() == Some(&std::thread::current().id())
            || inner.lend.swap(true, Ordering::AcqRel)
        {
            return Lent::Unavailable;
        }
        // A parked thread holds the working set: the ring makes it see `lend`.
        inner.transport.doorbell().ring();
        let mut w = lock(&inner.worker);
        let cfg = &inner.cfg;
        let bell = inner.transport.doorbell();
        // The long spin is for the gap between a wait's work and the answer it
        // waits for; after a park that found nothing, the thread's own budget.
        let mut spin = cfg.spin.max(BORROW_SPIN);
        let mut now = Instant::now();
        let (mut idle_since, mut yielded, mut tick) = (None::<Instant>, now, 0u32);
        // This wait slept on the doorbell: the thread aside may be in a long sleep.
        let mut parked = false;
        let outcome = loop {
            if inner.stop.load(Ordering::Acquire) {
                break Lent::Unavailable;
            }
            if done() {
                break Lent::Done;
            }
            tick = tick.wrapping_add(1);
            if tick % CLOCK_EVERY == 0 {
                now = Instant::now();
                if now >= deadline {
                    break Lent::TimedOut;
                }
                w.probe(inner, now, cfg.probe_every);
            }
            if w.pass(inner, now, false) {
                idle_since = None;
                spin = cfg.spin.max(BORROW_SPIN);
                now = Instant::now();
                continue;
            }
            if tick % CLOCK_EVERY != 0 {
                crate::sync::spin_loop();
                continue;
            }
            let since = *idle_since.get_or_insert(now);
            if now.duration_since(since) < spin {
                super::spin_or_yield(cfg, now, since, &mut yielded, &mut w.local.yields);
                continue;
            }
            let ticket = bell.prepare();
            if inner.stop.load(Ordering::Acquire) || w.pass(inner, Instant::now(), true) || done() {
                bell.cancel(ticket);
                idle_since = None;
                continue;
            }
            let wake_by = w.next_due().unwrap_or(w.next_probe()).min(now + cfg.max_park).min(deadline);
            w.local.parks += 1;
            let now2 = Instant::now();
            if wake_by > now2 {
                inner.borrower_parked.store(true, Ordering::Relaxed);
                parked = true;
                inner.transport.park(ticket, Some(wake_by - now2));
                inner.borrower_parked.store(false, Ordering::Relaxed);
            } else {
                bell.cancel(ticket);
            }
            now = Instant::now();
            idle_since = None;
            spin = cfg.spin;
            tick = 0;
        };
        // The counters go out now and then, not on every wait (`stats` promises them
        // every few thousand passes and at every park).
        if w.local.passes >= STATS_EVERY || w.local.parks > 0 || outcome != Lent::Done {
            w.publish(&inner.stats);
        }
        // `now` was read at most a few passes ago: close enough for the linger.
        inner.last_end.store(now.saturating_duration_since(inner.origin).as_nanos() as u64, Ordering::Relaxed);
        inner.lend.store(false, Ordering::Release);
        drop(w);
        if parked {
            // A wait that slept was long: one system call to end the thread's sleep.
            drop(lock(&inner.lent));
            inner.lent_cv.notify_all();
        }
        outcome
    }
}

/// The predicate thread's side: it has released the working set. It looks every
/// `lend_linger` whether a borrower still has it (every `max_park` while the
/// borrower itself sleeps on the doorbell), and takes it back at the first look
/// that finds no borrower for at least `lend_linger`. A borrower that did not sleep
/// never wakes it (a round trip pays no system call for the hand-back); one that
/// slept does, once, as its wait ends.
pub(super) fn step_aside<S>(inner: &Inner<S>) {
    let linger = inner.cfg.lend_linger.max(Duration::from_micros(100));
    let mut g = lock(&inner.lent);
    while !inner.stop.load(Ordering::Acquire) {
        // A borrower asleep on the doorbell wakes this thread when its wait ends.
        let look = if inner.borrower_parked.load(Ordering::Relaxed) { inner.cfg.max_park } else { linger };
        g = inner.lent_cv.wait_timeout(g, look).unwrap_or_else(|p| p.into_inner()).0;
        let since = inner.origin.elapsed().saturating_sub(Duration::from_nanos(inner.last_end.load(Ordering::Relaxed)));
        if !inner.lend.load(Ordering::Acquire) && since >= linger {
            return;
        }
    }
}
