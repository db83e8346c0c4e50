//! What a subgroup is (members, senders, window, message size, mode) and how its rows
//! are laid out.
//!
//! Row layout (one row per member, in member order):
//!
//! ```text
//!   sent            entries this member has published in its slot ring (the guard)
//!   wedged          flag: this member stopped sending (view change)
//!   received[S]     per sender: how many consecutive indices this member has
//!   delivered[S]    per sender: how many indices this member has delivered (or skipped as null)
//!   relayed[S]      per sender, with `relay` and an arena: how many of its entries this
//!                   member has passed on (payloads sent on before the count)
//!   slots[W]        the ring: slot e % W holds entry e = [word0: kind | len << 32][word1: index][payload]
//!   arena[A]        large messages' payloads, each contiguous; a slot holds its descriptor
//! ```
//!
//! An *entry* is one message (one index) or a null run (a range of indices); see
//! [`crate::core`]. Only senders' rings and arenas are used.
//!
//! # Small and large messages
//! A message of at most `max_msg` bytes is written into its slot. A larger one (up to
//! `arena` bytes) is written once into the sender's arena, and its slot holds a
//! *descriptor*: the kind, the length and the payload's offset in the arena. Both take
//! one index, so a large message has its place in the same total order as small ones.
//! Slots stay sized for small messages; memory per sender is
//! `window × (16 + max_msg) + arena` bytes of row.

use spindle_sst::table::{ColumnRange, Layout};
use spindle_sst::transport::NodeId;
use spindle_sst::{Bytes, Counter, CounterVec, Flag, LayoutBuilder};
use thiserror::Error;

/// Delivery mode of a subgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Atomic multicast: every member delivers the same sequence, round-robin over the
    /// senders, each message once every member has received it.
    Ordered,
    /// Deliver on receipt, per sender in order; no order across senders.
    Unordered,
}

/// A subgroup's fixed configuration for one view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubgroupSpec {
    /// Members in rank order (row order of the table).
    pub members: Vec<NodeId>,
    /// The members that send, in sender-rank order (round-robin order).
    pub senders: Vec<NodeId>,
    /// Slots in each sender's ring.
    pub window: usize,
    /// Largest payload written into a slot, in bytes (slots are sized for it).
    pub max_msg: usize,
    /// Bytes of each sender's arena for messages larger than `max_msg` (0: none, and
    /// `max_msg` is the largest message). The largest message is then `arena`.
    pub arena: usize,
    /// Ordered or unordered delivery.
    pub mode: Mode,
    /// Large payloads travel a chain where rows are copied (tcp, rdma): a sender sends
    /// each payload to one member, and each member passes it on to the next, so the
    /// sender's link carries one copy, not one per member (the chain of Derecho's
    /// RDMC). Each member takes a descriptor only once its payload has reached it.
    /// No effect where peers read rows in place (mem, shm).
    pub relay: bool,
}

/// A spec that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    /// Members must be 1..=64, without duplicates.
    #[error("a subgroup needs 1..={max} distinct members, got {0}", max = spindle_sst::table::MAX_ROWS)]
    Members(usize),
    /// A sender must be a member, listed once.
    #[error("sender {0} is not a member or is listed twice")]
    Sender(NodeId),
    /// At least one sender.
    #[error("a subgroup needs at least one sender")]
    NoSenders,
    /// Window and message size must be positive and bounded.
    #[error("window {window} and max_msg {max_msg} must be in 1..={max_window} and 1..={max_msg_limit}", max_window = MAX_WINDOW, max_msg_limit = MAX_MSG)]
    Size {
        /// Window.
        window: usize,
        /// Max message size.
        max_msg: usize,
    },
    /// The arena is larger than [`MAX_ARENA`].
    #[error("arena of {0} bytes exceeds {max}", max = MAX_ARENA)]
    Arena(usize),
}

/// Largest window.
pub const MAX_WINDOW: usize = 1 << 16;
/// Largest message (a null-run count and a length share a 32-bit field).
pub const MAX_MSG: usize = 1 << 26;
/// Largest arena, and so the largest message (1 GiB; a length fits the header's 32 bits).
pub const MAX_ARENA: usize = 1 << 30;
/// Bytes of an entry header.
pub const HEADER: usize = 16;

/// The ring size [`auto_window`] aims for, in bytes per sender: 2 MiB, 2,048 slots
/// of 1 KB. Ordered delivery hands a sender's slots back a batch at a time, and a
/// batch holds up to a quarter of the window; the more slots a sender has, the less
/// it waits for them. On one host and over tcp, with one sender, 2 MiB moved 1.05-1.8×
/// the messages 256 KiB did at 16 B to 1 KB, most at 128 B and 1 KB
/// (docs/benchmarks.md). The cost is memory:
/// each member maps each sender's ring, so a subgroup of `n` members and `s`
/// senders takes up to `n * s * 2` MiB over all its members (on shm, pages of
/// peers' rows that are read in place are never touched); set a window of slots
/// (`window`) where that is too much.
pub const AUTO_RING_BYTES: usize = 2 << 20;
/// The most slots [`auto_window`] gives a ring (16,384: a ring of 16-byte messages
/// takes 512 KiB).
pub const AUTO_WINDOW_MAX: usize = 16384;

