//! The backup's side of buffer management: `open` and `close` requests (postcard
//! frames, carried by the control plane), a pool of registered buffers, and a flusher
//! thread that writes closed buffers to files, syncs them, zeroes the buffers and
//! hands them back.
//!
//! The data path never involves this code: the primary writes into an open buffer
//! with one-sided writes ([`crate::replicate`]). The buffers are regions of a view's
//! transport, the same ids at every member, so the primary names the buffer in its
//! `open`; each view brings fresh ones ([`Backup::set_buffers`]). A backup refuses
//! `open` when that buffer still waits for the disk or `max_unflushed` closed buffers
//! do, so a primary that outruns the backups' disks is told so instead of overrunning
//! them.
//! A closed buffer is checked before it is flushed: its recovery scan must end where
//! the primary said it closed it; a file read back is checked the same way
//! ([`read_segment`]).

use crate::format::{scan, Offset};
use serde::{Deserialize, Serialize};
use spindle_sst::region::Region;
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
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
    /// Take writes for this segment in buffer `slot` (the primary's choice: the
    /// buffers are the same regions at every member).
    Open {
        /// The segment.
        id: SegmentId,
        /// The buffer.
        slot: u32,
    },
    /// The segment is complete up to `end`, with `records` records: flush it.
    Close {
        /// The segment.
        id: SegmentId,
        /// Where its last append ends.
        end: u64,
        /// How many records it holds.
        records: u64,
    },
}

/// The backup's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The buffer takes the segment's writes.
    Opened,
    /// Closed; it will be flushed.
    Closed,
    /// Not now (the buffer still waits for the disk, or too many do): retry later.
    Refused(String),
    /// The request makes no sense here (unknown segment or buffer, a buffer that
    /// does not verify, a bad frame).
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

