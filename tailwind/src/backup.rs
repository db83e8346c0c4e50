//! The backup's side of buffer management: `open` and `close` requests (postcard
//! frames, carried by the control plane), a pool of registered buffers, and a flusher
//! thread that writes closed buffers to files, syncs them, zeroes the buffers and
//! hands them back.
//!
//! The data path never involves this code: the primary writes into an open buffer
//! with one-sided writes ([`crate::replicate`]). A backup refuses `open` when it has
//! no free buffer or already `max_unflushed` closed buffers waiting for the disk, so
//! a primary that outruns the backups' disks is told so instead of overrunning them.
//! A closed buffer is checked before it is flushed: its recovery scan must end where
//! the primary said it closed it; a file read back is checked the same way
//! ([`read_segment`]).

use crate::format::{scan, Offset};
use serde::{Deserialize, Serialize};
use sst::region::Region;
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use thiserror::Error;

/// Buffers are this large unless configured otherwise (8 MB).
pub const DEFAULT_BUFFER: usize = 8 << 20;

/// A segment of a log: which log, and its number in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SegmentId {
    /// The log.
    pub log: u64,
    /// The segment's number in the log.
    pub segment: u64,
}

/// A request from the primary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Take writes for this segment in a free buffer.
    Open(SegmentId),
    /// The segment is complete up to `end`: flush it.
    Close {
        /// The segment.
        id: SegmentId,
        /// Where its last append ends.
        end: u64,
    },
}

/// The backup's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// Write the segment into buffer `slot` (the registered region of that index).
    Opened {
        /// The buffer.
        slot: u32,
    },
    /// Closed; it will be flushed.
    Closed,
    /// Not now (no free buffer, or too many waiting for the disk): retry later.
    Refused(String),
    /// The request makes no sense here (unknown segment, a buffer that does not
    /// verify, a bad frame).
    Error(String),
}

/// Why a flushed segment cannot be read back.
#[derive(Debug, Error)]
pub enum SegmentError {
    /// The file could not be read.
    #[error("segment file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file does not verify to its end: it is damaged.
    #[error("segment file {path} is corrupt: valid records end at byte {valid_end} of {len}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the valid prefix ends.
        valid_end: usize,
        /// The file's length.
        len: usize,
    },
}

/// The records of a flushed segment file, in order. A file that does not verify to
/// its last byte is [`SegmentError::Corrupt`]: flushed files are written whole and
/// synced, so any damage is an error, never a shorter log.
pub fn read_segment(path: &Path) -> Result<Vec<Vec<u8>>, SegmentError> {
    let bytes = std::fs::read(path).map_err(|source| SegmentError::Io { path: path.into(), source })?;
    let r = scan(&bytes);
    if r.end.0 != bytes.len() {
        return Err(SegmentError::Corrupt { path: path.into(), valid_end: r.end.0, len: bytes.len() });
    }
    Ok((0..r.records.len()).map(|i| r.data(&bytes, i).to_vec()).collect())
}

/// The file a segment is flushed to.
pub fn segment_path(dir: &Path, id: SegmentId) -> PathBuf {
    dir.join(format!("log{}-seg{}.tw", id.log, id.segment))
}

/// A backup's configuration.
#[derive(Debug, Clone)]
pub struct BackupConfig {
    /// Where closed segments go.
    pub dir: PathBuf,
    /// The most closed buffers waiting for the disk before `open` is refused.
    pub max_unflushed: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Free,
    Open(SegmentId),
    Flushing(SegmentId),
}

#[derive(Debug)]
struct State {
    slots: Vec<Slot>,
    queue: VecDeque<(usize, SegmentId, usize)>,
    stop: bool,
    /// Flushing held (tests: a disk slower than the primary).
    held: bool,
    /// The last flush error, if any (reported to the next request).
    failed: Option<String>,
}

