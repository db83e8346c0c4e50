//! The fallback receiver: one thread per transport that receives while no driver is
//! attached (the transport used on its own, as in tests and benchmarks of the
//! transport alone), and stands in while the attached driver makes no pass for
//! [`WATCH`] (a trigger or upcall that runs long). While the driver passes, this
//! thread only looks at its progress every [`WATCH`]; while the driver is parked on the
//! sockets (woken by arrivals itself), every [`PARKED_WATCH`]. It is never woken by
//! the kernel for the driver's traffic.

use super::Shared;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sys::{wait_readable, WakeFd};
use std::time::Duration;

/// How long the driver may go without a pass before this thread receives for it.
pub(super) const WATCH: Duration = Duration::from_millis(10);

/// How often this thread looks while the driver is parked: a driver that wakes and
/// at once stalls is stood in for within `PARKED_WATCH + WATCH`.
pub(super) const PARKED_WATCH: Duration = Duration::from_millis(100);

/// Longest sleep while this thread is the receiver (a safety net: its wake fd and the
/// sockets wake it sooner).
const MAX_SLEEP: Duration = Duration::from_millis(200);

/// The driver's state, as the fallback thread sees it.
#[derive(Debug)]
pub(super) struct Driving {
    /// Attached drivers (normally 0 or 1).
    attached: AtomicU64,
    /// Passes of the driver (bumped by each `poll_receive`).
    progress: AtomicU64,
    /// The driver sleeps in `park`, on the sockets: arrivals wake it.
    parked: AtomicBool,
    stop: AtomicBool,
    /// Wakes this thread for a change of the above.
    ctl: WakeFd,
}

impl Driving {
    pub(super) fn new() -> std::io::Result<Driving> {
        Ok(Driving {
            attached: AtomicU64::new(0),
            progress: AtomicU64::new(0),
            parked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            ctl: WakeFd::new()?,
        })
    }

    /// A driver comes (`true`) or goes (`false`).
    pub(super) fn attach(&self, on: bool) {
        if on {
            self.attached.fetch_add(1, Ordering::SeqCst);
        } else {
            let _ = self.attached.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
        self.ctl.notify();
    }

    /// The driver made a pass.
    #[inline]
    pub(super) fn passed(&self) {
        self.progress.fetch_add(1, Ordering::Relaxed);
    }

    /// The driver goes to sleep on the sockets (`true`) or wakes (`false`).
    #[inline]
    pub(super) fn parked(&self, on: bool) {
        self.parked.store(on, Ordering::Release);
        if !on {
            self.passed();
        }
    }

    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.ctl.notify();
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    pub(super) fn driven(&self) -> bool {
        self.attached.load(Ordering::SeqCst) > 0
    }
}

/// The fallback thread's loop (see the module docs).
pub(super) fn run(sh: &Shared) {
    let d = &sh.driving;
    let mut seen = d.progress.load(Ordering::Relaxed);
    while !d.stopped() {
        if !d.driven() {
            receive_all(sh);
            wait_readable(&sh.wait_fds(d.ctl.raw()), Some(MAX_SLEEP));
            d.ctl.drain();
            continue;
        }
        // A parked driver is woken by arrivals itself: look again only every
        // PARKED_WATCH then (an idle node's fallback thread ticks 10 times a second,
        // and the driver's wake-up is not slowed by waking this thread too).
        let parked = d.parked.load(Ordering::Acquire);
        wait_readable(&[d.ctl.raw()], Some(if parked { PARKED_WATCH } else { WATCH }));
        d.ctl.drain();
        let now = d.progress.load(Ordering::Relaxed);
        if now != seen || d.parked.load(Ordering::Acquire) {
            seen = now;
            continue;
        }
        // No pass for a whole WATCH: receive for the driver until it passes again.
        tracing::debug!(node = %sh.me, "tcp: the driver is busy elsewhere; receiving for it");
        while !d.stopped() && d.driven() && d.progress.load(Ordering::Relaxed) == seen {
            receive_all(sh);
            wait_readable(&sh.wait_fds(d.ctl.raw()), Some(Duration::from_millis(1)));
            d.ctl.drain();
        }
        seen = d.progress.load(Ordering::Relaxed);
    }
}

fn receive_all(sh: &Shared) {
    for p in &sh.peers {
        sh.receive(p, false);
    }
}
