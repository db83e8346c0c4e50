//! One copy per push where peers map each other's memory (`mem`, `shm`).
//!
//! On those transports a push does not copy this node's row into every peer's memory.
//! Each table region has one spare row past the members' rows, the **publication
//! row**. A push copies the pushed range of the owner's working row into its own
//! publication row, once, whatever the group size; every peer reads that row in
//! place, through a [`PeerView`] of the owner's memory. The sender writes each byte
//! once and each receiver reads it once, which is the physical limit on one host.
//!
//! ```text
//!   node A's region                         node B reads row A from A's region
//!   ┌──────────────┐
//!   │ row 0 (A)    │ working row: A's writes land here first
//!   │ row 1        │ unused by A while B is connected; B's frozen row if cut off
//!   │ publication  │ ◀─ a push: one copy of the range (seqlock around it)
//!   └──────────────┘
//! ```
//!
//! Areas declared with [`crate::LayoutBuilder::bytes_in_place`] (smc's slot ring) are
//! not even copied once: peers read them from the owner's *working* row, and only the
//! counter that publishes them is pushed. The owner's `Release` (its publication fence,
//! after the writer thread's own `Release` mark was acquired) orders the area before
//! the counter, and the area is not rewritten until every reader is done with it.
//!
//! The transport contract holds unchanged: the publication row only changes by
//! pushes, each a `Release`-fenced copy, so a reader that `Acquire`-loads a guard in it
//! sees the data pushed before the guard. Cutting a peer off cannot stop it writing
//! its own memory, so the reader **freezes** its view instead: it takes a snapshot of
//! the peer's region and reads only the snapshot from then on. A publication sequence
//! word (a seqlock, one writer: the owner's push) makes the snapshot land between two
//! pushes; if the owner died inside a push (the word stays odd), the snapshot may hold
//! part of that one push and nothing after it, which is what a torn one-sided write
//! leaves on any transport.

use crate::region::Region;
use crate::sync::atomic::{fence, AtomicU64, Ordering};

/// Copies `len` bytes from `src_off` to `dst_off` of `region` as one publication: the
/// sequence word goes odd, the bytes are copied after a `Release` fence, and the word
/// goes even again (`Release`). One thread at a time per `seq` (the caller serializes).
pub fn publish(seq: &AtomicU64, region: &Region, src_off: usize, dst_off: usize, len: usize) {
    let s = seq.load(Ordering::Relaxed);
    seq.store(s | 1, Ordering::Relaxed);
    // Orders the odd value before the copied words, for a reader's Acquire fence.
    fence(Ordering::Release);
    region.copy_to(src_off, region, dst_off, len);
    seq.store((s | 1) + 1, Ordering::Release);
}

/// One attempt at a snapshot of `src` into `dst` (same length), of the byte ranges
/// `(offset, len)` in `ranges` or, if it is empty, of all of it: true if no
/// publication overlapped it, so `dst` holds `src` as of one point between pushes.
pub fn try_snapshot(seq: &AtomicU64, src: &Region, dst: &Region, ranges: &[(usize, usize)]) -> bool {
    let before = seq.load(Ordering::Acquire);
    if before & 1 == 1 {
        return false;
    }
    copy_ranges(src, dst, ranges);
    // A copied word written by a later publication makes its odd value visible here.
    fence(Ordering::Acquire);
    seq.load(Ordering::Relaxed) == before
}

/// Copies `ranges` of `src` into `dst` (all of it if `ranges` is empty).
fn copy_ranges(src: &Region, dst: &Region, ranges: &[(usize, usize)]) {
    if ranges.is_empty() {
        src.copy_to(0, dst, 0, src.len().min(dst.len()));
    }
    for &(off, len) in ranges {
        src.copy_to(off, dst, off, len);
    }
}

/// A peer's region as this node reads it: the peer's own memory while it is
/// connected, a snapshot from the moment it was cut off afterwards.
#[derive(Debug)]
pub struct PeerView {
    live: crate::sync::Arc<Region>,
    #[cfg(not(loom))]
    frozen: std::sync::OnceLock<Region>,
    /// The byte ranges readers use (the peer's rows of the tables over this region);
    /// a freeze copies only these (all of the region if none were declared).
    #[cfg(not(loom))]
    watched: std::sync::Mutex<Vec<(usize, usize)>>,
}

