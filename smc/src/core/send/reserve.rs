//! A sender's ring (and arena), reserved as its entries (payloads) first reach it.
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
use crate::core::arena::{Arena, Place};
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
        self.reserve_ring(entry)
    }

    /// Reserves the arena pages `place` lands in the first time the arena reaches
    /// them (see `Arena::to_reserve`): a full `/dev/shm` is [`SendError::NoRoom`].
    pub(crate) fn reserve_arena(&self, arena: &mut Arena, place: Place) -> Result<(), SendError> {
        if let Some(range) = arena.to_reserve(place) {
            self.row.reserve_in(self.area, range.0, range.1).map_err(SendError::NoRoom)?;
            arena.reserved(range);
        }
        Ok(())
    }

    /// The slow side of `ensure_reserved`, out of line: the claim path keeps a
    /// load, a compare and a branch.
    #[cold]
    #[inline(never)]
    fn reserve_ring(&self, entry: u64) -> Result<(), SendError> {
        let have = self.ring_reserved.load(Ordering::Acquire);
        let per_chunk = (RING_CHUNK / self.slot_bytes).max(1) as u64;
        let Some((from, upto)) = chunk(have, entry, self.ring.divisor(), per_chunk) else { return Ok(()) };
        let (at, n) = (from as usize * self.slot_bytes, (upto - from) as usize * self.slot_bytes);
        self.row.reserve_in(self.slots, at, n).map_err(SendError::NoRoom)?;
        let done = if upto == self.ring.divisor() { ALL } else { upto };
        self.ring_reserved.fetch_max(done, Ordering::Release);
        Ok(())
    }
}

/// The slots `from..upto` to reserve for `entry` when `have` are (none once the
/// whole ring of `window` is): from where the reserved part ends through the
/// entry's slot and `per_chunk` more. Past the first pass (which cannot happen
/// unreserved: every entry comes here first), the rest of the ring.
fn chunk(have: u64, entry: u64, window: u64, per_chunk: u64) -> Option<(u64, u64)> {
    if have >= window {
        return None;
    }
    let upto = if entry >= window { window } else { (entry + 1 + per_chunk).min(window) };
    Some((have, upto))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Entries taken in order (as claims and null runs take them) over three
        /// passes of the ring: each entry's slot is reserved before it is written,
        /// the reserved part never passes the ring's end, and the kernel is asked
        /// once per chunk of the first pass and never after it.
        #[test]
        fn every_slot_is_reserved_before_its_first_write(window in 1u64..300, per_chunk in 1u64..64) {
            let mut have = 0u64;
            let mut asked = 0u64;
            for entry in 0..3 * window {
                if entry >= have {
                    if let Some((from, upto)) = chunk(have, entry, window, per_chunk) {
                        prop_assert_eq!(from, have, "from where the reserved part ends");
                        prop_assert!(upto <= window);
                        asked += 1;
                        have = if upto == window { ALL } else { upto };
                    }
                }
                prop_assert!(entry % window < have.min(window), "slot of entry {} written unreserved", entry);
            }
            prop_assert_eq!(have, ALL);
            prop_assert!(asked <= window.div_ceil(per_chunk + 1), "{} requests for a ring of {}", asked, window);
        }
    }
}