/// The tags of the records of a flushed segment (see [`read_segment`]).
pub fn segment_tags(path: &Path) -> Result<Vec<Option<crate::format::Tag>>, SegmentError> {
    let bytes = std::fs::read(path).map_err(|source| SegmentError::Io { path: path.into(), source })?;
    let r = scan(&bytes);
    if r.end.0 != bytes.len() {
        return Err(SegmentError::Corrupt { path: path.into(), valid_end: r.end.0, len: bytes.len() });
    }
    Ok(r.records.iter().map(|x| x.tag).collect())
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

/// A closed buffer waiting for the disk: the buffer (kept alive past its view),
/// its segment and how many bytes to write.
#[derive(Debug)]
struct Job {
    /// The buffer to zero and free afterwards (none for a recovered segment).
    slot: Option<(usize, Arc<Region>)>,
    id: SegmentId,
    /// The segment's bytes (read once, for the check at close).
    bytes: Aligned,
}

/// A block for direct I/O.
const BLOCK: usize = 4096;

/// Bytes whose start is aligned to [`BLOCK`], zero-padded to a whole number of
/// blocks: what a direct (page-cache-bypassing) write takes.
#[derive(Debug)]
struct Aligned {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn zeroed(len: usize) -> Aligned {
        let raw = vec![0u8; Aligned::padded_len(len) + BLOCK];
        let off = (BLOCK - raw.as_ptr() as usize % BLOCK) % BLOCK;
        Aligned { raw, off, len }
    }

    fn padded_len(len: usize) -> usize {
        len.div_ceil(BLOCK).max(1) * BLOCK
    }

    fn bytes(&self) -> &[u8] {
        &self.raw[self.off..self.off + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.off..self.off + self.len]
    }

    fn padded(&self) -> &[u8] {
        &self.raw[self.off..self.off + Aligned::padded_len(self.len)]
    }
}

#[derive(Debug)]
struct State {
    /// The current view's buffers and what each holds.
    buffers: Vec<Arc<Region>>,
    slots: Vec<Slot>,
    queue: VecDeque<Job>,
    /// Closed buffers not yet on disk (queued or being written), of any view.
    unflushed: usize,
    stop: bool,
    /// Flushing held (tests: a disk slower than the primary).
    held: bool,
    /// The last flush error, if any (reported to the next request).
    failed: Option<String>,
}

#[derive(Debug)]
struct Shared {
    cfg: BackupConfig,
    state: Mutex<State>,
    wake: Condvar,
}

use spindle_sst::sync::lock;

/// A backup's buffer pool and flusher (see the module docs).
#[derive(Debug)]
pub struct Backup {
    shared: Arc<Shared>,
    flusher: Option<JoinHandle<()>>,
}

impl Backup {
    /// A backup flushing into `cfg.dir`, with no buffers until
    /// [`Backup::set_buffers`].
    pub fn new(cfg: BackupConfig) -> std::io::Result<Backup> {
        std::fs::create_dir_all(&cfg.dir)?;
        let shared = Arc::new(Shared {
            cfg,
            state: Mutex::new(State {
                buffers: Vec::new(),
                slots: Vec::new(),
                queue: VecDeque::new(),
                unflushed: 0,
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

    /// Takes a new set of buffers (registered regions, zeroed; slot `i` is
    /// `buffers[i]`), all free: a new view's. Buffers of the previous set that wait
    /// for the disk are still flushed; one still open is forgotten (take it first
    /// with [`Backup::take_open`]).
    pub fn set_buffers(&self, buffers: Vec<Arc<Region>>) {
        let mut st = lock(&self.shared.state);
        st.slots = vec![Slot::Free; buffers.len()];
        st.buffers = buffers;
    }

    /// The open segment and its buffer, if one is open.
    pub fn open_buffer(&self) -> Option<(SegmentId, Arc<Region>)> {
        let st = lock(&self.shared.state);
        st.slots.iter().zip(&st.buffers).find_map(|(s, b)| match s {
            Slot::Open(id) => Some((*id, b.clone())),
            _ => None,
        })
    }

    /// The open segment and its buffer, if one is open; the pool forgets it (a view
    /// ends: the caller recovers what the buffer holds).
    pub fn take_open(&self) -> Option<(SegmentId, Arc<Region>)> {
        let mut st = lock(&self.shared.state);
        let slot = st.slots.iter().position(|s| matches!(s, Slot::Open(_)))?;
        let Slot::Open(id) = st.slots[slot] else { return None };
        st.slots[slot] = Slot::Free;
        Some((id, st.buffers[slot].clone()))
    }

    /// Queues `bytes` of segment `id` for the disk as if a buffer holding them had
    /// been closed (a segment recovered at a view change, cut at the agreed end).
    pub fn flush_recovered(&self, id: SegmentId, bytes: &[u8]) {
        let mut st = lock(&self.shared.state);
        st.unflushed += 1;
        let mut a = Aligned::zeroed(bytes.len());
        a.bytes_mut().copy_from_slice(bytes);
        st.queue.push_back(Job { slot: None, id, bytes: a });
        drop(st);
        self.shared.wake.notify_all();
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
            Request::Open { id, slot } => {
                let slot = slot as usize;
                match st.slots.get(slot) {
                    None => Response::Error(format!("no buffer {slot} here ({} buffers)", st.slots.len())),
                    Some(Slot::Open(o)) if *o == id => Response::Opened, // a retried open
                    Some(Slot::Open(o)) => Response::Error(format!("buffer {slot} holds open segment {o:?}")),
                    Some(Slot::Flushing(_)) => Response::Refused(format!("buffer {slot} still waits for the disk")),
                    Some(Slot::Free) if st.unflushed >= self.shared.cfg.max_unflushed => {
                        Response::Refused(format!("{} closed buffers wait for the disk", st.unflushed))
                    }
                    Some(Slot::Free) => {
                        st.slots[slot] = Slot::Open(id);
                        Response::Opened
                    }
                }
            }
            Request::Close { id, end, records } => {
                let Some(slot) = st.slots.iter().position(|s| *s == Slot::Open(id)) else {
                    // A retried close: the segment waits for the disk, or is on it.
                    let done = st.slots.contains(&Slot::Flushing(id))
                        || st.queue.iter().any(|j| j.id == id)
                        || segment_path(&self.shared.cfg.dir, id).exists();
                    return match done {
                        true => Response::Closed,
                        false => Response::Error(format!("segment {id:?} is not open here")),
                    };
                };
                let buf = st.buffers[slot].clone();
                let end = end as usize;
                if end > buf.len() {
                    return Response::Error(format!("end {end} is past the {}-byte buffer", buf.len()));
                }
                let mut bytes = Aligned::zeroed(end);
                buf.read_bytes(0, bytes.bytes_mut());
                let r = scan(bytes.bytes());
                if r.end != Offset(end) || r.records.len() as u64 != records {
                    return Response::Error(format!(
                        "segment {id:?} verifies up to byte {} ({} records), not {end} ({records}): not closing it",
                        r.end.0,
                        r.records.len()
                    ));
                }
                st.slots[slot] = Slot::Flushing(id);
                st.unflushed += 1;
                st.queue.push_back(Job { slot: Some((slot, buf)), id, bytes });
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
        lock(&self.shared.state).unflushed
    }

    /// Why flushing failed, if it did (the pool then refuses every request).
    pub fn failed(&self) -> Option<String> {
        lock(&self.shared.state).failed.clone()
    }

    /// Waits (bounded) until every closed buffer is on disk; true if so.
    pub fn wait_flushed(&self, within: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + within;
        let mut st = lock(&self.shared.state);
        while st.unflushed > 0 && st.failed.is_none() {
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
        let result = flush(&sh.cfg.dir, job.id, &job.bytes);
        if let (Ok(()), Some((_, buf))) = (&result, &job.slot) {
            zero(buf, job.bytes.len);
        }
        let mut st = lock(&sh.state);
        st.unflushed -= 1;
        match result {
            Ok(()) => {
                // Free the slot if it is still this view's buffer.
                if let Some((slot, buf)) = &job.slot {
                    let slot = *slot;
                    if st.buffers.get(slot).is_some_and(|b| Arc::ptr_eq(b, buf)) {
                        st.slots[slot] = Slot::Free;
                    }
                }
            }
            Err(e) => st.failed = Some(format!("segment {:?}: {e}", job.id)),
        }
        drop(st);
        sh.wake.notify_all();
    }
}

/// Writes a segment file: whole, synced, then renamed into place. The write
/// bypasses the page cache (`O_DIRECT`: the disk takes the bytes from this buffer
/// without the kernel copying them, which was most of a backup's CPU time) where
/// the file system allows it, and goes through the cache where it does not.
fn flush(dir: &Path, id: SegmentId, bytes: &Aligned) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = segment_path(dir, id);
    let tmp = path.with_extension("tw.part");
    let direct = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_DIRECT)
            .open(&tmp)?;
        f.write_all(bytes.padded())?;
        f.set_len(bytes.len as u64)?;
        f.sync_all()
    })();
    if direct.is_err() {
        let mut f = crate::format::create_private(&tmp)?;
        f.write_all(bytes.bytes())?;
        f.sync_all()?;
    }
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
