//! The lock-free send side: sender threads claim slots without the core's lock.
//!
//! ```text
//!   sender threads                        predicate thread (holds the core)
//!   claim: CAS on `claim` (entry + 1) ─┐   absorb: entries published in order
//!   write the payload in place         │   add nulls: revoke the lease (CAS), write a
//!   publish: header, then              │     null run, grant a new lease
//!     published[slot] = entry + 1 ─────┘   push, deliver, extend `limit`
//! ```
//!
//! # The lease
//! Entries are numbered in ring order; both sender threads (messages) and the
//! predicate thread (null runs) take them. The `claim` word holds the next entry, a
//! lease generation and a *revoked* bit. While the lease stands, entry `e` carries
//! index `base_index + (e - base_entry)`, so a sender knows its index when it claims.
//! To add nulls, the predicate thread revokes the lease with a CAS that succeeds only
//! when every claimed entry has been published and absorbed; it writes the null run,
//! then grants a new lease (new bases, next generation, `Release`). A sender that
//! claimed between the predicate thread's look and its CAS makes the CAS fail, so an
//! entry is never taken twice. The generation keeps a sender from succeeding with
//! bases it read before a revoke and grant (ABA), unless 2^20 leases came between
//! its load and its CAS.
//!
//! # Free slots
//! Entry `e` may take slot `e % window` once every member delivered every index of
//! entry `e - window`. `limit` is the first entry not known to be free; any thread
//! raises it ([`SendState::extend_limit`]) from the absorbed entries' ends and the
//! members' `delivered` columns. A sender that finds no free slot tries to raise it
//! itself before it sleeps.
//!
//! # Publication
//! A sender writes the payload, then the header, then stores `entry + 1` in the
//! slot's `published` word (`Release`). The predicate thread takes entries in ring
//! order only, so a message published early waits for the ones claimed before it.
//! Dropping a reservation publishes it as a null run of one: its index is filled.
//!
//! # Large messages
//! A message longer than `max_msg` also takes room in the sender's arena (module
//! `arena`): the sender takes the arena's lock, places the payload, and claims its
//! entry while it holds it, so payloads are placed in index order. It writes the
//! payload into the arena and publishes a descriptor (kind, length, offset) in the
//! slot. With no room, it gets `Full` and waits like a sender facing a full window;
//! the bytes it needs are recorded so that the wake-up check asks for them.

use super::arena::Arena;
use super::{pack_word, parse_header, SendError, KIND_DATA, KIND_LARGE, KIND_NULL};
use crate::spec::HEADER;
use crossbeam_utils::CachePadded;
use spindle_sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spindle_sst::sync::{lock, Arc, Mutex};
use spindle_sst::{Bytes, CounterVec, LocalRow, RowArea};

const ENTRY_BITS: u32 = 43;
const ENTRY_MASK: u64 = (1 << ENTRY_BITS) - 1;
const REVOKED: u64 = 1 << ENTRY_BITS;
const GEN_SHIFT: u32 = ENTRY_BITS + 1;

/// How the predicate thread takes the lease back before it inserts nulls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Revoke {
    /// Only if no claim is outstanding, by a CAS that fails if a sender claims first.
    Cas,
    /// Look whether it could (no CAS). Alone, a look-then-act race (a fault).
    Look,
    /// Not at all (a fault: nulls over entries that senders hold).
    #[cfg_attr(not(any(test, loom)), allow(dead_code))]
    Blind,
}

fn claim_word(gen: u64, entry: u64) -> u64 {
    (gen << GEN_SHIFT) | (entry & ENTRY_MASK)
}

