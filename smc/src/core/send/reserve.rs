//! A sender's ring, reserved as its entries first reach it.
//!
//! On `shm` a node's segment is a sparse file in `/dev/shm`: a page is allocated
//! when it is first written, and a write that finds the file system full is killed
//! by `SIGBUS` (see `spindle_sst::region::Region::reserve`). Entries take the slots
//! in order (entry `e` in slot `e % window`), so the ring's first pass reaches
//! every slot from 0 up, and reserving ahead of it, a chunk at a time, covers all
//! of it for good: a full `/dev/shm` is then [`SendError::NoRoom`] at a send, not a
//! crash at a write. A ring is not reserved whole at setup: a topic that carries
//! a few samples would hold its 2 MiB in `/dev/shm` for every view.
//!
//! ```text
//!   slots:  [ reserved ........ | chunk reserved when entry reaches it | ...... ]
//!           0                   reserved                                 window
//! ```
//!
//! Both writers of a ring go through here before they write a slot: a sender's
//! claim (`try_claim`, before its compare-and-swap takes the entry) and the
//! predicate thread's null run (`add_nulls`). Two threads may reserve the same
//! chunk; the kernel's answer is the same and the count only grows.

use super::{SendError, SendState};
use spindle_sst::region::ReserveError;
use spindle_sst::sync::atomic::Ordering;

/// Bytes of slots reserved per request, past the slot that asked.
pub(crate) const RING_CHUNK: usize = 256 << 10;

/// `reserved` once the whole ring is: no entry asks again.
pub(crate) const ALL: u64 = u64::MAX;

impl SendState {
    /// Makes sure the slot of `entry` is reserved (see the module docs); one load
    /// and compare once the ring's first pass is past it.
    #[inline]
    pub(crate) fn ensure_reserved(&self, entry: u64) -> Result<(), SendError> {
        if entry < self.ring_reserved.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.reserve_ring(entry).map_err(SendError::NoRoom)
    }

    #[cold]
    fn reserve_ring(&self, entry: u64) -> Result<(), ReserveError> {
        let have = self.ring_reserved.load(Ordering::Acquire);
        if have >= self.window {
            return Ok(());
        }
        let per_chunk = (RING_CHUNK / self.slot_bytes).max(1) as u64;
        // Past the first pass (which cannot happen unreserved: every entry comes
        // here first), the rest of the ring.
        let upto = if entry >= self.window { self.window } else { (entry + 1 + per_chunk).min(self.window) };
        let (from, n) = (have as usize, (upto - have) as usize);
        self.row.reserve_in(self.slots, from * self.slot_bytes, n * self.slot_bytes)?;
        let done = if upto == self.window { ALL } else { upto };
        self.ring_reserved.fetch_max(done, Ordering::Release);
        Ok(())
    }
}
