//! Sealed links: with a group secret every byte a link carries after setup travels in
//! records, each encrypted and authenticated by the link's [`LinkCipher`] for its
//! direction (supplied by the layer that holds the secret; sst does no cryptography):
//!
//! ```text
//!   record:  length u32 (little-endian, 1..=RECORD) | ciphertext (length bytes) | tag (16)
//! ```
//!
//! The length is sent in clear and bound to the tag. The frames of [`super::frame`]
//! are the plaintext. A sender seals each record in place in its send buffer (a
//! stable write's frame, from its region into a staging buffer) and
//! cuts records at frame boundaries (on a sealed link a write is split into frames
//! that fit a record, [`FRAME_DATA`]), so a receiver applies a record's frames where
//! it opened it, and copies only a frame a record cuts off (receiving is right
//! wherever records are cut; cutting them at frames only saves copies). A record
//! whose tag fails (a changed, dropped,
//! reordered, replayed or inserted record: the cipher's nonce is its sequence number
//! on the link) or whose length is out of range breaks the link before any of its
//! bytes reach a region.

use super::LinkCipher;

/// The most plaintext bytes in one record.
pub const RECORD: usize = 64 << 10;
/// Bytes of a record's tag.
pub const TAG: usize = 16;
/// Bytes of a record's length.
pub(super) const LEN: usize = 4;
/// The most records sealed from a large write's data that one send takes: several,
/// so that the socket cuts its segments from one run of bytes (a send of one full
/// record, its length and its tag made one full loopback segment and one of a few
/// bytes). Records of frame bytes go one per send: batching them measured no gain
/// at 1 KB messages.
const SEND_RECORDS: usize = 4;

/// The ciphers of a sealed link: `(sending, receiving)`.
pub type Ciphers = (Box<dyn LinkCipher>, Box<dyn LinkCipher>);

/// The most data bytes in one Write frame on a sealed link (whole words): a frame
/// and its header fit one record, so records can hold whole frames and a receiver
/// can apply them straight from the opened record.
pub const FRAME_DATA: usize = (RECORD - 4 - super::frame::WRITE_HEADER) & !7;

/// A link's sending cipher and the sealed bytes a send left unsent (they go
/// before anything else).
#[derive(Debug)]
pub(super) struct Sealing {
    cipher: Box<dyn LinkCipher>,
    /// Sealed records a non-blocking send left; `wire[at..]` is not sent yet.
    wire: Vec<u8>,
    at: usize,
    /// Bytes of a frame begun in an earlier send still to come (records are cut at
    /// frame boundaries where the frames allow).
    frame_left: usize,
    /// Records sealed from two pieces each ([`Sealing::seal_split`]), to be sent
    /// together; allocated at the first use, then reused.
    split: Vec<u8>,
    /// Bytes of `split` in use.
    split_len: usize,
}

impl Sealing {
    pub(super) fn new(cipher: Box<dyn LinkCipher>) -> Sealing {
        Sealing { cipher, wire: Vec::new(), at: 0, frame_left: 0, split: Vec::new(), split_len: 0 }
    }

    /// The length of the next record of `plain`: whole frames up to [`RECORD`]
    /// bytes, or a piece of a frame that does not fit one (or is cut by the end of
    /// `plain`).
    fn next_record(&mut self, plain: &[u8]) -> usize {
        let most = plain.len().min(RECORD);
        let mut at = self.frame_left.min(most);
        self.frame_left -= at;
        while self.frame_left == 0 && at < most {
            let Some(head) = plain.get(at..at + 4) else { break };
            let frame = 4 + u32::from_le_bytes(head.try_into().expect("4 bytes")) as usize;
            if at > 0 && at + frame > most {
                break; // the next record starts with this frame
            }
            let here = frame.min(most - at);
            at += here;
            self.frame_left = frame - here;
        }
        if at == 0 {
            // A frame header cut by the end of `plain` (callers send whole frames, so
            // this does not happen): the bytes go as they are. Where records are cut
            // matters to the receiver's speed only, never to what it applies.
            at = most;
        }
        at
    }

    /// Appends the first record of `plain` to `wire`, sealed; returns its length.
    pub(super) fn append_record(&mut self, plain: &[u8]) -> usize {
        let n = self.next_record(plain);
        let head = (n as u32).to_le_bytes();
        self.wire.extend_from_slice(&head);
        let body = self.wire.len();
        self.wire.extend_from_slice(&plain[..n]);
        let tag = self.cipher.seal(&head, &mut self.wire[body..]);
        self.wire.extend_from_slice(&tag);
        n
    }