/// The send state shared by the core (predicate thread) and sender threads.
///
/// The words written often sit on cache lines of their own: `claim` (a sender's CAS
/// per message), `limit` and `floor` (raised once per batch of deliveries), and
/// `committed` (the predicate thread, once per pass). Sharing a line, every pass's
/// store made the sender's next claim miss.
#[derive(Debug)]
pub(crate) struct SendState {
    claim: CachePadded<AtomicU64>,
    base_entry: AtomicU64,
    base_index: AtomicU64,
    /// Slots reserved from 0 ([`reserve::ALL`] once all are; see `reserve`).
    ring_reserved: AtomicU64,
    limit: CachePadded<AtomicU64>,
    /// Entries absorbed by the core (published copy of its `committed`).
    committed: CachePadded<AtomicU64>,
    /// Per slot: the end index of the last entry absorbed into it.
    ends: Box<[AtomicU64]>,
    /// A lower bound of every member's `delivered` count for this sender: `delivered`
    /// only grows, so the columns (peers' memory, cache misses) are read again only
    /// when the bound is not enough.
    floor: CachePadded<AtomicU64>,
    /// Per slot: `entry + 1` once a sender published entry `entry` there, with
    /// [`pack::OPEN`] while more messages may join its pack and [`pack::WRITING`]
    /// while one does.
    published: Box<[AtomicU64]>,
    /// Per slot: an open pack's messages (high half) and bytes (low half), written
    /// only by the thread that holds the entry (its claimer, or an appender while
    /// `WRITING`).
    fills: Box<[AtomicU64]>,
    /// Whether small messages are packed (see [`pack`]).
    pack: AtomicBool,
    wedged: AtomicBool,
    #[cfg(any(test, loom))]
    pub(crate) reuse_early: AtomicBool,
    /// The arena's allocator (large messages; see the module docs).
    arena: Mutex<Arena>,
    /// Bytes a sender waiting for arena room needs (0: none waits for the arena).
    arena_wait: AtomicU64,
    #[cfg(any(test, loom))]
    pub(crate) arena_early: AtomicBool,
    area: Bytes,
    row: Arc<LocalRow>,
    slots: Bytes,
    slot_bytes: usize,
    /// The ring's slots (`window`), and `e % window` by a multiply (see [`Modulo`]).
    ring: Modulo,
    max_msg: usize,
    delivered: CounterVec,
    sender: usize,
}

