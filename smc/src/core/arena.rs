//! A sender's arena: the space its large messages' payloads take, handed out in
//! message order and given back once every member has delivered the message.
//!
//! ```text
//!   position (monotonic bytes)   tail ────── live payloads ────── head
//!   arena offset                 position % size; a payload never wraps: one that
//!                                would is placed at offset 0 and the bytes skipped
//!                                are freed with it
//! ```
//!
//! Payloads are placed in the order their messages take indices (a sender holds the
//! allocator's lock while it claims its entry), so they are freed in that order too:
//! the oldest live payload goes as soon as every member's `delivered` count of this
//! sender passes its index. This is the slot ring's reuse rule, applied to bytes: a
//! payload is read in place until its message is delivered everywhere, so its bytes
//! are not written again before then. A sender that finds no room waits (back-pressure),
//! as for a full window; nothing is dropped.

use std::collections::VecDeque;

/// The allocator of one sender's arena (see the module docs).
#[derive(Debug)]
pub(crate) struct Arena {
    size: u64,
    /// Bytes handed out so far (skipped ends of the arena included).
    head: u64,
    /// Bytes given back so far.
    tail: u64,
    /// Live payloads, oldest first: (message index, position just past it).
    live: VecDeque<(u64, u64)>,
    /// Arena bytes from offset 0 whose memory is reserved (see [`Arena::to_reserve`]).
    reserved: u64,
}

/// Bytes reserved ahead of a payload that reaches past the reserved part, so that
/// a run of small large messages asks the kernel once per this many bytes.
const RESERVE_AHEAD: u64 = 4 << 20;

/// Where a payload would go: its offset in the arena and the head after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) offset: usize,
    start: u64,
    end: u64,
}

impl Arena {
    pub(crate) fn new(size: usize) -> Arena {
        Arena { size: size as u64, head: 0, tail: 0, live: VecDeque::new(), reserved: 0 }
    }

    /// The arena range (offset, bytes) to reserve before `p` is written, if `p`
    /// reaches past what is reserved: payloads are placed from offset 0 up before
    /// the arena wraps, so the reserved part grows from 0 to the whole arena over
    /// the first pass and is never asked for again. Reserving as payloads reach it,
    /// and not the whole arena at setup, keeps an arena far larger than a run uses
    /// from costing its full size.
    pub(crate) fn to_reserve(&self, p: Place) -> Option<(usize, usize)> {
        let end = p.offset as u64 + (p.end - p.start);
        (end > self.reserved).then(|| {
            let upto = (end + RESERVE_AHEAD).min(self.size);
            (self.reserved as usize, (upto - self.reserved) as usize)
        })
    }

    /// Notes that the range [`Arena::to_reserve`] named is reserved.
    pub(crate) fn reserved(&mut self, (at, len): (usize, usize)) {
        self.reserved = self.reserved.max((at + len) as u64);
    }

    /// Where a `len`-byte payload goes next (whole words, never across the end).
    /// `len` must be at most the arena's size.
    pub(crate) fn place(&self, len: usize) -> Place {
        let len = len.div_ceil(8) as u64 * 8;
        debug_assert!(len <= self.size);
        let at = self.head % self.size;
        let start = if at + len > self.size { self.head + (self.size - at) } else { self.head };
        Place { offset: (start % self.size) as usize, start, end: start + len }
    }

    /// True if `p` overlaps no live payload.
    pub(crate) fn fits(&self, p: Place) -> bool {
        // Live payloads lie in [tail, head) and `p` starts at or after head, so it
        // overlaps one only if it reaches around to tail. With none live, any place fits.
        let from = if self.live.is_empty() { p.start } else { self.tail };
        p.end - from <= self.size
    }

    /// Gives back the payloads of messages with index below `floor` (every member's
    /// least `delivered` count of this sender).
    pub(crate) fn reclaim(&mut self, floor: u64) {
        while let Some(&(index, end)) = self.live.front() {
            if index >= floor {
                break;
            }
            self.tail = end;
            self.live.pop_front();
        }
    }

    /// Gives back every payload without looking at deliveries (a deliberate bug, for
    /// the tests that show it is caught).
    #[cfg(any(test, loom))]
    pub(crate) fn reclaim_all(&mut self) {
        self.tail = self.head;
        self.live.clear();
    }

    /// Takes `p` for the message of index `index`.
    pub(crate) fn take(&mut self, p: Place, index: u64) {
        if self.live.is_empty() {
            self.tail = p.start;
        }
        self.head = p.end;
        self.live.push_back((index, p.end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_placed_in_order_never_wrap_and_come_back_once_delivered() {
        let mut a = Arena::new(64);
        let p = a.place(20);
        assert_eq!(p.offset, 0);
        assert!(a.fits(p));
        a.take(p, 0);
        let q = a.place(24);
        assert_eq!(q.offset, 24, "whole words");
        a.take(q, 1);
        // 48 bytes used; 24 more would cross the end: placed at 0, over message 0.
        let r = a.place(24);
        assert_eq!(r.offset, 0);
        assert!(!a.fits(r), "message 0 is still live");
        a.reclaim(0);
        assert!(!a.fits(r), "index 0 not delivered everywhere yet");
        a.reclaim(1);
        assert!(a.fits(r), "message 0 delivered everywhere: its bytes and the skipped end are free");
        a.take(r, 2);
        assert!(!a.fits(a.place(24)), "message 1 at 24..48 is still live");
        a.reclaim(3);
        assert!(a.fits(a.place(64)), "everything delivered: the whole arena is free");
    }

    #[test]
    fn the_reserved_part_grows_ahead_of_the_payloads_and_is_asked_for_once() {
        let size = 3 * RESERVE_AHEAD;
        let mut a = Arena::new(size as usize);
        let p = a.place(100);
        let first = a.to_reserve(p).expect("nothing is reserved yet");
        assert_eq!(first, (0, (104 + RESERVE_AHEAD) as usize), "the payload in whole words, and the bytes ahead");
        a.reserved(first);
        a.take(p, 0);
        // Payloads inside what is reserved ask for nothing.
        let q = a.place(RESERVE_AHEAD as usize);
        assert_eq!(a.to_reserve(q), None);
        a.take(q, 1);
        // One that reaches past it asks for the rest from where the reserved part ends.
        let r = a.place(1000);
        let (at, len) = a.to_reserve(r).expect("past the reserved part");
        assert_eq!(at, first.1);
        assert_eq!(at + len, (r.offset as u64 + 1000 + RESERVE_AHEAD) as usize);
        a.reserved((at, len));
        a.take(r, 2);
        // Up to the arena's end and no further; after that, never again.
        let s = a.place((size - r.end) as usize);
        let (at, len) = a.to_reserve(s).expect("the rest of the arena");
        assert_eq!(at + len, size as usize);
        a.reserved((at, len));
        a.take(s, 3);
        a.reclaim(4);
        let wrapped = a.place(64);
        assert_eq!(wrapped.offset, 0);
        assert_eq!(a.to_reserve(wrapped), None, "the whole arena is reserved");
    }

    #[test]
    fn a_payload_of_the_whole_arena_waits_for_every_other_one() {
        let mut a = Arena::new(32);
        let p = a.place(8);
        a.take(p, 5);
        let all = a.place(32);
        assert_eq!(all.offset, 0);
        assert!(!a.fits(all));
        a.reclaim(6);
        assert!(a.fits(all));
    }
}