#[derive(Debug)]
struct Shared {
    cfg: BackupConfig,
    buffers: Vec<Arc<Region>>,
    state: Mutex<State>,
    wake: Condvar,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A backup's buffer pool and flusher (see the module docs).
#[derive(Debug)]
pub struct Backup {
    shared: Arc<Shared>,
    flusher: Option<JoinHandle<()>>,
}

impl Backup {
    /// A backup over `buffers` (registered regions, zeroed; slot `i` is
    /// `buffers[i]`), flushing into `cfg.dir`.
    pub fn new(cfg: BackupConfig, buffers: Vec<Arc<Region>>) -> std::io::Result<Backup> {
        std::fs::create_dir_all(&cfg.dir)?;
        let n = buffers.len();
        let shared = Arc::new(Shared {
            cfg,
            buffers,
            state: Mutex::new(State {
                slots: vec![Slot::Free; n],
                queue: VecDeque::new(),
                stop: false,
                held: false,
                failed: None,
            }),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        let flusher = std::thread::Builder::new().name("tailwind-flush".into()).spawn(move || flush_loop(&s))?;
        Ok(Backup { shared, flusher: Some(flusher) })
    }

    /// Answers one request frame (postcard [`Request`] in, [`Response`] out); bad
    /// bytes get [`Response::Error`].
    pub fn handle(&self, frame: &[u8]) -> Vec<u8> {
        let resp = match postcard::from_bytes::<Request>(frame) {
            Err(e) => Response::Error(format!("bad request: {e}")),
            Ok(req) => self.request(req),
        };
        postcard::to_stdvec(&resp).unwrap_or_default()
    }

    /// Answers one request.
    pub fn request(&self, req: Request) -> Response {
        let mut st = lock(&self.shared.state);
        if let Some(why) = st.failed.clone() {
            return Response::Error(format!("this backup could not flush: {why}"));
        }
        match req {
            Request::Open(id) => {
                if let Some(slot) = st.slots.iter().position(|s| *s == Slot::Open(id)) {
                    return Response::Opened { slot: slot as u32 }; // a retried open
                }
                let waiting = st.slots.iter().filter(|s| matches!(s, Slot::Flushing(_))).count();
                if waiting >= self.shared.cfg.max_unflushed {
                    return Response::Refused(format!("{waiting} closed buffers wait for the disk"));
                }
                match st.slots.iter().position(|s| *s == Slot::Free) {
                    Some(slot) => {
                        st.slots[slot] = Slot::Open(id);
                        Response::Opened { slot: slot as u32 }
                    }
                    None => Response::Refused("no free buffer".into()),
                }
            }
            Request::Close { id, end } => {
                let Some(slot) = st.slots.iter().position(|s| *s == Slot::Open(id)) else {
                    // A retried close: the segment waits for the disk, or is on it.
                    let done =
                        st.slots.contains(&Slot::Flushing(id)) || segment_path(&self.shared.cfg.dir, id).exists();
                    return match done {
                        true => Response::Closed,
                        false => Response::Error(format!("segment {id:?} is not open here")),
                    };
                };
                let buf = &self.shared.buffers[slot];
                let end = end as usize;
                if end > buf.len() {
                    return Response::Error(format!("end {end} is past the {}-byte buffer", buf.len()));
                }
                let mut bytes = vec![0u8; end];
                buf.read_bytes(0, &mut bytes);
                let r = scan(&bytes);
                if r.end != Offset(end) {
                    return Response::Error(format!(
                        "segment {id:?} verifies up to byte {} only, not {end}: not closing it",
                        r.end.0
                    ));
                }
                st.slots[slot] = Slot::Flushing(id);
                st.queue.push_back((slot, id, end));
                drop(st);
                self.shared.wake.notify_all();
                Response::Closed
            }
        }
    }

    /// Holds or releases the flusher (for tests of a disk that falls behind).
    #[doc(hidden)]
    pub fn hold_flushing(&self, hold: bool) {
        lock(&self.shared.state).held = hold;
        self.shared.wake.notify_all();
    }

    /// Closed buffers not yet on disk.
    pub fn unflushed(&self) -> usize {
        lock(&self.shared.state).slots.iter().filter(|s| matches!(s, Slot::Flushing(_))).count()
    }

    /// Waits (bounded) until every closed buffer is on disk; true if so.
    pub fn wait_flushed(&self, within: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + within;
        let mut st = lock(&self.shared.state);
        while st.slots.iter().any(|s| matches!(s, Slot::Flushing(_))) && st.failed.is_none() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            st = self.shared.wake.wait_timeout(st, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        st.failed.is_none()
    }
}

impl Drop for Backup {
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.wake.notify_all();
        if let Some(h) = self.flusher.take() {
            let _ = h.join();
        }
    }
}

/// The flusher: closed buffers to files (written whole, then synced), then zeroed
/// and freed.
fn flush_loop(sh: &Shared) {
    loop {
        let mut st = lock(&sh.state);
        let job = loop {
            if !st.held {
                if let Some(j) = st.queue.pop_front() {
                    break j;
                }
            }
            if st.stop {
                return;
            }
            st = sh.wake.wait(st).unwrap_or_else(|p| p.into_inner());
        };
        drop(st);
        let (slot, id, end) = job;
        let buf = &sh.buffers[slot];
        let result = flush(&sh.cfg.dir, id, buf, end);
        if result.is_ok() {
            zero(buf, end);
        }
        let mut st = lock(&sh.state);
        match result {
            Ok(()) => st.slots[slot] = Slot::Free,
            Err(e) => st.failed = Some(format!("segment {id:?}: {e}")),
        }
        drop(st);
        sh.wake.notify_all();
    }
}

fn flush(dir: &Path, id: SegmentId, buf: &Region, end: usize) -> std::io::Result<()> {
    let mut bytes = vec![0u8; end];
    buf.read_bytes(0, &mut bytes);
    let path = segment_path(dir, id);
    let tmp = path.with_extension("tw.part");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Zeroes the first `end` bytes of a buffer (the rest was never written).
fn zero(buf: &Region, end: usize) {
    let zeros = vec![0u8; 64 << 10];
    let mut at = 0;
    while at < end {
        let n = zeros.len().min(end - at).div_ceil(8) * 8;
        buf.write_bytes(at, &zeros[..n.min(buf.len() - at)]);
        at += n;
    }
}
