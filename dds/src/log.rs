//! The durable sample log of the `Logged` QoS: an append-only file of checksummed
//! records. Reopening it recovers exactly the records that were written whole; a torn
//! tail (a crash inside an append) is found and cut, never replayed as data; damage
//! anywhere else is an error that leaves the file as it is.
//!
//! ```text
//!   record (little-endian, 8-byte aligned)
//!   0   magic  u32  "SPLG"
//!   4   len    u32  payload bytes (at most MAX_RECORD)
//!   8   seq    u64  record number in the file: 0, 1, 2, ...
//!   16  hcrc   u32  CRC32C of bytes 0..16
//!   20  pcrc   u32  CRC32C of the payload
//!   24  payload, zero-padded to a multiple of 8
//! ```
//!
//! # What recovery decides
//! The file only grows by appends, so a crash can damage only the last record, and
//! recovery cuts a damaged tail before anything is appended again. Scanning from the
//! start, the first record that does not verify ends the valid prefix; it is a **torn
//! tail** (cut) when nothing valid follows it:
//! - fewer bytes than a header are left;
//! - the header verifies but the record runs past the end of the file, or it ends
//!   exactly at the end and its payload does not verify;
//! - the header does not verify and no verifying header follows anywhere after it.
//!
//! Anything else (a payload that fails with more records after it, a record number out
//! of sequence, a bad header followed by a good one) is **corruption**:
//! [`SampleLog::open`] returns [`LogError::Corrupt`] with its offset and changes
//! nothing. Padding bytes are not checksummed; a flipped padding bit changes no data.
//!
//! The scan is sans-IO: it reads a byte slice and never panics on any input.
//!
//! Appends bypass the page cache where the filesystem allows it (module `direct`);
//! while the log is open its file may then end in up to a block of zeros, which a
//! reader's scan takes for a torn tail and a clean close cuts.
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("dds-log-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! use spindle_dds::log::{SampleLog, Fsync};
//! let path = dir.join("topic.log");
//! let (mut log, old) = SampleLog::open(&path, Fsync::Always).unwrap();
//! assert!(old.is_empty());
//! log.append(b"first").unwrap();
//! log.append(b"second").unwrap();
//! drop(log);
//! let (_log, recovered) = SampleLog::open(&path, Fsync::Always).unwrap();
//! assert_eq!(recovered, vec![b"first".to_vec(), b"second".to_vec()]);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use thiserror::Error;

mod direct;

const MAGIC: u32 = u32::from_le_bytes(*b"SPLG");
/// Header bytes of a record.
pub const HEADER: usize = 24;
/// What a Logged sample costs in its log beyond its payload: the record's header,
/// the view and node in front of the sample, and the sample's header.
pub const SAMPLE_RECORD_OVERHEAD: usize = HEADER + 16 + crate::qos::HEADER;
/// The largest payload a record may carry (64 MiB).
pub const MAX_RECORD: usize = 64 << 20;

/// When appends reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    /// After every append: an acknowledged sample survives a power loss.
    Always,
    /// After every `n` appends (and at [`SampleLog::sync`]).
    Every(u32),
    /// Never by itself: the operating system writes back when it likes.
    Never,
}

/// What went wrong with a log.
#[derive(Debug, Error)]
pub enum LogError {
    /// The file is damaged before its last record; nothing was changed.
    #[error("log {path}: corrupt at byte {offset}: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the damage starts.
        offset: u64,
        /// What failed to verify.
        why: Corruption,
    },
    /// A sample larger than [`MAX_RECORD`].
    #[error("a sample of {len} bytes exceeds the log's limit of {MAX_RECORD}")]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// The file could not be read or written.
    #[error("log {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl LogError {
    /// The I/O error's kind (`Other` for damage or a sample past the limit).
    pub fn kind(&self) -> std::io::ErrorKind {
        match self {
            LogError::Io { source, .. } => source.kind(),
            _ => std::io::ErrorKind::Other,
        }
    }
}

