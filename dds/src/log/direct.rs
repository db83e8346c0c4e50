//! Appends that bypass the page cache (`O_DIRECT`): the kernel takes a batch's
//! bytes straight from this process's buffer to the device instead of copying them
//! into cached pages first, which on a host whose cores the log shares with its
//! group was most of what a Logged topic paid for its log.
//!
//! A direct write must start and end on a block and come from a block-aligned
//! buffer, so the log's last partial block is kept here and written again, whole,
//! in front of the next batch (the bytes it already held are the same bytes, so a
//! write torn inside that block changes none of them), and a batch is padded with
//! zeros to its block's end. While the log is open the file may therefore end in
//! up to a block of zeros after its last record; recovery cuts such a tail as it
//! cuts a torn one (a zero header does not verify), and a log closed cleanly is cut
//! back to its last record.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// The unit of a direct write: a multiple of every block size in use (the
/// device's logical block and the filesystem's block).
pub(super) const BLOCK: usize = 4096;

/// The direct-write side of an open log.
#[derive(Debug)]
pub(super) struct Direct {
    file: File,
    /// Where the log's last partial block starts (a multiple of [`BLOCK`]).
    block_at: u64,
    /// That block's bytes so far (fewer than [`BLOCK`]).
    tail: Vec<u8>,
    /// The write buffer; its block-aligned part is what is written.
    stage: Vec<u8>,
}

impl Direct {
    /// Opens `path` for direct writes after its first `end` bytes, `last` being the
    /// bytes of its last partial block (`end % BLOCK` of them). `None` where the
    /// filesystem takes no direct writes (tmpfs, some network filesystems).
    pub(super) fn open(path: &Path, end: u64, last: &[u8]) -> std::io::Result<Option<Direct>> {
        debug_assert_eq!(last.len() as u64, end % BLOCK as u64);
        match OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path) {
            Ok(file) => {
                Ok(Some(Direct { file, block_at: end - last.len() as u64, tail: last.to_vec(), stage: Vec::new() }))
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The log's length in bytes: where the next record goes.
    pub(super) fn end(&self) -> u64 {
        self.block_at + self.tail.len() as u64
    }

    /// Writes `bytes` (whole records) after the log's end, with the last partial
    /// block in front and zeros after, to a block boundary. On an error the log's
    /// end is where it was (the file may hold part of the write past it, which the
    /// next write there replaces).
    pub(super) fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let total = self.tail.len() + bytes.len();
        let padded = total.div_ceil(BLOCK) * BLOCK;
        self.stage.resize(padded + BLOCK, 0);
        let at = self.stage.as_ptr().align_offset(BLOCK);
        let window = &mut self.stage[at..at + padded];
        window[..self.tail.len()].copy_from_slice(&self.tail);
        window[self.tail.len()..total].copy_from_slice(bytes);
        window[total..].fill(0);
        self.file.write_all_at(window, self.block_at)?;
        let whole = total / BLOCK * BLOCK;
        self.tail.clear();
        self.tail.extend_from_slice(&window[whole..total]);
        self.block_at += whole as u64;
        // A batch's buffer is kept only up to a modest size.
        if self.stage.capacity() > 2 << 20 {
            self.stage = Vec::new();
        }
        Ok(())
    }

    /// Flushes what was written to the device.
    pub(super) fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
}

/// True for the error a direct write gets where the device or filesystem wants
/// another alignment than [`BLOCK`]: the log goes on with buffered writes.
pub(super) fn unaligned(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

#[cfg(test)]
mod tests {
    use super::BLOCK;
    use crate::log::{scan, Fsync, SampleLog, Tail};

    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("dds-direct-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Payloads of sizes that cross block boundaries in every way: within a
    /// block, exactly to one, over several.
    fn payloads() -> Vec<Vec<u8>> {
        [0, 1, 100, 4072, 4096, 5000, 12_000, 7, 3000, 40_000, 8]
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 13 + j * 7) as u8).collect())
            .collect()
    }

    #[test]
    fn batches_and_single_records_round_trip_and_a_clean_close_leaves_no_padding() {
        let d = dir("round");
        let path = d.join("t.log");
        let p = payloads();
        let (mut log, old) = SampleLog::open(&path, Fsync::Every(3)).unwrap();
        assert!(old.is_empty());
        log.append_batch(&p[..4]).unwrap();
        for r in &p[4..7] {
            log.append(r).unwrap();
        }
        log.append_batch(&p[7..]).unwrap();
        log.sync().unwrap();
        let direct = log.direct.is_some();
        let end = log.direct.as_ref().map(|d| d.end());
        drop(log);
        let len = std::fs::metadata(&path).unwrap().len();
        if let Some(end) = end {
            assert_eq!(len, end, "cut back to the last record");
        }
        let (_, got) = SampleLog::open(&path, Fsync::Always).unwrap();
        assert_eq!(got, p, "direct writes: {direct}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_log_that_was_never_closed_recovers_every_record_written_and_is_read_whole_while_open() {
        let d = dir("crash");
        let path = d.join("t.log");
        let p = payloads();
        let (mut log, _) = SampleLog::open(&path, Fsync::Always).unwrap();
        log.append_batch(&p[..5]).unwrap();
        log.append(&p[5]).unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        let (found, tail) = scan(&on_disk);
        assert_eq!(found.len(), 6, "a reader of the open log finds every record");
        if log.direct.is_some() {
            assert_eq!(on_disk.len() % BLOCK, 0, "padded to a block while open");
            assert!(matches!(tail, Tail::Torn { .. } | Tail::Clean), "{tail:?}");
        }
        // A crash: nothing cuts the padding.
        std::mem::forget(log);
        let (mut log, got) = SampleLog::open(&path, Fsync::Always).unwrap();
        assert_eq!(got, p[..6].to_vec());
        // And appends go on after what was recovered, in the block it ends in.
        log.append_batch(&p[6..]).unwrap();
        drop(log);
        let (_, got) = SampleLog::open(&path, Fsync::Always).unwrap();
        assert_eq!(got, p);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