    /// Seals the first record of `plain` in place; returns its length, header and tag.
    pub(super) fn seal_in_place(&mut self, plain: &mut [u8]) -> (usize, [u8; LEN], [u8; TAG]) {
        let n = self.next_record(plain);
        let head = (n as u32).to_le_bytes();
        let tag = self.cipher.seal(&head, &mut plain[..n]);
        (n, head, tag)
    }

    /// Seals one record whose plaintext is `first` then `second` (a write's frame
    /// header and its data where it lies), whole frames only, with neither copied
    /// first, after the records sealed this way and not yet taken
    /// ([`Sealing::take_split`]). False, sealing nothing, where
    /// [`SEND_RECORDS`] are waiting.
    pub(super) fn seal_split(&mut self, first: &[u8], second: &[u8]) -> bool {
        let n = first.len() + second.len();
        assert!(n > 0 && n <= RECORD && self.frame_left == 0, "a record of whole frames");
        if self.split.is_empty() {
            self.split.resize(SEND_RECORDS * (LEN + RECORD + TAG), 0);
        }
        let Some(out) = self.split.get_mut(self.split_len..self.split_len + LEN + n + TAG) else { return false };
        let head = (n as u32).to_le_bytes();
        out[..LEN].copy_from_slice(&head);
        self.cipher.seal_into(&head, first, second, &mut out[LEN..]);
        self.split_len += LEN + n + TAG;
        true
    }

    /// The records [`Sealing::seal_split`] sealed, as they go on the wire.
    pub(super) fn split(&self) -> &[u8] {
        &self.split[..self.split_len]
    }

    /// Takes the records [`Sealing::seal_split`] sealed, of which the first `sent`
    /// bytes went out: the rest is sent before anything else (nothing else may be
    /// pending).
    pub(super) fn take_split(&mut self, sent: usize) {
        if sent < self.split_len {
            let split = std::mem::take(&mut self.split);
            self.keep(&[&split[..self.split_len]], sent);
            self.split = split;
        }
        self.split_len = 0;
    }

    pub(super) fn pending(&self) -> bool {
        self.at < self.wire.len()
    }

    pub(super) fn sent(&mut self, n: usize) {
        self.at += n;
        if self.at == self.wire.len() {
            self.wire.clear();
            self.at = 0;
        }
    }

    /// The sealed bytes not sent yet.
    pub(super) fn unsent(&self) -> &[u8] {
        &self.wire[self.at..]
    }

    /// Keeps a sealed record whose first `sent` bytes went out: the rest is sent
    /// before anything else (nothing else may be pending).
    pub(super) fn keep(&mut self, parts: &[&[u8]], mut sent: usize) {
        debug_assert!(!self.pending());
        self.wire.clear();
        self.at = 0;
        for part in parts {
            let skip = sent.min(part.len());
            sent -= skip;
            self.wire.extend_from_slice(&part[skip..]);
        }
    }
}

/// Why received bytes could not be opened.
#[derive(Debug, thiserror::Error)]
pub(super) enum OpenError {
    /// A record's length is 0 or past [`RECORD`].
    #[error("a sealed record of {0} bytes")]
    Length(usize),
    /// A record's tag does not hold: changed, replayed, reordered or not sealed by the peer.
    #[error("a sealed record whose tag does not hold")]
    Tag,
}

/// The receiving side of a sealed link: sealed bytes read and not yet opened.
#[derive(Debug)]
pub(super) struct Opening {
    cipher: Box<dyn LinkCipher>,
    pub(super) buf: Vec<u8>,
    pub(super) start: usize,
    pub(super) end: usize,
}

impl Opening {
    pub(super) fn new(cipher: Box<dyn LinkCipher>) -> Opening {
        Opening { cipher, buf: vec![0; 4 * (LEN + RECORD + TAG)], start: 0, end: 0 }
    }

