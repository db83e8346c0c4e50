//! The tcp wire format. Every decoder here treats its input as hostile: lengths,
//! versions and kinds are checked, and anything wrong is an error, never a panic.
//!
//! A frame is a little-endian `u32` body length followed by the body; the body's first
//! byte is its kind:
//!
//! ```text
//! Hello  1 | magic "SPSS" | version u16 | node u32 | group u64 | n u16 | n × (region u16, len u64)
//! Write  2 | flags u8 (bit 0: signaled, bit 1: quiet) | region u16 | offset u64 | len u32 | len data bytes
//! Ack    3 | seq u64      (the receiver applied this many writes of the link)
//! ```
//! A Write's offset and length are multiples of 8 and its body is exactly
//! `16 + len` bytes; whether the range fits the region is checked by the receiver,
//! which knows the region.

use super::{NodeId, RegionId, RegionSpec};
use thiserror::Error;

/// Protocol magic in a Hello.
pub const MAGIC: [u8; 4] = *b"SPSS";
/// The protocol version this build speaks.
pub const VERSION: u16 = 1;
/// Largest write payload in one frame.
pub const MAX_WRITE: usize = 16 << 20;
/// Largest body a decoder accepts.
pub const MAX_BODY: usize = MAX_WRITE + WRITE_HEADER;
/// Most regions a Hello may list.
pub const MAX_REGIONS: usize = 64;
/// Bytes of a Write body before its data.
pub const WRITE_HEADER: usize = 16;

const KIND_HELLO: u8 = 1;
const KIND_WRITE: u8 = 2;
const KIND_ACK: u8 = 3;
const FLAG_SIGNALED: u8 = 1;
const FLAG_QUIET: u8 = 2;

/// A connection handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The sender's node id.
    pub node: NodeId,
    /// The group both ends must belong to.
    pub group: u64,
    /// The sender's registered regions.
    pub regions: Vec<RegionSpec>,
}

/// A decoded frame, borrowing its payload from the input.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A handshake.
    Hello(Hello),
    /// A one-sided write.
    Write {
        /// Target region.
        region: RegionId,
        /// Byte offset in it.
        offset: u64,
        /// The sender wants an Ack.
        signaled: bool,
        /// Ring the doorbell when applied (the quiet bit is clear).
        wake: bool,
        /// The bytes (a multiple of 8).
        data: &'a [u8],
    },
    /// The peer applied `seq` writes of this link.
    Ack {
        /// Writes applied so far.
        seq: u64,
    },
}

/// Why input is not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The declared body length is 0 or above [`MAX_BODY`].
    #[error("frame body length {0} is out of range")]
    BadLength(u64),
    /// Unknown kind byte.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// The body is shorter or longer than its kind requires.
    #[error("{kind} frame body is {have} bytes, expected {want}")]
    Size {
        /// Frame kind name.
        kind: &'static str,
        /// Bytes present.
        have: usize,
        /// Bytes required.
        want: usize,
    },
    /// A Hello without our magic.
    #[error("not a spindle peer (bad magic)")]
    BadMagic,
    /// A Hello with another protocol version.
    #[error("peer speaks protocol version {0}, this node speaks {VERSION}")]
    Version(u16),
    /// A Hello listing too many regions.
    #[error("hello lists {0} regions, at most {MAX_REGIONS} allowed")]
    TooManyRegions(usize),
    /// A Write whose offset or length is not word-aligned, or too long.
    #[error("write of {len} bytes at {offset} is not word-aligned or too long")]
    BadWrite {
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
    },
}

struct Cursor<'a> {
    b: &'a [u8],
    kind: &'static str,
    want: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if self.b.len() < n {
            return Err(FrameError::Size { kind: self.kind, have: self.b.len(), want: self.want });
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, FrameError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn end(&self, have: usize) -> Result<(), FrameError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Size { kind: self.kind, have, want: have - self.b.len() })
        }
    }
}

/// Reads the length prefix: `Ok(None)` if fewer than 4 bytes are present.
pub fn body_len(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    let Some(head) = buf.get(..4) else { return Ok(None) };
    let len = u32::from_le_bytes(head.try_into().expect("4 bytes")) as usize;
    if len == 0 || len > MAX_BODY {
        return Err(FrameError::BadLength(len as u64));
    }
    Ok(Some(len))
}

/// Decodes one frame from the front of `buf`. `Ok(None)` means more bytes are needed;
/// otherwise returns the frame and the bytes it used.
pub fn decode(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    let Some(len) = body_len(buf)? else { return Ok(None) };
    let Some(body) = buf.get(4..4 + len) else { return Ok(None) };
    Ok(Some((decode_body(body)?, 4 + len)))
}

