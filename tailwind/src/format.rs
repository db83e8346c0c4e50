//! The replicated log's buffer format and its recovery scan (Tailwind §3, Algorithm
//! 1), sans-IO: no threads, no files, only bytes.
//!
//! ```text
//!  one append = one write:
//!   RecordHeader (16 B) | data, zero-padded to 8 | ChecksumEntry (8 B)
//!
//!  RecordHeader  { len: u32, kind: RECORD, crc: CRC32C(data), flags: 0 or TAGGED }
//!  ChecksumEntry { kind: CHECKSUM, chain: CRC32C over every RecordHeader so far }
//! ```
//!
//! The chain is never zero (a zero CRC is written as 1) and buffers start zeroed, so
//! an entry the primary never finished writing cannot pass for a valid one: it is
//! zero where the chain should be, or its kind is. [`scan`] walks the buffer from the
//! start and returns exactly the longest prefix of appends whose header chain and
//! data CRCs verify. It stops at the first of: a header that is not a record (the
//! zeroed end, or a torn or flipped header), a length that runs past the buffer, a
//! checksum entry that is not one or whose chain differs (a torn or flipped entry,
//! or a flipped header, since the chain covers every header before it), or data
//! whose CRC differs. So a torn last append is cut, stale bytes after the end are
//! never read as records, and a flipped bit in any header or entry ends the prefix
//! there.
//!
//! ```
//! use spindle_tailwind::format::{scan, Appender, BufLen};
//! let mut buf = vec![0u8; 256];
//! let mut log = Appender::new(BufLen(buf.len()));
//! let a = log.append(&mut buf, b"first").unwrap();
//! log.append(&mut buf, b"second record").unwrap();
//! let r = scan(&buf);
//! assert_eq!(r.records.len(), 2);
//! assert_eq!(r.data(&buf, 1), b"second record");
//! assert_eq!(r.end, log.end());
//! // A torn second append: everything after its header's first byte is lost.
//! let cut = a.end.0 + 1;
//! buf[cut..].fill(0);
//! assert_eq!(scan(&buf).records.len(), 1);
//! ```

use bytemuck::{Pod, Zeroable};
use thiserror::Error;

/// A byte offset in a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(pub usize);

/// A buffer's size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BufLen(pub usize);

/// The kind word of a record header.
pub const RECORD: u32 = 0x5457_5252; // "RRWT"
/// The kind word of a checksum entry.
pub const CHECKSUM: u32 = 0x5457_4343; // "CCWT"
/// Header bytes.
pub const HEADER: usize = std::mem::size_of::<RecordHeader>();
/// Checksum entry bytes.
pub const ENTRY: usize = std::mem::size_of::<ChecksumEntry>();
/// The largest record (4 GiB - 1 would fit the field; buffers are far smaller).
pub const MAX_RECORD: usize = 1 << 30;

/// The header in front of every record's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct RecordHeader {
    /// Data bytes (before padding).
    pub len: u32,
    /// [`RECORD`].
    pub kind: u32,
    /// CRC32C of the data.
    pub crc: u32,
    /// 0, or [`TAGGED`]: the data's last 16 bytes are the record's [`Tag`] (its
    /// producer and number there, for appends that are retried safely), not
    /// part of the record a reader gets.
    pub flags: u32,
}

/// The [`RecordHeader::flags`] of a record that carries a [`Tag`].
pub const TAGGED: u32 = 1;
/// Bytes a tag takes after a tagged record's payload.
pub const TAG_BYTES: usize = 16;

/// Who appended a record and its number among that producer's appends (see
/// `service`'s safe retries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag {
    /// The producer.
    pub producer: u64,
    /// Its number.
    pub seq: u64,
}

/// The entry after every record: the chain over all headers so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct ChecksumEntry {
    /// [`CHECKSUM`].
    pub kind: u32,
    /// CRC32C over every [`RecordHeader`] in the buffer up to this one; never 0.
    pub chain: u32,
}

/// Bytes one append of `len` data bytes takes.
pub fn extent(len: usize) -> usize {
    HEADER + len.div_ceil(8) * 8 + ENTRY
}

/// The chain value written for a running CRC (0 is written as 1).
fn nonzero(crc: u32) -> u32 {
    if crc == 0 {
        1
    } else {
        crc
    }
}