/// A window sized in bytes rather than slots: as many slots of `max_msg` as fit
/// [`AUTO_RING_BYTES`], at least 256 and at most [`AUTO_WINDOW_MAX`]. Small messages
/// need many slots in flight to keep a link busy while the receivers' counters travel
/// back (over tcp a window of 256 16-byte messages is gone in well under a round
/// trip, and the sender waits); large ones need no more than 256.
///
/// ```
/// assert_eq!(spindle_smc::spec::auto_window(16), 16384);
/// assert_eq!(spindle_smc::spec::auto_window(128), 14563);
/// assert_eq!(spindle_smc::spec::auto_window(1008), 2048);
/// assert_eq!(spindle_smc::spec::auto_window(10240), 256);
/// ```
pub fn auto_window(max_msg: usize) -> usize {
    let slot = HEADER + max_msg.div_ceil(8) * 8;
    (AUTO_RING_BYTES / slot).clamp(256, AUTO_WINDOW_MAX)
}

impl SubgroupSpec {
    /// Checks the spec.
    pub fn validate(&self) -> Result<(), SpecError> {
        let m = &self.members;
        if m.is_empty() || m.len() > spindle_sst::table::MAX_ROWS || (1..m.len()).any(|i| m[..i].contains(&m[i])) {
            return Err(SpecError::Members(m.len()));
        }
        if self.senders.is_empty() {
            return Err(SpecError::NoSenders);
        }
        for (i, s) in self.senders.iter().enumerate() {
            if !m.contains(s) || self.senders[..i].contains(s) {
                return Err(SpecError::Sender(*s));
            }
        }
        if self.window == 0 || self.window > MAX_WINDOW || self.max_msg == 0 || self.max_msg > MAX_MSG {
            return Err(SpecError::Size { window: self.window, max_msg: self.max_msg });
        }
        if self.arena > MAX_ARENA {
            return Err(SpecError::Arena(self.arena));
        }
        Ok(())
    }

    /// The largest message a sender may send: `arena` if larger than `max_msg`.
    pub fn largest(&self) -> usize {
        self.max_msg.max(self.arena)
    }

    /// Member rank of `node`.
    pub fn member_rank(&self, node: NodeId) -> Option<usize> {
        self.members.iter().position(|m| *m == node)
    }

    /// Sender rank of `node`.
    pub fn sender_rank(&self, node: NodeId) -> Option<usize> {
        self.senders.iter().position(|m| *m == node)
    }
}

/// Column handles and slot geometry of a subgroup's table.
#[derive(Debug, Clone)]
pub struct SmcLayout {
    pub(crate) table: Layout,
    pub(crate) sent: Counter,
    pub(crate) wedged: Flag,
    pub(crate) received: CounterVec,
    pub(crate) delivered: CounterVec,
    /// With `relay` and an arena (see [`SubgroupSpec::relay`]).
    pub(crate) relayed: Option<CounterVec>,
    pub(crate) slots: Bytes,
    pub(crate) slot_bytes: usize,
    pub(crate) arena: Bytes,
    rows: usize,
}

impl SmcLayout {
    /// The layout for `spec` (assumed valid).
    pub fn new(spec: &SubgroupSpec) -> SmcLayout {
        let mut b = LayoutBuilder::new();
        let sent = b.counter("sent");
        let wedged = b.flag("wedged");
        let received = b.counters("received", spec.senders.len());
        let delivered = b.counters("delivered", spec.senders.len());
        let relayed = (spec.relay && spec.arena > 0).then(|| b.counters("relayed", spec.senders.len()));
        let slot_bytes = HEADER + spec.max_msg.div_ceil(8) * 8;
        // Published by `sent`, reused only once delivered everywhere: on mem/shm peers
        // read messages straight from the sender's row (no copy at all).
        let slots = b.bytes_in_place("slots", slot_bytes * spec.window);
        // The same rule for large payloads: published by `sent` after their
        // descriptor, reused once delivered everywhere; so, read from the sender's
        // live memory even after it was cut off (no snapshot copies the arena). Last
        // in the row; untouched pages of it cost nothing (mapped lazily, zero-filled).
        let arena = b.bytes_live("arena", spec.arena);
        let rows = spec.members.len();
        SmcLayout { table: b.build(), sent, wedged, received, delivered, relayed, slots, slot_bytes, arena, rows }
    }

    /// The row layout.
    pub fn table_layout(&self) -> &Layout {
        &self.table
    }

    /// The row's counters and flags, every column ahead of the slots (every member
    /// writes them).
    pub(crate) fn counters(&self) -> ColumnRange {
        self.slots.before()
    }

    /// Bytes of region the table needs.
    pub fn table_bytes(&self) -> usize {
        self.table.table_bytes(self.rows)
    }

    /// Row range of slots `first..first + n` (no wrap), header of the first through the
    /// end of the last slot's first `last_len` payload bytes.
    pub(crate) fn slots_range(&self, first: usize, n: usize, last_len: usize) -> ColumnRange {
        let start = first * self.slot_bytes;
        let len = (n - 1) * self.slot_bytes + HEADER + last_len;
        self.slots.sub_range(start, len)
    }
}