    /// Makes room at the end of the buffer (there is always room for one whole record).
    pub(super) fn make_room(&mut self) {
        if self.end == self.buf.len() || self.buf.len() - self.start < LEN + RECORD + TAG {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// The next complete record, opened: its plaintext, decrypted in place (valid
    /// until the next read into the buffer).
    pub(super) fn next(&mut self) -> Result<Option<&[u8]>, OpenError> {
        let have = &self.buf[self.start..self.end];
        let Some(head) = have.get(..LEN) else { return Ok(None) };
        let head: [u8; LEN] = head.try_into().expect("LEN bytes");
        let len = u32::from_le_bytes(head) as usize;
        if len == 0 || len > RECORD {
            return Err(OpenError::Length(len));
        }
        if have.len() < LEN + len + TAG {
            return Ok(None);
        }
        let body = self.start + LEN;
        let (body_bytes, tail) = self.buf[body..].split_at_mut(len);
        let tag: [u8; TAG] = tail[..TAG].try_into().expect("TAG bytes");
        if !self.cipher.open(&head, body_bytes, &tag) {
            return Err(OpenError::Tag);
        }
        self.start = body + len + TAG;
        if self.start == self.end {
            // Empty: the next read starts at the front (the plaintext stays in place
            // until then).
            (self.start, self.end) = (0, 0);
        }
        Ok(Some(&self.buf[body..body + len]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cipher that changes nothing, whose tags always hold (`Fixed(true)`) or never:
    /// only how records are cut and checked is looked at.
    #[derive(Debug)]
    struct Fixed(bool);
    impl LinkCipher for Fixed {
        fn seal(&mut self, _: &[u8], _: &mut [u8]) -> [u8; TAG] {
            [0; TAG]
        }
        fn open(&mut self, _: &[u8], _: &mut [u8], _: &[u8; TAG]) -> bool {
            self.0
        }
    }

    fn frames(sizes: &[usize]) -> Vec<u8> {
        sizes.iter().flat_map(|n| (*n as u32).to_le_bytes().into_iter().chain(std::iter::repeat(7).take(*n))).collect()
    }

    /// The record lengths `Sealing` cuts `plain` into, sent in pieces of `piece`.
    fn cuts(plain: &[u8], piece: usize) -> Vec<usize> {
        let mut s = Sealing::new(Box::new(Fixed(true)));
        let mut out = Vec::new();
        for p in plain.chunks(piece) {
            let mut at = 0;
            while at < p.len() {
                let n = s.next_record(&p[at..]);
                out.push(n);
                at += n;
            }
        }
        out
    }

    fn opening(cipher: Box<dyn LinkCipher>, bytes: &[u8]) -> Opening {
        let mut o = Opening::new(cipher);
        o.buf[..bytes.len()].copy_from_slice(bytes);
        o.end = bytes.len();
        o
    }

    #[test]
    fn records_out_of_range_or_with_a_failed_tag_are_refused() {
        let record = |len: u32, body: usize| [&len.to_le_bytes()[..], &vec![1u8; body + TAG]].concat();
        let mut o = opening(Box::new(Fixed(true)), &record(0, 0));
        assert!(matches!(o.next(), Err(OpenError::Length(0))));
        let mut o = opening(Box::new(Fixed(true)), &(RECORD as u32 + 1).to_le_bytes());
        assert!(matches!(o.next(), Err(OpenError::Length(n)) if n == RECORD + 1), "refused from its length alone");
        let mut o = opening(Box::new(Fixed(false)), &record(5, 5));
        assert!(matches!(o.next(), Err(OpenError::Tag)));
        let whole = record(5, 5);
        let mut o = opening(Box::new(Fixed(true)), &whole[..whole.len() - 1]);
        assert!(matches!(o.next(), Ok(None)), "a record not all here waits");
        let mut o = opening(Box::new(Fixed(true)), &whole);
        assert_eq!(o.next().unwrap(), Some(&[1u8; 5][..]));
        assert!(matches!(o.next(), Ok(None)));
    }

    proptest::proptest! {
        /// Whatever bytes come, opening them yields records or a typed error, never a
        /// panic, and never more plaintext than came.
        #[test]
        fn opening_hostile_bytes_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), ok: bool) {
            let mut o = opening(Box::new(Fixed(ok)), &bytes);
            let mut plain = 0;
            while let Ok(Some(p)) = o.next() {
                plain += p.len();
            }
            proptest::prop_assert!(plain <= bytes.len());
        }
    }

    #[test]
    fn records_hold_whole_frames_up_to_a_record() {
        let f = 4 + FRAME_DATA + 16; // a largest write frame on a sealed link
        assert!(f <= RECORD);
        let plain = frames(&[100, 200, FRAME_DATA + 16, 10, 20]);
        assert_eq!(cuts(&plain, plain.len()), vec![104 + 204, f, 14 + 24]);
    }

    #[test]
    fn a_frame_past_a_record_or_a_piece_is_cut_and_the_next_records_stay_on_frames() {
        let plain = frames(&[RECORD + 100, 50, 60]);
        // The rest of the long frame, then whole frames that fit with it.
        assert_eq!(cuts(&plain, plain.len()), vec![RECORD, 104 + 54 + 64]);
        // Pieces cut mid-frame: the rest of the frame goes first, then whole frames again.
        let plain = frames(&[1000, 1000, 1000]);
        assert_eq!(cuts(&plain, 1500), vec![1004, 496, 508, 992, 12]);
    }
}
