//! The sample bytes as delivery hands them over ([`Src`]): in their slot, or in a
//! buffer. The reader side that delivery feeds is `crate::queue`.

use crate::sample::{CLIENT_HEADER, HEADER};

/// A sample's header as words: two for a member's sample, four for a client's (see
/// [`crate::sample`]); a member's leaves the last two 0.
pub(crate) type HeaderWords = [u64; CLIENT_HEADER / 8];

/// A sample's bytes (header and payload) as delivery hands them over: in their
/// slot, or in a buffer (history, catch-up).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Src<'a> {
    /// In its slot: the message, and where the sample starts in it (a multiple of
    /// 8) and how long it is (a pack holds several; see [`crate::sample`]).
    Slot(spindle_smc::Message<'a>, usize, usize),
    Bytes(&'a [u8]),
}

impl<'a> Src<'a> {
    /// A whole message in its slot.
    pub(crate) fn slot(m: spindle_smc::Message<'a>) -> Src<'a> {
        Src::Slot(m, 0, m.len())
    }
    /// `len` bytes from byte `at` (a multiple of 8), which the caller checked are
    /// within these.
    pub(crate) fn part(&self, at: usize, len: usize) -> Src<'a> {
        debug_assert!(at % 8 == 0 && at + len <= self.len());
        match *self {
            Src::Slot(m, start, _) => Src::Slot(m, start + at, len),
            Src::Bytes(b) => Src::Bytes(&b[at..at + len]),
        }
    }
    pub(crate) fn len(&self) -> usize {
        match self {
            Src::Slot(_, _, len) => *len,
            Src::Bytes(b) => b.len(),
        }
    }
    pub(crate) fn word(&self, i: usize) -> u64 {
        match self {
            Src::Slot(m, at, _) => m.word(at / 8 + i),
            Src::Bytes(b) => u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("a whole word")),
        }
    }
    /// Words `first..first + out.len()`: in a slot, its memory found once.
    fn words(&self, first: usize, out: &mut [u64]) {
        match self {
            Src::Slot(m, at, _) => m.words(at / 8 + first, out),
            Src::Bytes(_) => out.iter_mut().enumerate().for_each(|(i, w)| *w = self.word(first + i)),
        }
    }
    /// The header, if the bytes hold a whole one (checked before any other use;
    /// the first word says how long it is).
    pub(crate) fn header(&self) -> Option<HeaderWords> {
        let mut h = [0; CLIENT_HEADER / 8];
        if self.len() < HEADER {
            return None;
        }
        self.words(0, &mut h[..HEADER / 8]);
        if crate::sample::header_len(h[0]) == CLIENT_HEADER {
            if self.len() < CLIENT_HEADER {
                return None;
            }
            self.words(HEADER / 8, &mut h[HEADER / 8..]);
        }
        Some(h)
    }
    pub(crate) fn copy_all(self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        self.read_all(&mut v);
        v
    }
    /// Copies header and payload into `out`, which is as long as them.
    pub(crate) fn read_all(&self, out: &mut [u8]) {
        match self {
            Src::Slot(m, at, _) => m.read_at(*at, out),
            Src::Bytes(b) => out.copy_from_slice(b),
        }
    }
    /// The header's length (a member's or a client's sample; see [`crate::sample`]).
    pub(crate) fn header_len(&self) -> usize {
        crate::sample::header_len(self.word(0))
    }
    /// True if the bytes hold a whole header.
    pub(crate) fn has_header(&self) -> bool {
        self.header().is_some()
    }
    /// Copies `out.len()` bytes from byte `at` (a multiple of 8) of the message.
    pub(crate) fn read_at(&self, at: usize, out: &mut [u8]) {
        match self {
            Src::Slot(m, start, _) => m.read_at(start + at, out),
            Src::Bytes(b) => out.copy_from_slice(&b[at..at + out.len()]),
        }
    }
}