/// What failed to verify in a damaged log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Corruption {
    /// A record's header (its checksum) does not verify, and records follow it.
    #[error("a header does not verify")]
    Header,
    /// A record's number is not the next one.
    #[error("a record number out of sequence")]
    OutOfSequence,
    /// A record longer than [`MAX_RECORD`].
    #[error("a record longer than the limit")]
    TooLong,
    /// A record's payload does not verify, and records follow it.
    #[error("a payload does not verify")]
    Payload,
    /// A record that verifies but holds no sample (too short for its header).
    #[error("a record that holds no sample")]
    NotASample,
}

/// One verified record found by [`scan`]: its number and where its payload sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    /// Record number.
    pub seq: u64,
    /// Offset of the payload in the scanned bytes.
    pub at: usize,
    /// Payload length.
    pub len: usize,
}

/// How the valid prefix ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tail {
    /// At the end of the bytes.
    Clean,
    /// A torn last record starts at `at`; cut it there.
    Torn {
        /// Where the valid prefix ends.
        at: usize,
        /// What was incomplete.
        why: &'static str,
    },
    /// Damage before the last record, at `at`.
    Corrupt {
        /// Where the valid prefix ends.
        at: usize,
        /// What failed to verify.
        why: Corruption,
    },
}

/// The records of `bytes` up to the first one that does not verify, and how the
/// valid prefix ends (see the module docs).
pub(crate) fn scan(bytes: &[u8]) -> (Vec<Found>, Tail) {
    let mut found = Vec::new();
    let mut o = 0usize;
    while o < bytes.len() {
        let seq = found.len() as u64;
        let Some(h) = Header::parse(&bytes[o..]) else {
            let rest = &bytes[o..];
            return if rest.len() < HEADER {
                (found, Tail::Torn { at: o, why: "incomplete header" })
            } else if any_header_after(bytes, o + 8) {
                (found, Tail::Corrupt { at: o, why: Corruption::Header })
            } else {
                (found, Tail::Torn { at: o, why: "header does not verify" })
            };
        };
        if h.seq != seq {
            return (found, Tail::Corrupt { at: o, why: Corruption::OutOfSequence });
        }
        if h.len > MAX_RECORD {
            return (found, Tail::Corrupt { at: o, why: Corruption::TooLong });
        }
        let end = o + extent(h.len);
        if end > bytes.len() {
            return (found, Tail::Torn { at: o, why: "record runs past the end" });
        }
        let payload = &bytes[o + HEADER..o + HEADER + h.len];
        if crc32c::crc32c(payload) != h.pcrc {
            let tail = if end == bytes.len() {
                Tail::Torn { at: o, why: "last payload does not verify" }
            } else {
                Tail::Corrupt { at: o, why: Corruption::Payload }
            };
            return (found, tail);
        }
        found.push(Found { seq, at: o + HEADER, len: h.len });
        o = end;
    }
    (found, Tail::Clean)
}

/// Bytes a record of `len` payload bytes takes.
fn extent(len: usize) -> usize {
    HEADER + len.div_ceil(8) * 8
}

/// True if a verifying header starts at any 8-aligned offset from `from` on.
fn any_header_after(bytes: &[u8], from: usize) -> bool {
    (from..bytes.len()).step_by(8).any(|o| Header::parse(&bytes[o..]).is_some())
}

struct Header {
    len: usize,
    seq: u64,
    pcrc: u32,
}

impl Header {
    fn encode(len: usize, seq: u64, payload: &[u8]) -> [u8; HEADER] {
        Header::encode_crc(len, seq, crc32c::crc32c(payload))
    }

    fn encode_crc(len: usize, seq: u64, pcrc: u32) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        h[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        h[8..16].copy_from_slice(&seq.to_le_bytes());
        let hcrc = crc32c::crc32c(&h[0..16]);
        h[16..20].copy_from_slice(&hcrc.to_le_bytes());
        h[20..24].copy_from_slice(&pcrc.to_le_bytes());
        h
    }

    /// A header at the start of `b` if it is complete, has the magic and verifies.
    fn parse(b: &[u8]) -> Option<Header> {
        let b = b.get(..HEADER)?;
        let word = |r: std::ops::Range<usize>| u32::from_le_bytes(b[r].try_into().expect("4 bytes"));
        if word(0..4) != MAGIC || word(16..20) != crc32c::crc32c(&b[0..16]) {
            return None;
        }
        let seq = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
        Some(Header { len: word(4..8) as usize, seq, pcrc: word(20..24) })
    }
}

