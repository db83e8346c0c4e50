//! The sans-IO multicast core of one node in one subgroup (Spindle §2.3-§3.5).
//!
//! ```text
//!  reserve/commit ──▶ ┌──────────────┐ ──▶ Pushes (slots, then `sent`; `received`; `delivered`)
//!  (application)      │   SmcCore    │
//!  table rows ──────▶ │ send/receive │ ──▶ Batch of stable messages (upcall), then finish()
//!  (peers' writes)    │   /deliver   │
//!                     └──────────────┘
//! ```
//!
//! It reads the table, decides, and returns what to push and what to deliver; the
//! driver (or the simulator) moves the bytes. One call of [`SmcCore::poll`] is one
//! pass of the three stages, each taking everything that is ready (opportunistic
//! batching) and producing at most one push per peer:
//!
//! - **send**: entries committed since the last pass go out as one write per member
//!   (two when the ring wraps), then `sent` (the guard) in a second write; on a shared
//!   table (mem/shm) peers read the slots in place and only `sent` is pushed;
//! - **receive**: every new entry of every sender (up to its `sent`) is taken, the
//!   `received` vector is pushed once, and the nulls this sender owes are added as one
//!   null-run entry;
//! - **deliver** ([`SmcCore::take_deliverable`] / [`SmcCore::finish`]): everything
//!   stable is handed over in order as one [`Batch`]; `delivered` advances and is
//!   pushed once, after the upcall returned.
//!
//! # Entries and nulls
//! Slot `e % window` of a sender's ring holds its entry `e`: a message (one index) or a
//! null run (indices `a..b`), told apart by the header, which no user payload shares.
//! `sent` counts entries; `received` and `delivered` count indices. Null rule (Spindle
//! §3.3): a sender of rank `s` that has received index `k` of the sender of rank `r`
//! owes nulls until its own next index is `> k` (if `s < r`) or `>= k` (if `s > r`);
//! all nulls owed after one receive stage go out as one run. A null is only added
//! while no application message is being built, so it never takes a user's slot.
//!
//! # Sending without the lock
//! Senders claim entries and publish them through [`Sender`] (module `send`), with no
//! lock; [`SmcCore::reserve`] and [`SmcCore::commit`] are the same for a driver that
//! holds the core. The pass takes published entries in ring order ("absorb").
//!
//! # Slot reuse
//! Entry `e` may reuse the slot of entry `e - window` only when every member has
//! delivered every index of that entry, since delivery reads messages in place.
//!
//! # Large messages
//! A message longer than a slot's `max_msg` is a *descriptor* entry (module `send`):
//! its payload lies in the sender's arena, written once. Where peers read rows in
//! place (mem, shm) nothing more is sent; elsewhere the send stage pushes the payload
//! before the slots and `sent`, so it has landed when the descriptor is seen. The
//! receive stage checks every header it takes (kind, lengths, offset, index) and
//! refuses a sender whose entry lies ([`SmcCore::take_refused`]): nothing of it is
//! taken from then on.

use crate::message::{Batch, MsgRef};
use crate::spec::{Mode, SmcLayout, SubgroupSpec};
use crate::stats::Stats;
use spindle_sst::sync::Arc;
use spindle_sst::transport::NodeId;
use spindle_sst::Pushes;
use spindle_sst::{Bytes, LocalRow, Table};
use std::collections::VecDeque;
use thiserror::Error;

mod arena;
mod cut;
mod deliver;
mod entry;
use entry::{lengthen, queue_entry, Entry, EntryKind};
#[cfg(any(test, loom))]
mod faults;
mod receive;
mod relay;
#[cfg(any(test, loom))]
pub use faults::Faults;
mod send;
pub use cut::CutError;
pub(crate) use send::Claim;
pub use send::{Reservation, Sender};
use send::{Revoke, SendState};

const KIND_DATA: u64 = 1;
const KIND_NULL: u64 = 2;
const KIND_LARGE: u64 = 3;
/// A pack: several small messages under one index (see `send` and [`pack_word`]).
const KIND_PACK: u64 = 4;

/// Header word 0 of a pack of `count` messages taking `bytes` of its slot (each
/// message a length word and its payload padded to a word).
fn pack_word(count: u64, bytes: u64) -> u64 {
    KIND_PACK | (count << 8) | (bytes << 32)
}

