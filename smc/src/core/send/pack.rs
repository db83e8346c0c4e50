//! Packs: small messages that join the sender's last entry while the predicate
//! thread has not taken it in yet.
//!
//! With packing on ([`SendState::set_packing`]), a small message is published as a
//! *pack* of one (header kind `KIND_PACK`; in the slot, each message is a length
//! word and its payload padded to a word) and its entry is left *open*: its
//! `published` word carries [`OPEN`]. The next small send first tries to join it:
//!
//! ```text
//!   sender (joining)                         predicate thread (absorb)
//!   CAS published: e+1|OPEN -> |WRITING      published == e+1|OPEN?
//!   room left? no: store e+1 (closed)          CAS e+1|OPEN -> e+1 (closed)
//!   write length word and payload            (fails while WRITING: next pass)
//!   header: pack of n+1, fills[slot]         read the header, take the entry in
//!   store published = e+1|OPEN (Release)
//! ```
//!
//! Joining and closing are one CAS each on the same word, so a message joins only
//! an entry not yet taken in, and the predicate thread reads a header no sender is
//! changing. A pack has one index: its messages share their entry's place in the
//! total order and are delivered one after another at it. So the lease's rule (an
//! entry's index known when it is claimed) holds unchanged, and so do the window,
//! stability and trimming, all of which count indices. Nothing waits to fill a
//! pack: the predicate thread closes whatever it finds on its pass; messages pack
//! only while it is busy elsewhere, which is when the cost per entry matters.
//!
//! A sender joins the entry before the next one to be claimed (the claim word's
//! entry less one); it is this thread's own last entry or a later one, so a
//! thread's messages keep their order. A reservation that joined and is given back
//! leaves the pack as it was (no index was taken).

use super::{pack_word, Claim, SendState, ENTRY_MASK, HEADER, REVOKED};
use spindle_sst::sync::atomic::Ordering;

/// In a `published` word: more messages may join this entry's pack.
pub(crate) const OPEN: u64 = 1 << 63;
/// In a `published` word: a sender is joining this entry's pack.
pub(crate) const WRITING: u64 = 1 << 62;

/// Bytes a message of `len` takes in a pack.
fn packed(len: usize) -> usize {
    8 + len.div_ceil(8) * 8
}

impl SendState {
    /// Packs small messages from now on (`true`), or sends each in an entry of its
    /// own (`false`, the default).
    pub(crate) fn set_packing(&self, on: bool) {
        self.pack.store(on, Ordering::Relaxed);
    }

    /// Whether a message of `len` bytes goes in a pack.
    #[inline]
    pub(super) fn packs(&self, len: usize) -> bool {
        packed(len) <= self.max_msg && self.pack.load(Ordering::Relaxed)
    }

    /// Joins the open pack of the last claimed entry, if there is one with room.
    pub(super) fn try_append(&self, len: usize) -> Option<Claim> {
        let c = self.claim.load(Ordering::Acquire);
        if c & REVOKED != 0 {
            return None;
        }
        let entry = (c & ENTRY_MASK).checked_sub(1)?;
        let slot = self.slot_of(entry);
        let open = (entry + 1) | OPEN;
        // Acquire: the pack's header and fill, stored before it was opened, are seen.
        self.published[slot].compare_exchange(open, open | WRITING, Ordering::Acquire, Ordering::Relaxed).ok()?;
        let before = (self.fills[slot].load(Ordering::Relaxed) & 0xffff_ffff) as usize;
        if before + packed(len) > self.max_msg {
            // Full for this message: closed for good, the sender claims a new entry.
            self.published[slot].store(entry + 1, Ordering::Release);
            return None;
        }
        let base = slot * self.slot_bytes;
        let index = self.slots_area().word(base / 8 + 1);
        Some(Claim {
            payload_at: base + HEADER + before + 8,
            pack: before as u32,
            ..Claim::new(entry, index, slot, len)
        })
    }

    /// Publishes a packed message claimed at `before` bytes into its pack (0: the
    /// first, in a fresh entry); leaves the pack open if another could join it.
    pub(super) fn publish_packed(&self, entry: u64, index: u64, slot: usize, before: usize, len: usize) -> u64 {
        let base = (slot * self.slot_bytes + HEADER) / 8;
        self.row.store_word(self.slots, base + before / 8, len as u64);
        let count = if before == 0 { 1 } else { (self.fills[slot].load(Ordering::Relaxed) >> 32) + 1 };
        let bytes = before + packed(len);
        self.fills[slot].store((count << 32) | bytes as u64, Ordering::Relaxed);
        let head = slot * self.slot_bytes / 8;
        self.row.store_word(self.slots, head, pack_word(count, bytes as u64));
        self.row.store_word(self.slots, head + 1, index);
        // Room for one more word-sized message: open; else closed now.
        let open = if bytes + packed(8) <= self.max_msg { OPEN } else { 0 };
        self.published[slot].store((entry + 1) | open, Ordering::Release);
        index
    }

    /// Gives back a claim that joined the pack of `entry`: the pack stays open, as
    /// it was.
    pub(super) fn reopen(&self, entry: u64, slot: usize) {
        self.published[slot].store((entry + 1) | OPEN, Ordering::Release);
    }

    /// Closes the open pack in `slot`, whose `published` word was just read as
    /// `open`, for the predicate thread to take in; false if a sender began to join
    /// it meanwhile (the next pass looks again).
    pub(super) fn close(&self, slot: usize, open: u64) -> bool {
        debug_assert!(open & OPEN != 0 && open & WRITING == 0, "an open pack");
        self.published[slot].compare_exchange(open, open & !OPEN, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}