/// An open log: appends at the end, syncing by its [`Fsync`] policy.
#[derive(Debug)]
pub struct SampleLog {
    path: PathBuf,
    file: File,
    next_seq: u64,
    fsync: Fsync,
    unsynced: u32,
    /// The record being written (kept to spare an allocation per append).
    buf: Vec<u8>,
    /// Appends that bypass the page cache, where the filesystem takes them
    /// (module `direct`); otherwise appends go through `file`.
    direct: Option<direct::Direct>,
}

impl SampleLog {
    /// Opens (or creates) the log at `path` and returns it with every record it holds,
    /// in order. A torn tail is cut from the file first (and the cut synced); damage
    /// before the tail is [`LogError::Corrupt`] and the file is left as it is.
    pub fn open(path: impl AsRef<Path>, fsync: Fsync) -> Result<(SampleLog, Vec<Vec<u8>>), LogError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| LogError::Io { path: path.clone(), source };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let (found, tail) = scan(&bytes);
        let end = match tail {
            Tail::Clean => bytes.len(),
            Tail::Torn { at, .. } => {
                file.set_len(at as u64).map_err(io)?;
                file.sync_all().map_err(io)?;
                at
            }
            Tail::Corrupt { at, why } => {
                return Err(LogError::Corrupt { path, offset: at as u64, why });
            }
        };
        file.seek(SeekFrom::End(0)).map_err(io)?;
        let direct =
            direct::Direct::open(&path, end as u64, &bytes[end / direct::BLOCK * direct::BLOCK..end]).map_err(io)?;
        let records = found.iter().map(|f| bytes[f.at..f.at + f.len].to_vec()).collect();
        let next_seq = found.len() as u64;
        let log = SampleLog { path, file, next_seq, fsync, unsynced: 0, buf: Vec::new(), direct };
        Ok((log, records))
    }

    /// Appends one record; returns its number. With [`Fsync::Always`] it is on disk
    /// when this returns.
    pub fn append(&mut self, payload: &[u8]) -> Result<u64, LogError> {
        self.append_parts(&[payload])
    }

    /// Appends one record whose payload is `parts` one after the other (no
    /// intermediate buffer for the caller to build); returns its number.
    pub fn append_parts(&mut self, parts: &[&[u8]]) -> Result<u64, LogError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > MAX_RECORD {
            return Err(LogError::TooLarge { len });
        }
        let seq = self.next_seq;
        let pcrc = parts.iter().fold(0, |crc, p| crc32c::crc32c_append(crc, p));
        let mut rec = std::mem::take(&mut self.buf);
        rec.clear();
        rec.extend_from_slice(&Header::encode_crc(len, seq, pcrc));
        for p in parts {
            rec.extend_from_slice(p);
        }
        rec.resize(extent(len), 0);
        let written = self.write(&rec);
        self.buf = rec;
        written.map_err(|source| LogError::Io { path: self.path.clone(), source })?;
        self.next_seq += 1;
        self.unsynced += 1;
        let due = match self.fsync {
            Fsync::Always => true,
            Fsync::Every(n) => self.unsynced >= n.max(1),
            Fsync::Never => false,
        };
        if due {
            self.sync()?;
        }
        Ok(seq)
    }

    /// Appends `records` (each one record's payload) with one write, then syncs by
    /// the policy, counting the batch as that many appends ([`Fsync::Always`]: one
    /// sync for the batch, before this returns). Returns the number of records the
    /// log holds then.
    pub fn append_batch(&mut self, records: &[Vec<u8>]) -> Result<u64, LogError> {
        if let Some(r) = records.iter().find(|r| r.len() > MAX_RECORD) {
            return Err(LogError::TooLarge { len: r.len() });
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        for (i, r) in records.iter().enumerate() {
            buf.extend_from_slice(&Header::encode(r.len(), self.next_seq + i as u64, r));
            buf.extend_from_slice(r);
            buf.resize(buf.len() + extent(r.len()) - HEADER - r.len(), 0);
        }
        let written = self.write(&buf);
        // A batch's buffer is kept only up to a modest size.
        if buf.capacity() <= 1 << 20 {
            self.buf = buf;
        }
        written.map_err(|source| LogError::Io { path: self.path.clone(), source })?;
        self.next_seq += records.len() as u64;
        self.unsynced = self.unsynced.saturating_add(records.len() as u32);
        let due = match self.fsync {
            Fsync::Always => !records.is_empty(),
            Fsync::Every(n) => self.unsynced >= n.max(1),
            Fsync::Never => false,
        };
        if due {
            self.sync()?;
        }
        Ok(self.next_seq)
    }

    /// Flushes every append so far to the disk.
    pub fn sync(&mut self) -> Result<(), LogError> {
        let synced = match &self.direct {
            Some(d) => d.sync(),
            None => self.file.sync_data(),
        };
        synced.map_err(|source| LogError::Io { path: self.path.clone(), source })?;
        self.unsynced = 0;
        Ok(())
    }

    /// Writes whole records' bytes at the log's end: directly where it can, else
    /// (and from the first direct write the device refuses for its alignment on)
    /// through the page cache.
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if let Some(d) = &mut self.direct {
            match d.append(bytes) {
                Ok(()) => return Ok(()),
                Err(e) if direct::unaligned(&e) => {
                    let end = d.end();
                    tracing::warn!(path = %self.path.display(), "direct writes refused: the log goes on through the page cache");
                    self.direct = None;
                    self.file.set_len(end)?;
                    self.file.seek(SeekFrom::Start(end))?;
                }
                Err(e) => return Err(e),
            }
        }
        self.file.write_all(bytes)
    }

    /// The number the next record will get (the records held so far).
    pub fn len(&self) -> u64 {
        self.next_seq
    }

    /// True if the log holds no record.
    pub fn is_empty(&self) -> bool {
        self.next_seq == 0
    }
}