/// The messages of a pack (header word 0), 0 for any other kind.
fn pack_count(w0: u64) -> u64 {
    if w0 & 0xff == KIND_PACK {
        (w0 >> 8) & 0xff_ffff
    } else {
        0
    }
}

/// Decodes header word 0 (of an entry this node wrote or checked): `Some(len)` for a
/// message (small or large) or a pack (its bytes), `None` with the count for a null
/// run.
fn parse_header(w0: u64) -> (Option<usize>, u64) {
    match w0 & 0xff {
        KIND_DATA | KIND_LARGE | KIND_PACK => (Some((w0 >> 32) as usize), 1),
        _ => (None, w0 >> 32),
    }
}

/// The most large-message payload bytes one send stage pushes where rows are
/// copied (at least one message); the entries after them go in the next pass. A
/// receiver takes a descriptor only once `sent` covers it, and `sent` follows the
/// payloads of its pass: cut this way, a burst of commits reaches the members (and
/// a relay's next hop) a few megabytes at a time, not all at once after its last
/// byte. (Cut at 1 MiB, a 1 MiB message a pass, 1 → 1 over loopback lost about a
/// tenth; at 4 MiB it measured as before.)
const LARGE_PUSH_BYTES: usize = 4 << 20;

/// True for a large message's descriptor.
fn is_large(w0: u64) -> bool {
    w0 & 0xff == KIND_LARGE
}

/// True for a plain message's header word 0: a message alone in its slot (not a
/// pack, a descriptor or a null run).
#[inline]
fn is_plain(w0: u64) -> bool {
    w0 & 0xffff_ffff == KIND_DATA
}

/// Payload bytes an entry has in its slot: a small message's length, a descriptor's
/// offset word, nothing for a null run.
fn slot_payload(w0: u64) -> usize {
    match (parse_header(w0).0, is_large(w0)) {
        (Some(_), true) => 8,
        (Some(len), false) => len,
        (None, _) => 0,
    }
}

/// Stores an entry header at word `at` of the slot area: word 0 is the kind in the low
/// byte and the length (message) or count (null run) in the high half; word 1 is the
/// first index.
#[inline]
fn store_header(row: &LocalRow, slots: Bytes, at: usize, kind: u64, len: u64, index: u64) {
    row.store_words(slots, at, &[kind | (len << 32), index]);
}

/// Why a send cannot start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SendError {
    /// This node is not a sender of the subgroup (a caller error).
    #[error("this node is not a sender in this subgroup")]
    NotSender,
    /// The payload is larger than the subgroup's largest message (a caller error).
    #[error("message of {len} bytes exceeds the largest message, {max} bytes (max_msg, or the arena)")]
    TooLarge {
        /// Requested length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Every slot holds a message not yet delivered everywhere: retry later.
    #[error("no free slot")]
    Full,
    /// The predicate thread is inserting nulls for a moment: retry.
    #[error("the subgroup is adding nulls; retry")]
    Busy,
    /// The subgroup is wedged for a view change: no more sends in this view.
    #[error("the subgroup is wedged")]
    Wedged,
    /// The sender's ring or arena reached pages the host's shared memory has no
    /// room for (a full `/dev/shm`; see `send::reserve`): nothing was sent. Free
    /// room there and send again.
    #[error("{0}")]
    NoRoom(spindle_sst::region::ReserveError),
}

/// What [`SmcCore::take_deliverable`] hands out; give it back to [`SmcCore::finish`].
#[derive(Debug)]
pub struct Deliverable {
    /// The messages to hand to the application, in order.
    pub batch: Batch,
    /// Per sender: indices delivered (or skipped as null) once this batch is done.
    upto: Vec<u64>,
    next_seq: u64,
}