/// Why an append did not fit.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FormatError {
    /// The record is larger than [`MAX_RECORD`].
    #[error("a record of {0} bytes exceeds the limit of {MAX_RECORD}")]
    TooLarge(usize),
    /// The buffer has no room for it: close it and open another.
    #[error("the buffer is full: {need} bytes needed, {left} left")]
    Full {
        /// Bytes the append needs.
        need: usize,
        /// Bytes left.
        left: usize,
    },
}

/// Where one append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Where it starts (its header).
    pub start: Offset,
    /// Where it ends (after its checksum entry): the next append's start.
    pub end: Offset,
    /// The chain it wrote.
    pub chain: u32,
}

/// The primary's side: writes appends into a buffer (its own copy; the same bytes
/// then go to every backup as one write per append) and keeps the running chain.
#[derive(Debug, Clone)]
pub struct Appender {
    size: BufLen,
    end: Offset,
    crc: u32,
}

impl Appender {
    /// An empty buffer of `size` bytes.
    pub fn new(size: BufLen) -> Appender {
        Appender { size, end: Offset(0), crc: 0 }
    }

    /// Continues a buffer a [`scan`] recovered (a new primary after a failure).
    pub fn resume(size: BufLen, recovered: &Recovered) -> Appender {
        Appender { size, end: recovered.end, crc: recovered.crc }
    }

    /// Where the next append starts.
    pub fn end(&self) -> Offset {
        self.end
    }

    /// Encodes an append of `data` into `buf` at [`Appender::end`] (the bytes of one
    /// write: header, padded data, checksum entry) and moves past it.
    pub fn append(&mut self, buf: &mut [u8], data: &[u8]) -> Result<Appended, FormatError> {
        self.append_tagged(buf, data, None)
    }

    /// [`Appender::append`] of a record that carries `tag` (if any).
    pub fn append_tagged(&mut self, buf: &mut [u8], data: &[u8], tag: Option<Tag>) -> Result<Appended, FormatError> {
        let e = self.encode_tagged(data, tag)?;
        let start = self.end.0;
        buf[start..start + e.bytes.len()].copy_from_slice(&e.bytes);
        Ok(self.commit(&e))
    }

    /// The bytes of the next append of `data`, without moving on; then
    /// [`Appender::commit`] once they are written (to every replica).
    pub fn encode(&self, data: &[u8]) -> Result<Encoded, FormatError> {
        self.encode_tagged(data, None)
    }

    /// [`Appender::encode`] of a record that carries `tag` (if any).
    pub fn encode_tagged(&self, data: &[u8], tag: Option<Tag>) -> Result<Encoded, FormatError> {
        let len = data.len() + if tag.is_some() { TAG_BYTES } else { 0 };
        if len > MAX_RECORD {
            return Err(FormatError::TooLarge(data.len()));
        }
        let need = extent(len);
        let left = self.size.0.saturating_sub(self.end.0);
        if need > left {
            return Err(FormatError::Full { need, left });
        }
        let mut body = Vec::new();
        let body: &[u8] = match tag {
            None => data,
            Some(t) => {
                body.reserve(len);
                body.extend_from_slice(data);
                body.extend_from_slice(&t.producer.to_le_bytes());
                body.extend_from_slice(&t.seq.to_le_bytes());
                &body
            }
        };
        let flags = if tag.is_some() { TAGGED } else { 0 };
        let h = RecordHeader { len: len as u32, kind: RECORD, crc: crc32c::crc32c(body), flags };
        let crc = crc32c::crc32c_append(self.crc, bytemuck::bytes_of(&h));
        let mut bytes = Vec::with_capacity(need);
        bytes.extend_from_slice(bytemuck::bytes_of(&h));
        bytes.extend_from_slice(body);
        bytes.resize(HEADER + len.div_ceil(8) * 8, 0);
        bytes.extend_from_slice(bytemuck::bytes_of(&ChecksumEntry { kind: CHECKSUM, chain: nonzero(crc) }));
        Ok(Encoded { at: self.end, bytes, crc })
    }

    /// Moves past an append made by [`Appender::encode`] (the next one in order).
    pub fn commit(&mut self, e: &Encoded) -> Appended {
        assert_eq!(e.at, self.end, "appends are committed in the order they were encoded");
        self.end = Offset(e.at.0 + e.bytes.len());
        self.crc = e.crc;
        Appended { start: e.at, end: self.end, chain: nonzero(e.crc) }
    }
}