impl Drop for SampleLog {
    /// A log closed cleanly ends at its last record: the zeros a direct write
    /// padded its last block with are cut.
    fn drop(&mut self) {
        if let Some(d) = &self.direct {
            let _ = self.file.set_len(d.end());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A log image of `payloads`, as appends write it.
    fn image(payloads: &[Vec<u8>]) -> (Vec<u8>, Vec<usize>) {
        let (mut out, mut ends) = (Vec::new(), Vec::new());
        for (i, p) in payloads.iter().enumerate() {
            out.extend_from_slice(&Header::encode(p.len(), i as u64, p));
            out.extend_from_slice(p);
            out.resize(out.len().div_ceil(8) * 8, 0);
            ends.push(out.len());
        }
        (out, ends)
    }

    fn payloads(sizes: &[usize]) -> Vec<Vec<u8>> {
        sizes.iter().enumerate().map(|(i, &n)| (0..n).map(|j| (i * 31 + j * 7) as u8).collect()).collect()
    }

    #[test]
    fn every_cut_point_recovers_exactly_the_whole_records() {
        let p = payloads(&[0, 1, 7, 8, 13, 40]);
        let (img, ends) = image(&p);
        for cut in 0..=img.len() {
            let (found, tail) = scan(&img[..cut]);
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            assert_eq!(found.len(), whole, "cut at {cut}");
            for f in &found {
                assert_eq!(&img[f.at..f.at + f.len], &p[f.seq as usize][..]);
            }
            let prefix_end = if whole == 0 { 0 } else { ends[whole - 1] };
            match tail {
                Tail::Clean => assert_eq!(cut, prefix_end, "clean only at a record boundary"),
                Tail::Torn { at, .. } => assert_eq!(at, prefix_end, "cut at {cut}"),
                Tail::Corrupt { .. } => panic!("a cut is a torn tail, not corruption (cut at {cut})"),
            }
        }
    }

    #[test]
    fn every_bit_flip_is_caught_or_harmless() {
        let p = payloads(&[5, 16, 3]);
        let (img, ends) = image(&p);
        for byte in 0..img.len() {
            for bit in 0..8 {
                let mut bad = img.clone();
                bad[byte] ^= 1 << bit;
                let (found, tail) = scan(&bad);
                // Whatever is returned is the original data, in order.
                for f in &found {
                    assert_eq!(&bad[f.at..f.at + f.len], &p[f.seq as usize][..], "flip {byte}.{bit}");
                }
                let in_padding =
                    ends.iter().zip(&p).any(|(&e, q)| byte < e && byte >= e - (extent(q.len()) - HEADER - q.len()));
                if in_padding {
                    assert_eq!(found.len(), 3, "a padding flip changes nothing");
                } else if byte < ends[1] {
                    // Damage before the last record is never taken for a torn tail.
                    assert!(matches!(tail, Tail::Corrupt { .. }), "flip {byte}.{bit} gave {tail:?}");
                } else {
                    assert_eq!(found.len(), 2, "the last record is cut");
                    assert!(matches!(tail, Tail::Torn { .. }), "flip {byte}.{bit} gave {tail:?}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn scanning_arbitrary_bytes_never_panics_and_returns_only_verified_records(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let (found, _) = scan(&bytes);
            for (i, f) in found.iter().enumerate() {
                prop_assert_eq!(f.seq, i as u64);
                let h = Header::parse(&bytes[f.at - HEADER..]).expect("a returned record has a verifying header");
                prop_assert_eq!(crc32c::crc32c(&bytes[f.at..f.at + f.len]), h.pcrc);
            }
        }

        #[test]
        fn random_logs_cut_anywhere_recover_their_whole_records(
            sizes in proptest::collection::vec(0usize..100, 1..8),
            cut_frac in 0.0f64..1.0,
        ) {
            let p = payloads(&sizes);
            let (img, ends) = image(&p);
            let cut = (img.len() as f64 * cut_frac) as usize;
            let (found, tail) = scan(&img[..cut]);
            prop_assert_eq!(found.len(), ends.iter().filter(|&&e| e <= cut).count());
            let corrupt = matches!(tail, Tail::Corrupt { .. });
            prop_assert!(!corrupt, "a cut read as corruption: {:?}", tail);
        }
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("dds-log-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir.join("t.log")
    }

    #[test]
    fn a_torn_tail_is_cut_on_open_and_appends_go_on() {
        let path = temp("torn");
        let (mut log, old) = SampleLog::open(&path, Fsync::Every(2)).unwrap();
        assert!(old.is_empty() && log.is_empty());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "a log is its owner's only");
        for p in payloads(&[10, 20, 30]) {
            log.append(&p).unwrap();
        }
        log.sync().unwrap();
        drop(log);
        let full = std::fs::metadata(&path).unwrap().len();
        // A crash inside the last append: only part of it reached the file.
        OpenOptions::new().write(true).open(&path).unwrap().set_len(full - 5).unwrap();
        let (mut log, got) = SampleLog::open(&path, Fsync::Always).unwrap();
        assert_eq!(got, payloads(&[10, 20]));
        assert_eq!(log.append(b"after").unwrap(), 2, "numbering continues from the recovered prefix");
        drop(log);
        let (_, got) = SampleLog::open(&path, Fsync::Never).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[2], b"after");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn damage_before_the_tail_is_an_error_and_the_file_stays() {
        let path = temp("corrupt");
        let (mut log, _) = SampleLog::open(&path, Fsync::Never).unwrap();
        for p in payloads(&[16, 16, 16]) {
            log.append(&p).unwrap();
        }
        drop(log);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER + 3] ^= 0x40; // the first payload
        std::fs::write(&path, &bytes).unwrap();
        let err = SampleLog::open(&path, Fsync::Never).unwrap_err();
        assert!(matches!(err, LogError::Corrupt { offset: 0, .. }), "{err}");
        assert!(err.to_string().contains("payload does not verify"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "a corrupt log is not changed");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn an_oversize_sample_is_refused() {
        let path = temp("big");
        let (mut log, _) = SampleLog::open(&path, Fsync::Never).unwrap();
        let big = vec![0u8; MAX_RECORD + 1];
        assert!(matches!(log.append(&big), Err(LogError::TooLarge { .. })));
        assert!(log.is_empty(), "nothing was written");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