/// One node's state in one subgroup (see the module docs).
#[derive(Debug)]
pub struct SmcCore {
    #[cfg(any(test, loom))]
    faults: Faults,
    spec: SubgroupSpec,
    lay: SmcLayout,
    row: Arc<LocalRow>,
    table: Arc<Table>,
    /// Sender rank -> member rank (row).
    sender_row: Vec<usize>,
    me_sender: Option<usize>,
    // Sender side.
    /// Shared with sender threads (see [`send`]); `None` for a non-sender.
    send: Option<Arc<SendState>>,
    /// Entries taken in, in ring order (messages published by senders, null runs).
    committed: u64,
    /// Committed large messages' entries not yet pushed (their payloads go first).
    large: VecDeque<u64>,
    /// Payload bytes after which a send stage stops taking large messages
    /// ([`LARGE_PUSH_BYTES`]; the simulator draws smaller ones).
    large_push: usize,
    pushed: u64,
    next_index: u64,
    null_target: u64,
    /// A null run found no room for its slot (said once; see `send::reserve`).
    null_no_room: bool,
    // Receiver side.
    seen: Vec<u64>,
    recv: Vec<u64>,
    pending: Vec<VecDeque<Entry>>,
    /// Per sender: its entry at `seen` lied (see [`SmcCore::take_refused`]).
    bad: Vec<bool>,
    /// Large payloads relayed (module `relay`), and per sender whether its entry at
    /// `seen` is a descriptor whose payload has not reached this node yet.
    relay: Option<relay::Relay>,
    held: Vec<bool>,
    refused: Vec<(NodeId, String)>,
    // Delivery.
    next_seq: u64,
    deliv: Vec<u64>,
    delivering: bool,
    /// The vector of the last batch handed out, kept for the next one.
    spare: Vec<MsgRef>,
    /// Vectors a delivery pass fills, kept for the next pass.
    scratch: deliver::Scratch,
    wedged: bool,
    stats: Stats,
}

impl SmcCore {
    /// The core of member `me`, over `row` (this node's row of a table laid out with
    /// [`SmcLayout::new`] for `spec`, over `spec.members`).
    ///
    /// Panics if `spec` is invalid or the table does not match it (a programming error:
    /// the driver builds both from the same spec).
    pub fn new(spec: SubgroupSpec, row: LocalRow) -> SmcCore {
        spec.validate().expect("valid subgroup spec");
        let lay = SmcLayout::new(&spec);
        let table = row.table().clone();
        assert_eq!(table.members(), &spec.members[..], "table rows must be the subgroup members");
        assert_eq!(table.layout().row_bytes(), lay.table.row_bytes(), "table must use the subgroup layout");
        let me = table.members()[table.my_rank()];
        let sender_row: Vec<usize> =
            spec.senders.iter().map(|s| spec.member_rank(*s).expect("sender is a member")).collect();
        let s = spec.senders.len();
        let row = Arc::new(row);
        let send = spec.sender_rank(me).map(|r| {
            Arc::new(SendState::new(
                row.clone(),
                lay.slots,
                lay.slot_bytes,
                spec.window,
                spec.max_msg,
                lay.arena,
                lay.delivered,
                r,
            ))
        });
        let relay = relay::Relay::new(&lay, &table, &sender_row);
        SmcCore {
            #[cfg(any(test, loom))]
            faults: Faults::default(),
            me_sender: spec.sender_rank(me),
            lay,
            row,
            table,
            sender_row,
            send,
            committed: 0,
            large: VecDeque::new(),
            large_push: LARGE_PUSH_BYTES,
            pushed: 0,
            next_index: 0,
            null_target: 0,
            null_no_room: false,
            seen: vec![0; s],
            recv: vec![0; s],
            pending: (0..s).map(|_| VecDeque::new()).collect(),
            bad: vec![false; s],
            relay,
            held: vec![false; s],
            refused: Vec::new(),
            next_seq: 0,
            deliv: vec![0; s],
            delivering: false,
            spare: Vec::new(),
            scratch: deliver::Scratch::default(),
            wedged: false,
            stats: Stats::default(),
            spec,
        }
    }

    /// The subgroup's spec.
    pub fn spec(&self) -> &SubgroupSpec {
        &self.spec
    }
    /// This node's sender rank, if it sends.
    pub fn sender_rank(&self) -> Option<usize> {
        self.me_sender
    }
    /// Counters so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// The table (all members' rows).
    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    // ------------------------------------------------------------------ sending

    /// A handle that reserves slots without this core's lock (senders only).
    pub fn sender(&self) -> Option<Sender> {
        self.send.clone().map(Sender)
    }

    /// Reserves the next slot for a message of `len` bytes (after taking in what was
    /// published); the same as [`Sender::try_reserve`].
    pub fn reserve(&mut self, len: usize) -> Result<Reservation, SendError> {
        self.absorb();
        match &self.send {
            Some(s) => SendState::try_reserve(s, len),
            None => Err(SendError::NotSender),
        }
    }