/// Decodes a frame body (without its length prefix).
pub fn decode_body(body: &[u8]) -> Result<Frame<'_>, FrameError> {
    let kind = *body.first().ok_or(FrameError::BadLength(0))?;
    let have = body.len();
    match kind {
        KIND_HELLO => {
            let mut c = Cursor { b: &body[1..], kind: "hello", want: 21 };
            if c.take(4)? != MAGIC {
                return Err(FrameError::BadMagic);
            }
            let version = c.u16()?;
            if version != VERSION {
                return Err(FrameError::Version(version));
            }
            let node = NodeId(c.u32()?);
            let group = c.u64()?;
            let n = c.u16()? as usize;
            if n > MAX_REGIONS {
                return Err(FrameError::TooManyRegions(n));
            }
            c.want = 21 + 10 * n;
            let mut regions = Vec::with_capacity(n);
            for _ in 0..n {
                let id = RegionId(c.u16()?);
                let len = c.u64()?;
                let len = usize::try_from(len).map_err(|_| FrameError::BadLength(len))?;
                regions.push(RegionSpec { id, len });
            }
            c.end(have)?;
            Ok(Frame::Hello(Hello { node, group, regions }))
        }
        KIND_WRITE => {
            let mut c = Cursor { b: &body[1..], kind: "write", want: WRITE_HEADER };
            let head = write_fields(&mut c)?;
            let data = c.take(head.len)?;
            c.end(have)?;
            let WriteHead { region, offset, signaled, wake, .. } = head;
            Ok(Frame::Write { region, offset, signaled, wake, data })
        }
        KIND_ACK => {
            let mut c = Cursor { b: &body[1..], kind: "ack", want: 9 };
            let seq = c.u64()?;
            c.end(have)?;
            Ok(Frame::Ack { seq })
        }
        k => Err(FrameError::UnknownKind(k)),
    }
}

/// The head of a Write frame, read before its data has all arrived (the tcp
/// receiver takes a large write's data straight into its region).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteHead {
    /// Target region.
    pub region: RegionId,
    /// Byte offset in it.
    pub offset: u64,
    /// The sender wants an Ack.
    pub signaled: bool,
    /// Ring the doorbell when applied.
    pub wake: bool,
    /// Data bytes that follow the head.
    pub len: usize,
}

/// Bytes of a Write frame before its data: the length prefix and the header.
pub const WRITE_PREFIX: usize = 4 + WRITE_HEADER;

/// The fields of a Write header after its kind byte, checked as [`decode`] checks them;
/// `c.want` becomes the whole body's length.
fn write_fields(c: &mut Cursor<'_>) -> Result<WriteHead, FrameError> {
    let flags = c.u8()?;
    let region = RegionId(c.u16()?);
    let offset = c.u64()?;
    let len = c.u32()? as usize;
    if offset % 8 != 0 || len % 8 != 0 || len > MAX_WRITE {
        return Err(FrameError::BadWrite { offset, len: len as u64 });
    }
    c.want = WRITE_HEADER + len;
    let (signaled, wake) = (flags & FLAG_SIGNALED != 0, flags & FLAG_QUIET == 0);
    Ok(WriteHead { region, offset, signaled, wake, len })
}

/// Reads the head of the Write frame at the front of `buf`, checked as [`decode`]
/// checks it (the body's length must be the header's and the data's). `Ok(None)`
/// if fewer than [`WRITE_PREFIX`] bytes are present or the frame is of another kind.
pub fn write_head(buf: &[u8]) -> Result<Option<WriteHead>, FrameError> {
    let Some(body) = body_len(buf)? else { return Ok(None) };
    let Some(head) = buf.get(4..WRITE_PREFIX) else { return Ok(None) };
    if head[0] != KIND_WRITE {
        return Ok(None);
    }
    let mut c = Cursor { b: &head[1..], kind: "write", want: WRITE_HEADER };
    let h = write_fields(&mut c)?;
    if body != WRITE_HEADER + h.len {
        return Err(FrameError::Size { kind: "write", have: body, want: WRITE_HEADER + h.len });
    }
    Ok(Some(h))
}

/// Appends a Hello frame.
pub fn encode_hello(out: &mut Vec<u8>, h: &Hello) {
    encode_hello_version(out, h, VERSION)
}

/// Appends a Hello frame claiming `version` (tests use other versions).
pub fn encode_hello_version(out: &mut Vec<u8>, h: &Hello, version: u16) {
    let body = 21 + 10 * h.regions.len();
    out.extend_from_slice(&(body as u32).to_le_bytes());
    out.push(KIND_HELLO);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&h.node.0.to_le_bytes());
    out.extend_from_slice(&h.group.to_le_bytes());
    out.extend_from_slice(&(h.regions.len() as u16).to_le_bytes());
    for r in &h.regions {
        out.extend_from_slice(&r.id.0.to_le_bytes());
        out.extend_from_slice(&(r.len as u64).to_le_bytes());
    }
}

/// How a Write frame is handled at the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteFlags {
    /// Acknowledge it.
    pub signaled: bool,
    /// Do not ring the doorbell for it.
    pub quiet: bool,
}

