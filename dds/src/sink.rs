//! The sample bytes as delivery hands them over ([`Src`]): in their slot, or in a
//! buffer. The reader side that delivery feeds is `crate::queue`.

use crate::sample::HEADER;

/// A sample's bytes (header and payload) as delivery hands them over: in their
/// slot, or in a buffer (history, catch-up).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Src<'a> {
    Slot(spindle_smc::Message<'a>),
    Bytes(&'a [u8]),
}

impl Src<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Src::Slot(m) => m.len(),
            Src::Bytes(b) => b.len(),
        }
    }
    pub(crate) fn word(&self, i: usize) -> u64 {
        match self {
            Src::Slot(m) => m.word(i),
            Src::Bytes(b) => u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("a whole word")),
        }
    }
    pub(crate) fn copy_all(self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        self.read_all(&mut v);
        v
    }
    /// Copies header and payload into `out`, which is as long as them.
    pub(crate) fn read_all(&self, out: &mut [u8]) {
        match self {
            Src::Slot(m) => m.read(out),
            Src::Bytes(b) => out.copy_from_slice(b),
        }
    }
    /// The header's length (a member's or a client's sample; see [`crate::sample`]).
    pub(crate) fn header_len(&self) -> usize {
        crate::sample::header_len(self.word(0))
    }
    /// The header's first word, if the bytes hold a whole header (checked before
    /// any other use; the word says how long the header is).
    pub(crate) fn first_word(&self) -> Option<u64> {
        let w0 = (self.len() >= HEADER).then(|| self.word(0))?;
        (self.len() >= crate::sample::header_len(w0)).then_some(w0)
    }
    /// True if the bytes hold a whole header.
    pub(crate) fn has_header(&self) -> bool {
        self.first_word().is_some()
    }
    /// Copies `out.len()` bytes from byte `at` (a multiple of 8) of the message.
    pub(crate) fn read_at(&self, at: usize, out: &mut [u8]) {
        match self {
            Src::Slot(m) => m.read_at(at, out),
            Src::Bytes(b) => out.copy_from_slice(&b[at..at + out.len()]),
        }
    }
}
