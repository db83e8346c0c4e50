//! Delivered messages, read in place from the ring (or, for a large message, from its
//! sender's arena).
//!
//! A delivery batch hands the application views of the slots themselves; nothing is
//! copied unless the application asks. Because peers write table memory concurrently,
//! a view offers copying and word reads instead of a `&[u8]` (see sst's memory-model
//! rule); the slot itself does not change until the batch's upcall has returned and
//! `delivered` has advanced past it.

use spindle_sst::sync::Arc;
use spindle_sst::{Bytes, Table};

/// Where a message sits: plain data, no borrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgRef {
    /// Sender rank (round-robin position).
    pub sender: usize,
    /// The sender's message index.
    pub index: u64,
    /// Global sequence number (ordered mode; in unordered mode, the arrival order).
    pub seq: u64,
    pub(crate) row: usize,
    /// The slots or the arena, and the payload's first byte in it.
    pub(crate) area: Bytes,
    pub(crate) at: usize,
    pub(crate) len: usize,
    /// The payload lies in the sender's arena.
    pub large: bool,
}

/// A batch of messages to deliver, in delivery order.
#[derive(Debug)]
pub struct Batch {
    pub(crate) table: Arc<Table>,
    pub(crate) msgs: Vec<MsgRef>,
}

impl Batch {
    /// Number of messages.
    pub fn len(&self) -> usize {
        self.msgs.len()
    }
    /// True when the batch has no messages (only nulls were passed over).
    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }
    /// The messages, in delivery order.
    pub fn iter(&self) -> impl Iterator<Item = Message<'_>> {
        self.msgs.iter().map(move |m| Message { batch: self, m: *m })
    }
    /// Where each message sits.
    pub fn refs(&self) -> &[MsgRef] {
        &self.msgs
    }
}

/// One delivered message, in place.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    batch: &'a Batch,
    m: MsgRef,
}

impl Message<'_> {
    /// Sender rank.
    #[inline]
    pub fn sender(&self) -> usize {
        self.m.sender
    }
    /// The sender's message index.
    #[inline]
    pub fn index(&self) -> u64 {
        self.m.index
    }
    /// Global sequence number.
    pub fn seq(&self) -> u64 {
        self.m.seq
    }
    /// True if the payload lies in the sender's arena (larger than a slot).
    pub fn is_large(&self) -> bool {
        self.m.large
    }
    /// Payload length.
    pub fn len(&self) -> usize {
        self.m.len
    }
    /// True for an empty payload.
    pub fn is_empty(&self) -> bool {
        self.m.len == 0
    }
    /// Copies `out.len()` payload bytes from the start of the payload.
    pub fn read(&self, out: &mut [u8]) {
        assert!(out.len() <= self.m.len, "read of {} bytes from a {}-byte message", out.len(), self.m.len);
        self.batch.table.read_bytes(self.m.row, self.m.area, self.m.at, out);
    }
    /// Copies `out.len()` payload bytes from payload offset `at` (a multiple of 8).
    pub fn read_at(&self, at: usize, out: &mut [u8]) {
        assert!(
            at % 8 == 0 && at + out.len() <= self.m.len,
            "read of {}..{} from a {}-byte message",
            at,
            at + out.len(),
            self.m.len
        );
        self.batch.table.read_bytes(self.m.row, self.m.area, self.m.at + at, out);
    }
    /// The payload, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.m.len];
        self.read(&mut v);
        v
    }
    /// Payload word `i` (little-endian bytes `8i..8i+8`), read in place.
    #[inline]
    pub fn word(&self, i: usize) -> u64 {
        assert!(i * 8 < self.m.len.div_ceil(8) * 8, "word {i} beyond a {}-byte message", self.m.len);
        self.batch.table.word(self.m.row, self.m.area, self.m.at / 8 + i)
    }
    /// Payload words `first..first + out.len()`, read in place with the slot's
    /// memory found once (a header of several words costs one lookup, not one per
    /// word as [`Message::word`] does).
    #[inline]
    pub fn words(&self, first: usize, out: &mut [u64]) {
        let end = first + out.len();
        assert!(end * 8 <= self.m.len.div_ceil(8) * 8, "words to {end} beyond a {}-byte message", self.m.len);
        let area = self.batch.table.area(self.m.row, self.m.area);
        let base = self.m.at / 8 + first;
        for (i, w) in out.iter_mut().enumerate() {
            *w = area.word(base + i);
        }
    }
}
