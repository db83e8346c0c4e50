//! The doorbell: how a sleeping predicate thread learns that there is work.
//!
//! One thread waits on a doorbell (the node's predicate thread); anyone may ring it: a
//! peer whose one-sided write just landed (for `shm` the peer process itself, through
//! the futex word in our mapped header), the tcp receiver after applying frames, or an
//! application thread that queued a send.
//!
//! The word holds `epoch << 1 | sleeping`. The protocol, which the loom model
//! `doorbell_no_lost_wakeup` checks:
//!
//! ```text
//!   waiter                                   ringer
//!   t = prepare()      (set sleeping bit,    publish work (Release stores)
//!                       read epoch)          old = word; word = next epoch, bit clear
//!   look for work; if any: cancel()          if old has sleeping bit: futex_wake
//!   else wait(t)       (sleeps only while
//!                       the word still == t)
//! ```
//!
//! The ring that finds the bit set clears it as it moves the epoch on, so of the
//! rings that come before the waiter runs again only that one makes a system call
//! (a busy peer rings on every pass, far more often than a woken thread gets a
//! core). This is why there is one waiter: a second one asleep would lose its bit.
//!
//! Ringing is cheap when the waiter is awake: the ringer issues a `SeqCst` fence and
//! reads the word, and only if the sleeping bit is set does it advance the epoch (and
//! then `futex_wake`). `prepare` sets the bit and issues a `SeqCst` fence before the
//! waiter looks for work. Of the two fences one comes first in the single total order:
//! if the ringer's, the waiter's work check sees the work published before it; if the
//! waiter's, the ringer sees the bit and advances the epoch, so `wait` returns at once
//! (Dekker's argument, checked by the loom model). A ringer that finds the waiter awake
//! writes nothing, so a busy thread's doorbell line is not bounced between cores on
//! every ring. Looking for work *before* `prepare` loses wake-ups (the buggy variant
//! the model catches).
//!
//! # Rings from this process: the waiter fences for them
//!
//! An application thread rings its own node's doorbell after every send it
//! commits, so the ringer's fence is paid per message: it waits until the
//! message's stores have left the core's store buffer, which a profile of the
//! shm sender put at two fifths of its send loop. [`Doorbell::ring_local`], for
//! ringers in the waiter's own process, issues no fence; `prepare` then calls
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` after its own fence, which makes
//! every running thread of the process pass a full barrier before it returns (a
//! thread not running has passed one in its context switch). Dekker's argument
//! holds with the ringer's fence moved into that call: a ringer that read the word
//! before its barrier had made its work visible by then, so the waiter's work
//! check sees it; one that read the word after its barrier sees the sleeping bit.
//! The ringer keeps program order with a compiler fence. The waiter pays a system
//! call per `prepare` (it prepares only after its spin budget found no work); the
//! ringer pays nothing. Where the kernel does not offer the call (the process
//! could not register), `ring_local` is `ring`. Rings from other processes (a
//! peer's write landing on shm) always fence. The loom model checks the fenced
//! protocol; it cannot model `membarrier`.

use crate::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::Duration;

const SLEEPING: u32 = 1;
const EPOCH: u32 = 2;

/// Whether this process registered for `membarrier` (once, at the first look):
/// then local rings leave their fence to the waiter's barrier.
#[cfg(not(loom))]
static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

#[cfg(not(loom))]
#[inline]
fn asymmetric() -> bool {
    *REGISTERED.get_or_init(crate::sys::membarrier_register)
}

/// A wake-up word for one waiter and any number of ringers (see the module docs).
pub struct Doorbell {
    /// Keeps the memory behind `word` alive.
    #[cfg(not(loom))]
    _seg: crate::sync::Arc<crate::region::Segment>,
    /// The futex word, checked once when the doorbell was made.
    #[cfg(not(loom))]
    word: std::ptr::NonNull<AtomicU32>,
    /// Also notified when a ring finds the waiter asleep, for a waiter that sleeps in
    /// `ppoll` on sockets and this descriptor instead of on the futex (`tcp`).
    #[cfg(not(loom))]
    wake: Option<crate::sys::WakeFd>,
    #[cfg(loom)]
    word: AtomicU32,
    #[cfg(loom)]
    futex: crate::sync::Mutex<()>,
    #[cfg(loom)]
    cv: crate::sync::Condvar,
}

// SAFETY: `word` points into the segment `_seg` keeps alive, accessed only atomically.
#[cfg(not(loom))]
unsafe impl Send for Doorbell {}
// SAFETY: as above.
#[cfg(not(loom))]
unsafe impl Sync for Doorbell {}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Doorbell").field("word", &self.word().load(Ordering::Relaxed)).finish()
    }
}

/// Proof that [`Doorbell::prepare`] ran; spend it with [`Doorbell::wait`] or
/// [`Doorbell::cancel`].
#[derive(Debug)]
#[must_use = "a prepared doorbell must be waited on or cancelled"]
pub struct Ticket(u32);

impl Default for Doorbell {
    fn default() -> Self {
        Self::new()
    }
}

impl Doorbell {
    /// A doorbell in private memory (for waiters rung only by threads of this process).
    pub fn new() -> Doorbell {
        #[cfg(not(loom))]
        {
            Doorbell::in_segment(crate::sync::Arc::new(crate::region::Segment::heap(64)), 0)
        }
        #[cfg(loom)]
        {
            Doorbell { word: AtomicU32::new(0), futex: crate::sync::Mutex::new(()), cv: crate::sync::Condvar::new() }
        }
    }

    /// A doorbell whose word lives at `off` in `seg` (a mapped header that other
    /// processes ring directly).
    #[cfg(not(loom))]
    pub(crate) fn in_segment(seg: crate::sync::Arc<crate::region::Segment>, off: usize) -> Doorbell {
        let word = std::ptr::NonNull::from(seg.u32_at(off)); // bounds and alignment checked here
        Doorbell { _seg: seg, word, wake: None }
    }

    /// A private doorbell whose waiter sleeps on a descriptor (with others, in
    /// `ppoll`) instead of the futex: a ring that finds it asleep also notifies
    /// [`Doorbell::wake_fd`]. The waiter pairs [`Doorbell::pending`] and
    /// [`Doorbell::finish`] around its own wait.
    #[cfg(not(loom))]
    pub fn with_wake_fd() -> std::io::Result<Doorbell> {
        let mut d = Doorbell::new();
        d.wake = Some(crate::sys::WakeFd::new()?);
        Ok(d)
    }

    /// The descriptor a ring notifies, for a doorbell made by [`Doorbell::with_wake_fd`].
    #[cfg(not(loom))]
    pub fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        self.wake.as_ref().map(|w| w.raw())
    }

    #[inline]
    fn word(&self) -> &AtomicU32 {
        #[cfg(not(loom))]
        {
            // SAFETY: `word` was validated by `Segment::u32_at` and `_seg` keeps its
            // memory alive as long as `self`; the word is only accessed atomically.
            unsafe { self.word.as_ref() }
        }
        #[cfg(loom)]
        {
            &self.word
        }
    }

    /// Wakes the waiter if it sleeps or is about to. Call after publishing the work.
    #[inline]
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        self.ring_fenced();
    }

    /// [`Doorbell::ring`] for a ringer in the waiter's own process: no fence of its
    /// own, the waiter's `membarrier` stands for it (see the module docs). Where
    /// that is not available, the same as `ring`.
    #[inline]
    pub fn ring_local(&self) {
        #[cfg(not(loom))]
        if asymmetric() {
            // Program order only: the stores that published the work stay before
            // the load below; the waiter's barrier orders them for the core.
            crate::sync::atomic::compiler_fence(Ordering::SeqCst);
            return self.ring_fenced();
        }
        self.ring();
    }

    /// The ring after its fence: wakes the waiter if the word says it sleeps.
    #[inline]
    fn ring_fenced(&self) {
        if self.word().load(Ordering::Relaxed) & SLEEPING == 0 {
            return;
        }
        // A new epoch with the sleeping bit cleared: the ringer that clears it wakes
        // the waiter, and rings after it (until the waiter prepares again) find the
        // bit clear and make no system call. (With the bit left set, every ring
        // between the first and the waiter running again made one: dozens per
        // wake-up on a busy node.)
        let old = self.advance();
        if old & SLEEPING != 0 {
            #[cfg(not(loom))]
            if let Some(w) = &self.wake {
                w.notify();
                return;
            }
            self.futex_wake();
        }
    }

    /// Moves the word to the next epoch with the sleeping bit cleared; returns the
    /// word before.
    #[inline]
    fn advance(&self) -> u32 {
        let mut old = self.word().load(Ordering::Relaxed);
        loop {
            let new = old.wrapping_add(EPOCH) & !SLEEPING;
            match self.word().compare_exchange_weak(old, new, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => return old,
                Err(now) => old = now,
            }
        }
    }

    /// `ring` without its fence: a deliberately broken variant for the loom model that
    /// shows the fence is needed (compiled under `--cfg loom` only).
    #[cfg(loom)]
    pub fn ring_without_fence(&self) {
        if self.word().load(Ordering::Relaxed) & SLEEPING == 0 {
            return;
        }
        let old = self.advance();
        if old & SLEEPING != 0 {
            self.futex_wake();
        }
    }

    /// Announces that the waiter may sleep. Look for work after this, then `wait`.
    #[inline]
    pub fn prepare(&self) -> Ticket {
        let t = self.word().fetch_or(SLEEPING, Ordering::SeqCst) | SLEEPING;
        fence(Ordering::SeqCst);
        #[cfg(not(loom))]
        if asymmetric() && !crate::sys::membarrier() {
            // Registered, yet the barrier failed (the kernel documents no such
            // case): a local ring may have skipped its fence, so this waiter must
            // not sleep on it. Move the epoch on, so that `wait` returns at once
            // (a waiter that can never sleep spins; it loses no wake-up).
            self.advance();
        }
        Ticket(t)
    }

    /// Withdraws a `prepare` (work was found after all).
    #[inline]
    pub fn cancel(&self, _ticket: Ticket) {
        self.word().fetch_and(!SLEEPING, Ordering::Relaxed);
    }

    /// Sleeps until a ring after `prepare`, or `timeout`. Returns at once if a ring
    /// already came. Spurious returns are possible; callers re-check for work.
    pub fn wait(&self, ticket: Ticket, timeout: Option<Duration>) {
        if self.pending(&ticket) {
            // A ring that finds a doorbell with a wake descriptor asleep notifies
            // only the descriptor: any waiter of such a doorbell sleeps on it (an
            // application thread waiting on the tcp transport's doorbell had slept
            // on the futex, which nobody woke, until its timeout).
            #[cfg(not(loom))]
            if let Some(w) = &self.wake {
                crate::sys::wait_readable(&[w.raw()], timeout);
                return self.finish(ticket);
            }
            self.futex_wait(ticket.0, timeout);
        }
        self.finish(ticket);
    }

    /// True while no ring came since `prepare` gave `ticket`: a waiter that sleeps
    /// elsewhere (on [`Doorbell::wake_fd`]) checks this before it sleeps.
    #[inline]
    pub fn pending(&self, ticket: &Ticket) -> bool {
        self.word().load(Ordering::SeqCst) == ticket.0
    }

    /// Ends a wait (done here or elsewhere, on [`Doorbell::wake_fd`]): resets the wake
    /// descriptor and withdraws the sleeping bit. A ring racing with this may leave the
    /// descriptor readable: the next wait then returns at once (spurious, harmless).
    pub fn finish(&self, ticket: Ticket) {
        #[cfg(not(loom))]
        if let Some(w) = &self.wake {
            w.drain();
        }
        self.cancel(ticket);
    }

    /// How many rings found the waiter asleep or about to sleep (wraps); rings while it
    /// was awake leave no trace. For statistics and tests.
    pub fn rings(&self) -> u32 {
        self.word().load(Ordering::Relaxed) >> 1
    }

    #[cfg(not(loom))]
    fn futex_wait(&self, expected: u32, timeout: Option<Duration>) {
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        });
        let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: FUTEX_WAIT reads the 4-byte aligned word (alive for the call, as
        // `self` borrows the segment) and the optional timespec on our stack. The
        // shared (non-private) futex is keyed by the physical page, so it also works
        // when the word is rung by another process through its own mapping.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word() as *const AtomicU32,
                libc::FUTEX_WAIT,
                expected,
                ts_ptr,
                std::ptr::null::<u32>(),
                0u32,
            );
        }
    }

    #[cfg(not(loom))]
    fn futex_wake(&self) {
        // SAFETY: FUTEX_WAKE only uses the word's address as a key; it does not access
        // memory beyond checking the mapping.
        unsafe {
            libc::syscall(libc::SYS_futex, self.word() as *const AtomicU32, libc::FUTEX_WAKE, i32::MAX);
        }
    }

    // Under loom the futex is a mutex and condvar: `wait` checks the word under the
    // lock and `wake` notifies under it, which is exactly FUTEX_WAIT's atomicity.
    #[cfg(loom)]
    fn futex_wait(&self, expected: u32, _timeout: Option<Duration>) {
        let g = crate::sync::lock(&self.futex);
        if self.word.load(Ordering::SeqCst) == expected {
            drop(self.cv.wait(g));
        }
    }

    #[cfg(loom)]
    fn futex_wake(&self) {
        let _g = crate::sync::lock(&self.futex);
        self.cv.notify_all();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::{thread, Arc};
    use std::time::Instant;

    #[test]
    fn ring_before_wait_returns_immediately() {
        let d = Doorbell::new();
        let t = d.prepare();
        d.ring();
        let start = Instant::now();
        // A wait that timed out would take the whole minute; a loaded machine
        // never delays an immediate return by half of it.
        d.wait(t, Some(Duration::from_secs(60)));
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn ring_from_other_thread_wakes_sleeper() {
        let d = Arc::new(Doorbell::new());
        let d2 = d.clone();
        let t = d.prepare();
        let h = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            d2.ring();
        });
        d.wait(t, Some(Duration::from_secs(10)));
        h.join().unwrap();
        assert!(d.rings() >= 1);
    }

    #[test]
    fn a_ring_wakes_a_waiter_of_a_doorbell_with_a_wake_fd() {
        // The waiter sleeps without a timeout: only the ring can end its wait.
        let d = Arc::new(Doorbell::with_wake_fd().unwrap());
        let (d2, (tx, rx)) = (d.clone(), std::sync::mpsc::channel());
        let t = d.prepare();
        let h = thread::spawn(move || {
            d2.wait(t, None);
            tx.send(()).unwrap();
        });
        thread::sleep(Duration::from_millis(20));
        d.ring();
        rx.recv_timeout(Duration::from_secs(10)).expect("the ring woke the waiter");
        h.join().unwrap();
    }

    /// Work handed over one item at a time, the ringer using `ring_local` (no
    /// fence: the waiter's `membarrier` stands for it where the kernel has it): the
    /// waiter looks for the item after `prepare` and sleeps without a timeout if
    /// it finds none, so a lost wake-up stalls the hand-over and the deadline
    /// fails the test. Each item waits until the last was taken, so the waiter
    /// often finds nothing and sleeps while the ringer publishes.
    #[test]
    fn local_rings_lose_no_wake_up() {
        use crate::sync::atomic::AtomicU64;
        const ITEMS: u64 = 20_000;
        let d = Arc::new(Doorbell::new());
        let (published, taken) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (d2, p2, t2) = (d.clone(), published.clone(), taken.clone());
        let waiter = thread::spawn(move || {
            let mut got = 0;
            while got < ITEMS {
                let t = d2.prepare();
                let now = p2.load(Ordering::Acquire);
                if now > got {
                    d2.cancel(t);
                    got = now;
                    t2.store(got, Ordering::Release);
                } else {
                    d2.wait(t, None);
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        for i in 1..=ITEMS {
            while taken.load(Ordering::Acquire) < i - 1 {
                assert!(Instant::now() < deadline, "item {} was not taken: a wake-up was lost", i - 1);
                std::hint::spin_loop();
            }
            published.store(i, Ordering::Release);
            d.ring_local();
        }
        while !waiter.is_finished() {
            assert!(Instant::now() < deadline, "the last item was not taken: a wake-up was lost");
            thread::sleep(Duration::from_millis(1));
        }
        waiter.join().unwrap();
    }

    #[test]
    fn wait_honours_timeout() {
        let d = Doorbell::new();
        let t = d.prepare();
        let start = Instant::now();
        d.wait(t, Some(Duration::from_millis(30)));
        assert!(start.elapsed() >= Duration::from_millis(25));
    }
}
