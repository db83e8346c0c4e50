//! Sealed links: with a group secret every byte a link carries after setup travels in
//! records, each encrypted and authenticated by the link's [`LinkCipher`] for its
//! direction (supplied by the layer that holds the secret; sst does no cryptography):
//!
//! ```text
//!   record:  length u32 (little-endian, 1..=RECORD) | ciphertext (length bytes) | tag (16)
//! ```
//!
//! The length is sent in clear and bound to the tag. The frames of [`super::frame`]
//! are the plaintext, cut into records wherever a send cuts them: a receiver opens
//! each record, appends its plaintext to the link's frame buffer and applies frames
//! from there as on a plain link. A record whose tag fails (a changed, dropped,
//! reordered, replayed or inserted record: the cipher's nonce is its sequence number
//! on the link) or whose length is out of range breaks the link before any of its
//! bytes reach a region.

use super::LinkCipher;
use std::io::Write;
use std::net::TcpStream;

/// The most plaintext bytes in one record.
pub const RECORD: usize = 64 << 10;
/// Bytes of a record's tag.
pub const TAG: usize = 16;
/// Bytes of a record's length.
const LEN: usize = 4;

/// The ciphers of a sealed link: `(sending, receiving)`.
pub type Ciphers = (Box<dyn LinkCipher>, Box<dyn LinkCipher>);

/// The sending side of a link: its socket and, on a sealed link, the cipher and the
/// sealed bytes a non-blocking send left unsent (they go before anything else).
#[derive(Debug)]
pub(super) struct Tx {
    stream: TcpStream,
    seal: Option<Sealing>,
}

#[derive(Debug)]
struct Sealing {
    cipher: Box<dyn LinkCipher>,
    /// Sealed records; `wire[at..]` is not sent yet.
    wire: Vec<u8>,
    at: usize,
}

impl Sealing {
    /// Appends `plain` to `wire` as records.
    fn seal(&mut self, plain: &[u8]) {
        for chunk in plain.chunks(RECORD) {
            let head = (chunk.len() as u32).to_le_bytes();
            self.wire.extend_from_slice(&head);
            let body = self.wire.len();
            self.wire.extend_from_slice(chunk);
            let tag = self.cipher.seal(&head, &mut self.wire[body..]);
            self.wire.extend_from_slice(&tag);
        }
    }

    fn pending(&self) -> bool {
        self.at < self.wire.len()
    }

    fn sent(&mut self, n: usize) {
        self.at += n;
        if self.at == self.wire.len() {
            self.wire.clear();
            self.at = 0;
        }
    }
}

impl Tx {
    pub(super) fn new(stream: TcpStream, cipher: Option<Box<dyn LinkCipher>>) -> Tx {
        Tx { stream, seal: cipher.map(|cipher| Sealing { cipher, wire: Vec::new(), at: 0 }) }
    }

    /// Sends `bytes`, blocking (up to the socket's write timeout), after whatever a
    /// non-blocking send left.
    pub(super) fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let Some(s) = &mut self.seal else { return self.stream.write_all(bytes) };
        self.stream.write_all(&s.wire[s.at..])?;
        s.sent(s.wire.len() - s.at);
        // A record at a time, so that sealing one overlaps the socket's sending the last.
        for chunk in bytes.chunks(RECORD) {
            s.seal(chunk);
            self.stream.write_all(&s.wire)?;
            s.sent(s.wire.len());
        }
        Ok(())
    }

    /// Sends what a non-blocking send left, blocking.
    pub(super) fn write_pending(&mut self) -> std::io::Result<()> {
        self.write_all(&[])
    }

    /// Whether a non-blocking send left sealed bytes unsent.
    pub(super) fn pending(&self) -> bool {
        self.seal.as_ref().is_some_and(Sealing::pending)
    }

    /// Sends what the socket takes without blocking; returns how many of `bytes` are
    /// taken: sent, or (on a sealed link) sealed and left for the next send.
    pub(super) fn send_dontwait(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        let sock = socket2::SockRef::from(&self.stream);
        let Some(s) = &mut self.seal else { return sock.send_with_flags(bytes, flags) };
        if !s.pending() {
            s.seal(bytes);
        } else if !bytes.is_empty() {
            // Sealed bytes are still waiting: these wait behind them, unsealed.
            let n = sock.send_with_flags(&s.wire[s.at..], flags)?;
            s.sent(n);
            return Ok(0);
        }
        let n = sock.send_with_flags(&s.wire[s.at..], flags)?;
        s.sent(n);
        Ok(bytes.len())
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
        Opening { cipher, buf: vec![0; 2 * (LEN + RECORD + TAG)], start: 0, end: 0 }
    }

    /// Makes room at the end of the buffer (there is always room for one whole record).
    pub(super) fn make_room(&mut self) {
        if self.end == self.buf.len() || self.buf.len() - self.start < LEN + RECORD + TAG {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// The next complete record, opened: its plaintext, decrypted in place.
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
            (self.start, self.end) = (0, 0);
            // The plaintext is still in place: `make_room` moves nothing before the
            // next read, and the caller copies it out first.
        }
        Ok(Some(&self.buf[body..body + len]))
    }
}