impl PeerView {
    /// A view of `live`, a peer's region mapped here.
    pub fn new(live: crate::sync::Arc<Region>) -> PeerView {
        PeerView {
            live,
            #[cfg(not(loom))]
            frozen: std::sync::OnceLock::new(),
            #[cfg(not(loom))]
            watched: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Declares that readers use `[off, off + len)` of the region, so that a freeze
    /// needs to copy only such ranges (a table declares its peer's rows).
    pub fn watch(&self, off: usize, len: usize) {
        #[cfg(not(loom))]
        {
            if self.live.check_range(off as u64, len as u64).is_ok() {
                crate::sync::lock(&self.watched).push((off, len));
            }
        }
        #[cfg(loom)]
        let _ = (off, len);
    }

    /// The region to read the peer's rows from now.
    #[inline]
    pub fn region(&self) -> &Region {
        #[cfg(not(loom))]
        if let Some(f) = self.frozen.get() {
            return f;
        }
        &self.live
    }

    /// The peer's own memory, frozen or not (for areas whose parts are not written
    /// again until every reader is done: see `LayoutBuilder::bytes_live`).
    #[inline]
    pub fn live_region(&self) -> &Region {
        &self.live
    }

    /// True once the view is frozen.
    pub fn is_frozen(&self) -> bool {
        #[cfg(not(loom))]
        {
            self.frozen.get().is_some()
        }
        #[cfg(loom)]
        {
            false
        }
    }

    /// Freezes the view on a snapshot (idempotent): retries until a snapshot falls
    /// between two publications, `deadline` passes (the owner is stopped inside a
    /// push) or `gone` says the owner's process is dead (it died inside a push and the
    /// word stays odd), then keeps the last attempt. Returns true if it was clean.
    #[cfg(not(loom))]
    pub(crate) fn freeze(&self, seq: &AtomicU64, deadline: std::time::Instant, gone: impl Fn() -> bool) -> bool {
        if self.is_frozen() {
            return true;
        }
        // Untouched pages of a large zeroed allocation cost nothing; only the watched
        // ranges are copied.
        let snap = Region::new(self.live.len());
        let ranges = crate::sync::lock(&self.watched).clone();
        let mut clean = try_snapshot(seq, &self.live, &snap, &ranges);
        while !clean && std::time::Instant::now() < deadline && !gone() {
            std::thread::sleep(std::time::Duration::from_micros(20));
            clean = try_snapshot(seq, &self.live, &snap, &ranges);
        }
        if !clean {
            // The last attempt may have been skipped (the word was odd): copy anyway.
            copy_ranges(&self.live, &snap, &ranges);
        }
        let _ = self.frozen.set(snap);
        clean
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::Arc;

    #[test]
    fn publish_copies_once_and_leaves_the_word_even() {
        let r = Region::new(64);
        let seq = AtomicU64::new(0);
        r.store(0, 7, Ordering::Relaxed);
        r.store(8, 9, Ordering::Relaxed);
        publish(&seq, &r, 0, 32, 16);
        assert_eq!((r.load(32, Ordering::Acquire), r.load(40, Ordering::Acquire)), (7, 9));
        assert_eq!(seq.load(Ordering::Relaxed), 2);
        publish(&seq, &r, 0, 32, 8);
        assert_eq!(seq.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn snapshot_refuses_an_open_publication_and_freeze_keeps_the_old_state() {
        let live = Arc::new(Region::new(32));
        live.store(0, 5, Ordering::Relaxed);
        let seq = AtomicU64::new(3); // a push in progress (odd)
        let snap = Region::new(32);
        assert!(!try_snapshot(&seq, &live, &snap, &[]));
        let v = PeerView::new(live.clone());
        assert_eq!(v.region().load(0, Ordering::Acquire), 5);
        // The owner died inside the push: the freeze gives up at its deadline and
        // keeps what was there.
        assert!(!v.freeze(&seq, std::time::Instant::now() + std::time::Duration::from_millis(2), || false));
        live.store(0, 6, Ordering::Relaxed);
        assert_eq!(v.region().load(0, Ordering::Acquire), 5, "a frozen view no longer follows the owner");
        assert!(v.is_frozen());
        seq.store(4, Ordering::Relaxed);
        let w = PeerView::new(live.clone());
        assert!(w.freeze(&seq, std::time::Instant::now(), || false));
        // Watched ranges: only they are copied.
        live.store(8, 9, Ordering::Relaxed);
        let y = PeerView::new(live.clone());
        y.watch(8, 8);
        assert!(y.freeze(&seq, std::time::Instant::now(), || false));
        assert_eq!(y.region().load(8, Ordering::Acquire), 9, "a watched word is in the snapshot");
        assert_eq!(y.region().load(0, Ordering::Acquire), 0, "an unwatched word is not copied");
        // A dead owner is not waited for: the deadline is far, `gone` says so.
        seq.store(5, Ordering::Relaxed);
        let x = PeerView::new(Arc::new(Region::new(32)));
        let t = std::time::Instant::now();
        assert!(!x.freeze(&seq, t + std::time::Duration::from_secs(60), || true));
        assert!(t.elapsed() < std::time::Duration::from_secs(30), "waited for a dead owner");
        assert_eq!(w.region().load(0, Ordering::Acquire), 6);
    }
}