impl SendState {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        row: Arc<LocalRow>,
        slots: Bytes,
        slot_bytes: usize,
        window: usize,
        max_msg: usize,
        arena: Bytes,
        delivered: CounterVec,
        sender: usize,
    ) -> SendState {
        let words = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>().into_boxed_slice();
        SendState {
            claim: CachePadded::new(AtomicU64::new(0)),
            base_entry: AtomicU64::new(0),
            base_index: AtomicU64::new(0),
            ring_reserved: AtomicU64::new(0),
            limit: CachePadded::new(AtomicU64::new(window as u64)),
            committed: CachePadded::new(AtomicU64::new(0)),
            ends: words(window),
            floor: CachePadded::new(AtomicU64::new(0)),
            published: words(window),
            fills: words(window),
            pack: AtomicBool::new(false),
            wedged: AtomicBool::new(false),
            #[cfg(any(test, loom))]
            reuse_early: AtomicBool::new(false),
            arena: Mutex::new(Arena::new(arena.len())),
            arena_wait: AtomicU64::new(0),
            #[cfg(any(test, loom))]
            arena_early: AtomicBool::new(false),
            area: arena,
            row,
            slots,
            slot_bytes,
            ring: Modulo::new(window as u64),
            max_msg,
            delivered,
            sender,
        }
    }

    /// Claims the next entry for a `len`-byte message, if a slot is free and the
    /// lease stands. Lock-free: the loop repeats only when another thread claimed.
    pub(crate) fn try_reserve(this: &Arc<Self>, len: usize) -> Result<Reservation, SendError> {
        Ok(Reservation { claim: this.claim_slot(len)?, state: this.clone() })
    }

    /// [`SendState::try_reserve`] without a handle on the state: the caller keeps
    /// one (the runtime's send slot borrows its subgroup), so a send takes no
    /// reference count.
    #[inline]
    pub(crate) fn claim_slot(&self, len: usize) -> Result<Claim, SendError> {
        if len > self.max_msg {
            return self.claim_large(len);
        }
        let packs = self.packs(len);
        if packs {
            if let Some(c) = self.try_append(len) {
                return Ok(c);
            }
        }
        loop {
            let (entry, index) = match self.try_claim()? {
                Some(c) => c,
                None => continue,
            };
            let slot = self.slot_of(entry);
            let at = slot * self.slot_bytes + HEADER;
            return Ok(match packs {
                true => Claim { payload_at: at + 8, pack: 0, ..Claim::new(entry, index, slot, len) },
                false => Claim { payload_at: at, ..Claim::new(entry, index, slot, len) },
            });
        }
    }

    /// One attempt to claim the next entry: `Ok(None)` if another thread claimed it
    /// first (try again), else its entry and index.
    fn try_claim(&self) -> Result<Option<(u64, u64)>, SendError> {
        let c = self.claim.load(Ordering::Acquire);
        if c & REVOKED != 0 {
            return Err(if self.wedged.load(Ordering::Acquire) { SendError::Wedged } else { SendError::Busy });
        }
        let entry = c & ENTRY_MASK;
        if entry >= self.limit.load(Ordering::Acquire) && !self.extend_limit() {
            return Err(SendError::Full);
        }
        self.ensure_reserved(entry)?;
        let (be, bi) = (self.base_entry.load(Ordering::Relaxed), self.base_index.load(Ordering::Relaxed));
        Ok(self
            .claim
            .compare_exchange(c, c + 1, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| (entry, bi + (entry - be))))
    }

    /// [`SendState::claim_slot`] for a message larger than a slot: room in the
    /// arena and an entry, claimed under the arena's lock (see the module docs).
    fn claim_large(&self, len: usize) -> Result<Claim, SendError> {
        if len > self.area.len() {
            return Err(SendError::TooLarge { len, max: self.max_msg.max(self.area.len()) });
        }
        let mut arena = lock(&self.arena);
        let place = arena.place(len);
        if !arena.fits(place) {
            self.reclaim(&mut arena);
            if !arena.fits(place) {
                self.arena_wait.store(len as u64, Ordering::Release);
                return Err(SendError::Full);
            }
        }
        self.reserve_arena(&mut arena, place)?;
        loop {
            if let Some((entry, index)) = self.try_claim()? {
                arena.take(place, index);
                self.arena_wait.store(0, Ordering::Release);
                let slot = self.slot_of(entry);
                return Ok(Claim { payload_at: place.offset, large: true, ..Claim::new(entry, index, slot, len) });
            }
        }
    }

    /// Gives back the arena room of messages delivered everywhere.
    fn reclaim(&self, arena: &mut Arena) {
        #[cfg(any(test, loom))]
        if self.arena_early.load(Ordering::Relaxed) {
            return arena.reclaim_all();
        }
        let floor = self.raise_floor(self.delivered_floor());
        arena.reclaim(floor);
    }

    /// True unless a sender waits for arena room that is still taken. Never blocks:
    /// while another thread holds the arena it answers yes (look again).
    fn arena_room(&self) -> bool {
        let want = self.arena_wait.load(Ordering::Acquire) as usize;
        if want == 0 {
            return true;
        }
        let Ok(mut arena) = self.arena.try_lock() else { return true };
        let place = arena.place(want);
        if !arena.fits(place) {
            self.reclaim(&mut arena);
        }
        arena.fits(place)
    }

    /// Raises `limit` as far as the absorbed entries and the members' `delivered`
    /// columns allow; true if the next unclaimed entry is free now.
    pub(crate) fn extend_limit(&self) -> bool {
        let w = self.ring.divisor();
        let start = self.limit.load(Ordering::Acquire);
        let committed = self.committed.load(Ordering::Acquire);
        let cap = committed + w;
        let mut l = start;
        #[cfg(any(test, loom))]
        if self.reuse_early.load(Ordering::Relaxed) {
            l = l.max(cap);
        }
        // The first `window` entries reuse no slot.
        l = l.max(w.min(cap));
        if l < cap {
            // Acquire/AcqRel: a thread that uses the cached floor is ordered after
            // the members' `delivered` writes the thread that cached it acquired.
            let floor = self.floor.load(Ordering::Acquire);
            l = first_busy(&self.ends, l, cap, floor);
            if l < cap {
                // The cached floor is not enough: read the columns, once.
                let floor = self.raise_floor(self.delivered_floor());
                l = first_busy(&self.ends, l, cap, floor);
            }
        }
        let limit = if l > start { self.limit.fetch_max(l, Ordering::AcqRel).max(l) } else { start };
        (self.claim.load(Ordering::Acquire) & ENTRY_MASK) < limit
    }

    /// Raises the cached floor to `fresh` (a floor just read from the columns);
    /// returns the floor. The read-modify-write is made only when the floor grows:
    /// while the window is full a pass reads the columns again and again without
    /// anything newly delivered, and a locked write on every read took a fifth of
    /// the predicate thread's time on the line the senders read.
    fn raise_floor(&self, fresh: u64) -> u64 {
        let seen = self.floor.load(Ordering::Acquire);
        if fresh <= seen {
            return seen;
        }
        self.floor.fetch_max(fresh, Ordering::AcqRel).max(fresh)
    }

    /// The least `delivered` count of this sender over all members.
    fn delivered_floor(&self) -> u64 {
        let t = self.row.table();
        (0..t.rows()).map(|m| t.counter_at(m, self.delivered, self.sender)).min().unwrap_or(0)
    }

    /// The entry a sender would claim next and whether the lease is revoked.
    fn next_claim(&self) -> (u64, bool) {
        let c = self.claim.load(Ordering::Acquire);
        (c & ENTRY_MASK, c & REVOKED != 0)
    }

    // ------------------------------------------------------------ predicate thread

    /// This node's ring slots, for [`SendState::published_at`].
    pub(crate) fn slots_area(&self) -> RowArea<'_> {
        let t = self.row.table();
        t.area(t.my_rank(), self.slots)
    }

    /// The slot of entry `e`.
    #[inline]
    pub(crate) fn slot_of(&self, e: u64) -> usize {
        self.ring.rem(e) as usize
    }

    /// The slot after `slot`, around the ring.
    #[inline]
    pub(crate) fn next_slot(&self, slot: usize) -> usize {
        if slot as u64 + 1 == self.ring.divisor() {
            0
        } else {
            slot + 1
        }
    }

    /// Entry `committed`, in `slot` ([`SendState::slot_of`]), if a sender published
    /// it: (header word 0, first index). `slots` is [`SendState::slots_area`].
    #[inline]
    pub(crate) fn published_at(&self, slots: &RowArea<'_>, committed: u64, slot: usize) -> Option<(u64, u64)> {
        let w = self.published[slot].load(Ordering::Acquire);
        // An open pack is closed first; anything else (not yet published, or a
        // sender joining its pack) waits for the next pass, with no write here.
        if w != committed + 1 && (w != (committed + 1) | pack::OPEN || !self.close(slot, w)) {
            return None;
        }
        let base = slot * self.slot_bytes / 8;
        Some((slots.word(base), slots.word(base + 1)))
    }

    /// Records the end index of the entry absorbed into `slot`; the caller publishes
    /// the count of absorbed entries with [`SendState::set_absorbed`] after a run of
    /// them.
    #[inline]
    pub(crate) fn set_end(&self, slot: usize, end: u64) {
        self.ends[slot].store(end, Ordering::Release);
    }

    /// Publishes that entries below `n` are absorbed.
    #[inline]
    pub(crate) fn set_absorbed(&self, n: u64) {
        self.committed.store(n, Ordering::Release);
    }

    /// The end index of absorbed entry `e` (valid for the last `window` absorbed).
    pub(crate) fn end_of(&self, e: u64) -> u64 {
        self.ends[self.slot_of(e)].load(Ordering::Acquire)
    }

    /// Revokes the lease if every claimed entry is absorbed (`committed`); returns the
    /// generation to grant the next lease with. [`Revoke::Look`] only looks (for
    /// `has_work`, or a deliberately racy variant).
    pub(crate) fn revoke(&self, committed: u64, how: Revoke) -> Option<u64> {
        let c = self.claim.load(Ordering::Acquire);
        match how {
            Revoke::Blind => return Some(c >> GEN_SHIFT),
            _ if c & REVOKED != 0 || c & ENTRY_MASK != committed => return None,
            Revoke::Look => return Some(c >> GEN_SHIFT),
            Revoke::Cas => {}
        }
        self.claim.compare_exchange(c, c | REVOKED, Ordering::AcqRel, Ordering::Acquire).ok().map(|c| c >> GEN_SHIFT)
    }

    /// Grants a new lease from entry `entry` at index `index`.
    pub(crate) fn grant(&self, gen: u64, entry: u64, index: u64) {
        self.base_entry.store(entry, Ordering::Relaxed);
        self.base_index.store(index, Ordering::Relaxed);
        self.claim.store(claim_word(gen.wrapping_add(1), entry), Ordering::Release);
    }

    /// Revokes the lease for good: no more claims in this view.
    pub(crate) fn wedge(&self) {
        self.wedged.store(true, Ordering::Release);
        self.claim.fetch_or(REVOKED, Ordering::AcqRel);
    }

    /// How many entries senders claimed (published or not).
    pub(crate) fn claimed(&self) -> u64 {
        self.next_claim().0
    }

    /// True if a sender could claim now (lease standing, slot free).
    pub(crate) fn can_claim(&self) -> bool {
        let (entry, revoked) = self.next_claim();
        !revoked && (entry < self.limit.load(Ordering::Acquire) || self.extend_limit()) && self.arena_room()
    }

    /// True if the next unabsorbed entry is published.
    pub(crate) fn publish_pending(&self, committed: u64) -> bool {
        let w = self.published[self.slot_of(committed)].load(Ordering::Acquire);
        w & !pack::OPEN == committed + 1
    }
}