    /// Publishes a reserved message and takes it in: it goes out at the next send
    /// stage. (Equivalent to [`Reservation::publish`] followed by the next pass.)
    pub fn commit(&mut self, r: Reservation) {
        r.publish();
        self.absorb();
    }

    /// Gives a reservation back unused (its index becomes a null).
    pub fn abandon(&mut self, r: Reservation) {
        r.abandon();
        self.absorb();
    }

    /// Takes in, in ring order, the entries senders have published.
    fn absorb(&mut self) -> bool {
        let Some(s) = &self.send else { return false };
        let start = self.committed;
        let slots = s.slots_area();
        let mut slot = s.slot_of(self.committed);
        while let Some((w0, first)) = s.published_at(&slots, self.committed, slot) {
            let (end, is_message) = send::entry_span(w0, first);
            debug_assert_eq!(first, self.next_index, "a lease gives consecutive indices");
            self.next_index = end;
            s.set_end(slot, end);
            if is_large(w0) {
                self.large.push_back(self.committed);
            }
            self.committed += 1;
            if is_message {
                self.stats.messages_sent += pack_count(w0).max(1);
            }
            slot = s.next_slot(slot);
        }
        if self.committed == start {
            return false;
        }
        // Once for the run: a sender that reads a lower count only waits longer for
        // a free slot.
        s.set_absorbed(self.committed);
        true
    }

    /// True if a sender published an entry not yet taken in.
    fn publish_pending(&self) -> bool {
        self.send.as_ref().is_some_and(|s| s.publish_pending(self.committed))
    }

    fn write_header(&self, slot: usize, kind: u64, len: u64, index: u64) {
        store_header(&self.row, self.lay.slots, slot * self.lay.slot_bytes / 8, kind, len, index);
    }

    /// Send stage: pushes committed entries (data first) and then `sent`.
    fn send_stage(&mut self, pushes: &mut Pushes) -> bool {
        if self.pushed == self.committed {
            return false;
        }
        let w = self.spec.window as u64;
        let (from, mut to) = (self.pushed, self.committed);
        // Large payloads first, so they have landed when a descriptor is seen.
        let copies = !self.table.reads_in_place(self.lay.arena);
        let mut bytes = 0;
        while let Some(&e) = self.large.front().filter(|e| **e < to) {
            if copies && bytes >= self.large_push {
                to = e; // this entry and those after it go in the next pass
                break;
            }
            self.large.pop_front();
            if let (true, Some((at, len))) = (copies, self.own_large(e)) {
                bytes += len;
                // Arena room is given back only once every member delivered the
                // message, so these bytes stay as they are until every target has them.
                let range = self.lay.arena.sub_range(at, len);
                let push = match &self.relay {
                    Some(x) => self.row.push_to(range, 1 << x.first()),
                    None => self.row.push(range),
                };
                pushes.push(push.stable());
            }
        }
        // Where peers read the slots in place, `sent` alone publishes them.
        let mut at = if self.table.reads_in_place(self.lay.slots) { to } else { from };
        while at < to {
            let slot = (at % w) as usize;
            let n = ((to - at).min(w - slot as u64)) as usize;
            let last = slot + n - 1;
            let last_len = self.entry_payload_len(last);
            // A slot is written again only once every member delivered its entry.
            pushes.push(self.row.push(self.lay.slots_range(slot, n, last_len)).stable());
            at += n as u64;
        }
        self.row.advance(self.lay.sent, to).expect("sent only grows");
        pushes.push(self.row.push(self.lay.sent.range()));
        self.pushed = to;
        self.stats.send_batches.record(to - from);
        true
    }

    /// Payload bytes of the entry in `slot` of this node's ring (0 for a null run).
    fn entry_payload_len(&self, slot: usize) -> usize {
        slot_payload(self.table.word(self.table.my_rank(), self.lay.slots, slot * self.lay.slot_bytes / 8))
    }

    /// Entry `e` of this node's ring, if a large message: its arena offset and length.
    fn own_large(&self, e: u64) -> Option<(usize, usize)> {
        let me = self.table.my_rank();
        let base = (e % self.spec.window as u64) as usize * self.lay.slot_bytes / 8;
        let w0 = self.table.word(me, self.lay.slots, base);
        is_large(w0).then(|| (self.table.word(me, self.lay.slots, base + 2) as usize, (w0 >> 32) as usize))
    }