/// One encoded append: its bytes, where they go, and the running CRC after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// Where the bytes go in the buffer.
    pub at: Offset,
    /// The bytes (one write).
    pub bytes: Vec<u8>,
    crc: u32,
}

/// One recovered record: where its data is and how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef {
    /// Offset of its data.
    pub at: Offset,
    /// Data bytes (without a tag).
    pub len: usize,
    /// Its tag, if it carries one.
    pub tag: Option<Tag>,
    /// Where its append ends (after its checksum entry).
    pub end: Offset,
}

/// Why a scan stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// At a zeroed header: the clean end of what was written.
    End,
    /// Fewer bytes than a header left.
    BufferEnd,
    /// A header that is neither zero nor a record (torn or damaged).
    BadHeader,
    /// A length that runs past the buffer.
    BadLength,
    /// A checksum entry that is not one, or whose chain differs.
    BadChain,
    /// Data whose CRC differs.
    BadData,
}

/// What a scan recovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The records of the valid prefix, in order.
    pub records: Vec<RecordRef>,
    /// The end of the valid prefix (where the next append goes).
    pub end: Offset,
    /// The running CRC after the last valid header (to resume appending).
    pub crc: u32,
    /// Why it stopped.
    pub stop: Stop,
}

impl Recovered {
    /// The data of record `i` in `buf`.
    pub fn data<'a>(&self, buf: &'a [u8], i: usize) -> &'a [u8] {
        let r = self.records[i];
        &buf[r.at.0..r.at.0 + r.len]
    }
}

fn read<T: Pod>(buf: &[u8], at: usize) -> Option<T> {
    buf.get(at..at.checked_add(std::mem::size_of::<T>())?).map(bytemuck::pod_read_unaligned)
}

/// Tailwind's Algorithm 1: the longest valid prefix of `buf` (see the module docs).
/// Never panics, whatever the bytes.
pub fn scan(buf: &[u8]) -> Recovered {
    scan_from(buf, 0, usize::MAX)
}

/// [`scan`] of bytes that start at a record boundary after records whose header
/// chain is `crc` (the [`Recovered::crc`] of the part before), stopping after
/// `max` records: a reader that follows a buffer as it grows checks each record
/// as the full scan would, without reading the buffer from its start again.
pub fn scan_from(buf: &[u8], crc: u32, max: usize) -> Recovered {
    let mut records = Vec::new();
    let mut pos = 0usize;
    let mut crc = crc;
    let stop = loop {
        if records.len() >= max {
            break Stop::End;
        }
        let Some(h) = read::<RecordHeader>(buf, pos) else { break Stop::BufferEnd };
        if h.kind != RECORD {
            break if h == RecordHeader::zeroed() { Stop::End } else { Stop::BadHeader };
        }
        let len = h.len as usize;
        let data_at = pos + HEADER;
        let entry_at = match data_at.checked_add(len.div_ceil(8) * 8) {
            Some(e) if len <= MAX_RECORD && e.checked_add(ENTRY).is_some_and(|end| end <= buf.len()) => e,
            _ => break Stop::BadLength,
        };
        let next = crc32c::crc32c_append(crc, bytemuck::bytes_of(&h));
        match read::<ChecksumEntry>(buf, entry_at) {
            Some(e) if e.kind == CHECKSUM && e.chain == nonzero(next) => {}
            _ => break Stop::BadChain,
        }
        let data = &buf[data_at..data_at + len];
        if crc32c::crc32c(data) != h.crc || !(h.flags == 0 || h.flags == TAGGED && len >= TAG_BYTES) {
            break Stop::BadData;
        }
        let (len, tag) = match h.flags {
            TAGGED => {
                let word = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"));
                (len - TAG_BYTES, Some(Tag { producer: word(len - 16), seq: word(len - 8) }))
            }
            _ => (len, None),
        };
        records.push(RecordRef { at: Offset(data_at), len, tag, end: Offset(entry_at + ENTRY) });
        crc = next;
        pos = entry_at + ENTRY;
    };
    Recovered { records, end: Offset(pos), crc, stop }
}

/// Creates (or truncates) `path` for writing, readable and writable by its owner
/// only: a log's records are the application's data.
pub(crate) fn create_private(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)
}