/// Appends the header of a Write frame of `len` data bytes; the caller appends the data.
pub fn encode_write_header(out: &mut Vec<u8>, region: RegionId, offset: u64, len: usize, flags: WriteFlags) {
    out.extend_from_slice(&((WRITE_HEADER + len) as u32).to_le_bytes());
    out.push(KIND_WRITE);
    out.push(if flags.signaled { FLAG_SIGNALED } else { 0 } | if flags.quiet { FLAG_QUIET } else { 0 });
    out.extend_from_slice(&region.0.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
}

/// Appends an Ack frame.
pub fn encode_ack(out: &mut Vec<u8>, seq: u64) {
    out.extend_from_slice(&9u32.to_le_bytes());
    out.push(KIND_ACK);
    out.extend_from_slice(&seq.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hello() -> Hello {
        Hello {
            node: NodeId(7),
            group: 99,
            regions: vec![RegionSpec { id: RegionId(0), len: 4096 }, RegionSpec { id: RegionId(3), len: 8 }],
        }
    }

    #[test]
    fn frames_round_trip() {
        let mut b = Vec::new();
        encode_hello(&mut b, &hello());
        encode_write_header(&mut b, RegionId(2), 64, 16, WriteFlags { signaled: true, quiet: false });
        b.extend_from_slice(&[1; 16]);
        encode_ack(&mut b, 12);
        let (f, n) = decode(&b).unwrap().unwrap();
        assert_eq!(f, Frame::Hello(hello()));
        let (f, m) = decode(&b[n..]).unwrap().unwrap();
        assert_eq!(f, Frame::Write { region: RegionId(2), offset: 64, signaled: true, wake: true, data: &[1; 16] });
        let (f, k) = decode(&b[n + m..]).unwrap().unwrap();
        assert_eq!(f, Frame::Ack { seq: 12 });
        assert_eq!(n + m + k, b.len());
    }

    #[test]
    fn partial_input_needs_more() {
        let mut b = Vec::new();
        encode_ack(&mut b, 1);
        for cut in 0..b.len() {
            assert_eq!(decode(&b[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn bad_frames_are_errors() {
        let mut b = Vec::new();
        encode_hello_version(&mut b, &hello(), 9);
        assert_eq!(decode(&b), Err(FrameError::Version(9)));
        assert_eq!(decode(&[0, 0, 0, 0]), Err(FrameError::BadLength(0)));
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0x7f]), Err(FrameError::BadLength(0x7fff_ffff)));
        assert_eq!(decode(&[1, 0, 0, 0, 42]), Err(FrameError::UnknownKind(42)));
        let mut w = Vec::new();
        encode_write_header(&mut w, RegionId(0), 4, 8, WriteFlags::default());
        w.extend_from_slice(&[0; 8]);
        assert_eq!(decode(&w), Err(FrameError::BadWrite { offset: 4, len: 8 }));
        // A write whose declared body is longer than its data length says.
        let mut w = Vec::new();
        encode_write_header(&mut w, RegionId(0), 0, 8, WriteFlags::default());
        w.extend_from_slice(&[0; 8]);
        w[0] += 8;
        w.extend_from_slice(&[0; 8]);
        assert!(matches!(decode(&w), Err(FrameError::Size { kind: "write", .. })));
        // Ack with a short body.
        assert!(matches!(decode(&[2, 0, 0, 0, 3, 1]), Err(FrameError::Size { kind: "ack", .. })));
    }

    #[test]
    fn a_write_head_reads_as_decode_does() {
        let mut w = Vec::new();
        encode_write_header(&mut w, RegionId(3), 64, 24, WriteFlags { signaled: true, quiet: true });
        for cut in 0..WRITE_PREFIX {
            assert_eq!(write_head(&w[..cut]), Ok(None), "cut at {cut}");
        }
        let head = WriteHead { region: RegionId(3), offset: 64, signaled: true, wake: false, len: 24 };
        assert_eq!(write_head(&w), Ok(Some(head)), "no data needed");
        let mut a = Vec::new();
        encode_ack(&mut a, 5);
        a.extend_from_slice(&[0; 16]);
        assert_eq!(write_head(&a), Ok(None), "another kind");
        let mut bad = w.clone();
        bad[0] += 8;
        assert!(matches!(write_head(&bad), Err(FrameError::Size { kind: "write", .. })), "body longer than the data");
        let mut bad = Vec::new();
        encode_write_header(&mut bad, RegionId(0), 8, 12, WriteFlags::default());
        assert_eq!(write_head(&bad), Err(FrameError::BadWrite { offset: 8, len: 12 }));
    }

    proptest! {
        #[test]
        fn write_head_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = write_head(&bytes);
        }

        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn decoder_never_panics_on_mutated_frames(pos in 0usize..60, byte in any::<u8>()) {
            let mut b = Vec::new();
            encode_hello(&mut b, &hello());
            encode_write_header(&mut b, RegionId(1), 8, 8, WriteFlags { signaled: false, quiet: true });
            b.extend_from_slice(&[5; 8]);
            let i = pos % b.len();
            b[i] = byte;
            let mut at = 0;
            while let Ok(Some((_, n))) = decode(&b[at..]) {
                at += n;
            }
        }
    }
}