    // ------------------------------------------------------------------ delivery

    /// Receive and send stages of one pass (delivery is separate so that the driver
    /// can run the upcall without its lock). Returns true if anything happened.
    pub fn poll(&mut self, pushes: &mut Pushes) -> bool {
        self.poll_with(pushes, || {})
    }

    /// [`SmcCore::poll`], calling `mid_pass` after the first receive stage: the
    /// simulator lands peers' writes there, as a transport's receiving thread may
    /// while a pass runs (tcp's fallback receiver stands in for a stalled driver).
    pub(crate) fn poll_with(&mut self, pushes: &mut Pushes, mid_pass: impl FnOnce()) -> bool {
        self.absorb();
        if self.wedged {
            // Frozen for the view change: `received` must stay what the wedge push
            // published, so the ragged trim computed from it is a floor everywhere.
            return false;
        }
        let mut got = self.receive_stage(pushes);
        mid_pass();
        let nulls = self.add_nulls();
        let sent = self.send_stage(pushes);
        if sent {
            // This node's own entries just published count as received in the same
            // pass: `received` goes out right behind `sent`, so an ordered receiver
            // finds them stable at once instead of a pass of this node later.
            got |= self.take_own();
        }
        // What was passed on goes out once, behind every payload of this pass: a
        // push copies its range when posted, so a count queued before a payload
        // would announce it ahead of its bytes.
        if let Some(x) = &mut self.relay {
            x.publish(&self.row, pushes);
        }
        if got {
            pushes.push(self.row.push(self.lay.received.range()));
        }
        got || nulls || sent
    }

    /// True if a pass would find work: new entries, unsent commits, owed nulls that
    /// can go out, or stable messages to deliver. Cheap: reads a few table words.
    pub fn has_work(&self) -> bool {
        if self.wedged {
            return false;
        }
        if self.pushed != self.committed || self.publish_pending() {
            return true;
        }
        let s = self.spec.senders.len();
        for r in 0..s {
            if !self.bad[r] && self.table.counter(self.sender_row[r], self.lay.sent) > self.seen[r] {
                // An entry held for its relayed payload is work once the payload is in.
                let held =
                    self.held[r] && !self.relay.as_ref().is_some_and(|x| x.arrived(&self.table, r, self.seen[r]));
                if !held {
                    return true;
                }
            }
        }
        if let Some(snd) = &self.send {
            if self.next_index < self.null_target
                && snd.can_claim()
                && snd.revoke(self.committed, Revoke::Look).is_some()
            {
                return true;
            }
        }
        if self.delivering {
            return false;
        }
        match self.spec.mode {
            Mode::Unordered => self.pending.iter().zip(&self.deliv).any(|(p, d)| p.back().is_some_and(|e| e.end > *d)),
            Mode::Ordered => {
                let r = (self.next_seq % s as u64) as usize;
                let k = self.next_seq / s as u64;
                (0..self.table.rows()).all(|m| self.table.counter_at(m, self.lay.received, r) > k)
            }
        }
    }

    /// Sets deliberate protocol bugs (unit tests and loom models only).
    #[cfg(any(test, loom))]
    pub fn set_faults(&mut self, f: Faults) {
        self.faults = f;
        if let Some(s) = &self.send {
            s.reuse_early.store(f.reuse_early, spindle_sst::sync::atomic::Ordering::Relaxed);
            s.arena_early.store(f.arena_early, spindle_sst::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Sets the payload bytes after which a send stage stops (the simulator's
    /// scaled-down [`LARGE_PUSH_BYTES`]).
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn set_large_push(&mut self, bytes: usize) {
        self.large_push = bytes.max(1);
    }

    /// Entries this node has committed (messages and null runs).
    pub fn committed_entries(&self) -> u64 {
        self.committed
    }

    /// The index just past entry `e` of this node's ring; valid for the last `window`
    /// entries committed.
    pub fn entry_end(&self, e: u64) -> u64 {
        debug_assert!(e < self.committed && e + self.spec.window as u64 >= self.committed);
        self.send.as_ref().map_or(0, |s| s.end_of(e))
    }

    /// True if a sender waiting for a slot could reserve one now (raises the shared
    /// free-slot limit as a side effect).
    pub fn can_reserve(&self) -> bool {
        !self.wedged && self.send.as_ref().is_some_and(|s| s.can_claim())
    }
}
