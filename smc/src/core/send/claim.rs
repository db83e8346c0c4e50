//! A claimed entry: where its payload goes, and how it is published or given back.

use super::{SendState, HEADER, KIND_DATA, KIND_LARGE, KIND_NULL};
use crate::core::store_header;
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::Bytes;

/// A claimed entry, apart from the send state it belongs to: what [`Reservation`]
/// holds, and the runtime's send slot, which reaches the state through its subgroup.
/// Every method takes the state the claim was made on. Kept small (40 bytes): a
/// send moves it from the claim to the caller's slot and on to the commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    pub(super) entry: u64,
    pub(super) index: u64,
    /// The payload's first byte in the slots, or in the arena if `large`.
    pub(super) payload_at: usize,
    /// Below [`crate::spec::MAX_WINDOW`].
    pub(super) slot: u32,
    /// At most the arena's size ([`crate::spec::MAX_ARENA`], 1 GiB).
    pub(super) len: u32,
    /// In a pack: the pack's bytes before this message (where its length word
    /// goes, below a slot's `max_msg`); [`NO_PACK`] otherwise.
    pub(super) pack: u32,
    pub(super) large: bool,
}

const _: () = assert!(std::mem::size_of::<Claim>() == 40, "a claim stays 40 bytes");

/// [`Claim::pack`] of a message alone in its entry.
const NO_PACK: u32 = u32::MAX;

impl Claim {
    pub(super) fn new(entry: u64, index: u64, slot: usize, len: usize) -> Claim {
        Claim { entry, index, slot: slot as u32, len: len as u32, payload_at: 0, large: false, pack: NO_PACK }
    }

    /// The area the payload lies in: the slots, or the arena for a large message.
    #[inline]
    fn area(&self, s: &SendState) -> Bytes {
        if self.large {
            s.area
        } else {
            s.slots
        }
    }

    /// The pack's bytes before this message, if it is in a pack.
    #[inline]
    fn in_pack(&self) -> Option<usize> {
        (self.pack != NO_PACK).then_some(self.pack as usize)
    }

    /// See [`Reservation::write`].
    #[inline]
    pub(crate) fn write(&self, s: &SendState, at: usize, data: &[u8]) {
        assert!(
            at % 8 == 0 && at + data.len() <= self.len as usize,
            "write {at}+{} outside a {}-byte message",
            data.len(),
            self.len
        );
        s.row.write_bytes(self.area(s), self.payload_at + at, data);
    }

    /// See [`Reservation::write_word`].
    #[inline]
    pub(crate) fn write_word(&self, s: &SendState, i: usize, value: u64) {
        self.write_words(s, i, &[value]);
    }

    /// See [`Reservation::write_words`].
    #[inline]
    pub(crate) fn write_words(&self, s: &SendState, i: usize, values: &[u64]) {
        assert!(
            (i + values.len()) * 8 <= (self.len as usize).div_ceil(8) * 8,
            "words {i}.. outside a {}-byte message",
            self.len
        );
        s.row.store_words(self.area(s), self.payload_at / 8 + i, values);
    }

    /// See [`Reservation::publish`].
    #[inline]
    pub(crate) fn publish(self, s: &SendState) -> u64 {
        let len = self.len as u64;
        if self.large {
            // The descriptor: the payload's offset in the arena, in the slot's first
            // payload word (the header, stored next, publishes it with the rest).
            s.row.store_word(s.slots, (self.slot as usize * s.slot_bytes + HEADER) / 8, self.payload_at as u64);
            return self.finish(s, KIND_LARGE, len);
        }
        if let Some(before) = self.in_pack() {
            return s.publish_packed(self.entry, self.index, self.slot as usize, before, self.len as usize);
        }
        self.finish(s, KIND_DATA, len)
    }

    /// See [`Reservation::abandon`].
    pub(crate) fn abandon(self, s: &SendState) {
        match self.in_pack() {
            // Joined an open pack: it stays as it was, open.
            Some(before) if before > 0 => s.reopen(self.entry, self.slot as usize),
            _ => {
                self.finish(s, KIND_NULL, 1);
            }
        }
    }

    #[inline]
    fn finish(self, s: &SendState, kind: u64, len: u64) -> u64 {
        let slot = self.slot as usize;
        store_header(&s.row, s.slots, slot * s.slot_bytes / 8, kind, len, self.index);
        s.published[slot].store(self.entry + 1, Ordering::Release);
        self.index
    }

    /// The message's index among this sender's messages.
    pub(crate) fn index(&self) -> u64 {
        self.index
    }
}