/// A slot claimed for a message: write the payload in place (no lock is needed), then
/// [`Reservation::publish`] it (or [`crate::SmcCore::commit`] it). Dropping it
/// unpublished fills its index with a null.
#[derive(Debug)]
#[must_use = "a reservation holds up every later send until it is published"]
pub struct Reservation {
    claim: Claim,
    state: Arc<SendState>,
}

impl PartialEq for Reservation {
    fn eq(&self, o: &Reservation) -> bool {
        self.claim == o.claim
    }
}

impl Reservation {
    /// Writes `data` at byte `at` (a multiple of 8) of the payload, straight into the
    /// slot (or the arena, for a large message).
    pub fn write(&self, at: usize, data: &[u8]) {
        self.claim.write(&self.state, at, data)
    }

    /// Stores payload word `i` (bytes `8i..8i+8`, little-endian), straight into the slot.
    #[inline]
    pub fn write_word(&self, i: usize, value: u64) {
        self.claim.write_word(&self.state, i, value)
    }

    /// Stores payload words `i..i + values.len()`, straight into the slot.
    #[inline]
    pub fn write_words(&self, i: usize, values: &[u64]) {
        self.claim.write_words(&self.state, i, values)
    }

    /// Publishes the message without any lock: writes its header, then marks the
    /// entry published (`Release`); the predicate thread takes it in at its next pass,
    /// after every entry claimed before it. Returns the message's index.
    #[inline]
    pub fn publish(self) -> u64 {
        self.claim.publish(&self.state)
    }

    /// Gives the slot back: publishes it as a null run of one (its index is skipped;
    /// a large message's arena room comes back once that index is delivered).
    pub fn abandon(self) {
        self.claim.abandon(&self.state)
    }

    /// The message's index among this sender's messages.
    pub fn index(&self) -> u64 {
        self.claim.index
    }
    /// The reserved payload length.
    pub fn len(&self) -> usize {
        self.claim.len as usize
    }
    /// True for a zero-length reservation.
    pub fn is_empty(&self) -> bool {
        self.claim.len == 0
    }
    /// True if the payload goes into the arena (longer than a slot's `max_msg`).
    pub fn is_large(&self) -> bool {
        self.claim.large
    }
}

/// Decodes an absorbed entry's header: its end index, and whether it is a message.
pub(crate) fn entry_span(w0: u64, first: u64) -> (u64, bool) {
    let (data, count) = parse_header(w0);
    (first + count, data.is_some())
}

mod claim;
mod free;
mod handle;
mod modulo;
pub(crate) use claim::Claim;
use free::first_busy;
use modulo::Modulo;
mod pack;
mod reserve;
pub use handle::Sender;
#[cfg(test)]
mod tests;
