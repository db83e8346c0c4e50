//! Delivered messages, read in place from the ring (or, for a large message, from its
//! sender's arena).
//!
//! A delivery batch hands the application views of the slots themselves; nothing is
//! copied unless the application asks. Because peers write table memory concurrently,
//! a view offers copying and word reads instead of a `&[u8]` (see sst's memory-model
//! rule); the slot itself does not change until the batch's upcall has returned and
//! `delivered` has advanced past it.

use spindle_sst::sync::Arc;
use spindle_sst::table::RowArea;
use spindle_sst::{Bytes, Table};

/// Where a message sits: plain data, no borrow. Kept small (40 bytes): a batch
/// holds one per message and the upcall reads them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgRef {
    /// Global sequence number (ordered mode; in unordered mode, the arrival order).
    seq: u64,
    /// The sender's message index.
    index: u64,
    /// The payload's first byte in the slots, or in the arena if `large`.
    at: usize,
    len: u32,
    /// Sender rank (round-robin position).
    sender: u16,
    /// The sender's row in the table.
    row: u16,
    /// The payload lies in the sender's arena.
    large: bool,
}

impl MsgRef {
    #[inline]
    pub(crate) fn new(sender: usize, index: u64, seq: u64, row: usize, at: usize, len: usize, large: bool) -> Self {
        // Ranks are below 64 (the table's member masks) and a payload fits its slot
        // or arena: at most `spec::MAX_MSG` (64 MiB) or `spec::MAX_ARENA` (1 GiB),
        // checked by the spec and again when the entry was received.
        debug_assert!(sender <= u16::MAX as usize && row <= u16::MAX as usize && len <= u32::MAX as usize);
        MsgRef { seq, index, at, len: len as u32, sender: sender as u16, row: row as u16, large }
    }
    /// Sender rank (round-robin position).
    pub fn sender(&self) -> usize {
        self.sender as usize
    }
    /// The sender's message index.
    pub fn index(&self) -> u64 {
        self.index
    }
    /// Global sequence number (ordered mode; in unordered mode, the arrival order).
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// Payload length.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// True for an empty payload.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// True if the payload lies in the sender's arena.
    pub fn is_large(&self) -> bool {
        self.large
    }
}

/// A batch of messages to deliver, in delivery order.
#[derive(Debug)]
pub struct Batch {
    pub(crate) table: Arc<Table>,
    /// The senders' slot and arena areas.
    pub(crate) slots: Bytes,
    pub(crate) arena: Bytes,
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
    /// The messages, in delivery order. Each sender's memory is located once per
    /// run of its messages, not once per word read.
    pub fn iter(&self) -> impl Iterator<Item = Message<'_>> {
        let mut last: Option<(u16, bool, RowArea<'_>)> = None;
        self.msgs.iter().map(move |m| {
            let area = match last {
                Some((row, large, area)) if row == m.row && large == m.large => area,
                _ => {
                    let area = self.table.area(m.row as usize, if m.large { self.arena } else { self.slots });
                    last = Some((m.row, m.large, area));
                    area
                }
            };
            Message { area, m }
        })
    }
    /// Where each message sits.
    pub fn refs(&self) -> &[MsgRef] {
        &self.msgs
    }
}

/// One delivered message, in place.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// The sender's slots or arena, located.
    area: RowArea<'a>,
    /// Where it sits (in the batch: not copied per message).
    m: &'a MsgRef,
}

impl Message<'_> {
    /// Sender rank.
    #[inline]
    pub fn sender(&self) -> usize {
        self.m.sender as usize
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
        self.m.len as usize
    }
    /// True for an empty payload.
    pub fn is_empty(&self) -> bool {
        self.m.len == 0
    }
    /// Copies `out.len()` payload bytes from the start of the payload.
    pub fn read(&self, out: &mut [u8]) {
        assert!(out.len() <= self.m.len(), "read of {} bytes from a {}-byte message", out.len(), self.m.len);
        self.area.read_bytes(self.m.at, out);
    }
    /// Copies `out.len()` payload bytes from payload offset `at` (a multiple of 8).
    pub fn read_at(&self, at: usize, out: &mut [u8]) {
        assert!(
            at % 8 == 0 && at + out.len() <= self.m.len(),
            "read of {}..{} from a {}-byte message",
            at,
            at + out.len(),
            self.m.len
        );
        self.area.read_bytes(self.m.at + at, out);
    }
    /// The payload, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.m.len()];
        self.read(&mut v);
        v
    }
    /// Payload word `i` (little-endian bytes `8i..8i+8`), read in place.
    #[inline]
    pub fn word(&self, i: usize) -> u64 {
        assert!(i * 8 < self.m.len().div_ceil(8) * 8, "word {i} beyond a {}-byte message", self.m.len);
        self.area.word(self.m.at / 8 + i)
    }
    /// Payload words `first..first + out.len()`, read in place.
    #[inline]
    pub fn words(&self, first: usize, out: &mut [u64]) {
        let end = first + out.len();
        assert!(end * 8 <= self.m.len().div_ceil(8) * 8, "words to {end} beyond a {}-byte message", self.m.len);
        self.area.read_words(self.m.at / 8 + first, out);
    }
}
