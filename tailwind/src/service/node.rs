//! One member's side of the service: its state, the view callbacks, the answers to
//! the other members' requests, the primary's append path and the read path.

use super::wire::{self, Held, Msg, Reply, MAX_PAGE};
use super::{RecoveredFn, Recovery, Replicas, TailwindConfig, LOG_REGIONS};
use crate::backup::{read_segment, segment_path, Backup, Request, Response, SegmentError, SegmentId};
use crate::format::{scan, FormatError, ENTRY};
use crate::replicate::{AppendError, Lsn, Replicator};
use sst::sync::atomic::{AtomicBool, Ordering};
use sst::transport::{NodeId, RegionId, Transport};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use thiserror::Error;
use views::group::Group;
use views::view::View;

/// The most segments a member takes pages of at once (the primary copies one at a
/// time; this bounds what a confused or hostile sender can make it hold).
const MAX_SEEDING: usize = 4;

pub(super) use sst::sync::lock;

/// A segment recovered at a view's end, not yet cut to the agreed prefix.
#[derive(Debug)]
pub(super) struct Pending {
    pub id: SegmentId,
    /// The valid prefix's bytes.
    pub bytes: Vec<u8>,
    pub count: u64,
}

/// The primary's append state in one view.
pub(super) struct Primary {
    pub view: u64,
    pub t: Arc<dyn Transport>,
    pub rep: Replicator,
    /// The open segment's first record.
    pub base: u64,
    pub slot: usize,
    pub backups: Vec<NodeId>,
}

#[derive(Debug)]
pub(super) struct St {
    /// The last view started here.
    pub view: Option<View>,
    /// That view's transport while it runs (`None` once it ended).
    pub transport: Option<Arc<dyn Transport>>,
    /// The log's members in that view (the primary first).
    pub members: Vec<NodeId>,
    /// The primary of the running view takes appends (at a backup: it opened a
    /// segment here in this view).
    pub ready: bool,
    /// The recovery worker has a new view to look at.
    pub work: bool,
    pub pending: Option<Pending>,
    /// Committed segments held here: first record -> records.
    pub segments: BTreeMap<u64, u64>,
    /// Segments being re-seeded here: first record -> bytes so far.
    pub seeding: HashMap<u64, Vec<u8>>,
    pub stopped: Option<String>,
}

impl St {
    pub fn new(segments: BTreeMap<u64, u64>) -> St {
        St {
            view: None,
            transport: None,
            members: Vec::new(),
            ready: false,
            work: false,
            pending: None,
            segments,
            seeding: HashMap::new(),
            stopped: None,
        }
    }

    /// Whether the last view started here still runs.
    pub fn running(&self) -> bool {
        self.transport.is_some()
    }

    fn view_id(&self) -> Option<u64> {
        self.view.as_ref().map(|v| v.id().0)
    }

    /// Whether a request sent in view `view` may be answered now.
    fn check(&self, view: u64) -> Result<(), Reply> {
        match self.view_id() {
            Some(v) if v == view && self.running() => Ok(()),
            Some(v) if v >= view => Err(Reply::Stale),
            _ => Err(Reply::NotYet),
        }
    }
}

pub(super) struct Shared {
    pub me: NodeId,
    pub layout: Replicas,
    pub cfg: TailwindConfig,
    pub pool: Backup,
    pub st: Mutex<St>,
    pub cv: Condvar,
    /// Set when a view ends: an append waiting for its backups gives up.
    pub fence: Arc<AtomicBool>,
    pub prim: Mutex<Option<Primary>>,
    pub group: OnceLock<Weak<Group>>,
    pub on_recovered: Mutex<Option<RecoveredFn>>,
}

/// Why a read stopped.
#[derive(Debug, Error)]
pub enum ReadError {
    /// This member does not hold the records from here on (a segment it was
    /// not re-seeded with, or records before the log's start).
    #[error("this member does not hold record {0:?}")]
    Gap(Lsn),
    /// A segment file is damaged or unreadable.
    #[error(transparent)]
    Segment(#[from] SegmentError),
    /// A segment file holds another number of records than committed.
    #[error("segment {id:?} holds {have} records, {want} were committed")]
    Count {
        /// The segment.
        id: SegmentId,
        /// Records in the file.
        have: u64,
        /// Records committed.
        want: u64,
    },
    /// A segment file did not reach the disk in time.
    #[error("segment {0:?} is not on disk yet")]
    NotFlushed(SegmentId),
}

/// The committed segments on disk in `dir` for log `log` (first record ->
/// records); a damaged one is an error naming the file.
pub(super) fn existing_segments(dir: &Path, log: u64) -> Result<BTreeMap<u64, u64>, String> {
    let mut out = BTreeMap::new();
    let prefix = format!("log{log}-seg");
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".tw.part") {
            let _ = std::fs::remove_file(e.path()); // a flush a crash interrupted
            continue;
        }
        let Some(base) = name.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".tw")).and_then(|n| n.parse().ok())
        else {
            continue;
        };
        let records = read_segment(&e.path()).map_err(|e| e.to_string())?;
        out.insert(base, records.len() as u64);
    }
    Ok(out)
}

/// Where record `count` would start in a scanned buffer (the end of the first
/// `count` records).
fn end_of(bytes: &[u8], count: u64) -> usize {
    let r = scan(bytes);
    match count {
        0 => 0,
        c => {
            let last = r.records[c as usize - 1];
            last.at.0 + last.len.div_ceil(8) * 8 + ENTRY
        }
    }
}

impl Shared {
    pub fn seg(&self, base: u64) -> SegmentId {
        SegmentId { log: self.cfg.log, segment: base }
    }

    fn path(&self, base: u64) -> PathBuf {
        segment_path(&self.cfg.dir, self.seg(base))
    }

    pub fn region(&self, slot: usize) -> RegionId {
        RegionId(LOG_REGIONS + slot as u16)
    }

    pub fn group(&self) -> Option<Arc<Group>> {
        self.group.get().and_then(Weak::upgrade)
    }

    pub fn stop(&self, why: String) {
        self.fence.store(true, Ordering::Release);
        lock(&self.st).stopped.get_or_insert(why);
        self.cv.notify_all();
    }

    /// A view ends (the install thread, before its regions go): give up on the
    /// append in flight, then recover the buffer this member held open.
    pub fn view_ends(&self, _view: &View) {
        self.fence.store(true, Ordering::Release);
        lock(&self.prim).take();
        let open = self.pool.take_open();
        let mut st = lock(&self.st);
        st.ready = false;
        st.transport = None;
        if let Some((id, buf)) = open {
            let mut bytes = vec![0u8; buf.len()];
            buf.read_bytes(0, &mut bytes);
            let r = scan(&bytes);
            bytes.truncate(r.end.0);
            let count = r.records.len() as u64;
            match &st.pending {
                Some(p) if p.id.segment > id.segment => {
                    tracing::warn!(node = %self.me, ?id, kept = ?p.id, "an older open segment than the pending one")
                }
                _ => st.pending = Some(Pending { id, bytes, count }),
            }
        }
        self.cv.notify_all();
    }

    /// A view starts: take its buffers; its primary recovers (the worker).
    pub fn view_starts(&self, view: &View, t: &Arc<dyn Transport>) {
        let buffers = (0..self.cfg.buffers).filter_map(|i| t.region(self.region(i)).cloned()).collect();
        self.pool.set_buffers(buffers);
        let mut st = lock(&self.st);
        st.view = Some(view.clone());
        st.transport = Some(t.clone());
        st.members = self.layout.members(view);
        st.ready = false;
        st.work = true;
        st.seeding.clear();
        self.fence.store(false, Ordering::Release);
        self.cv.notify_all();
    }

    /// Answers another member's request frame.
    pub fn answer(&self, body: &[u8]) -> Vec<u8> {
        let reply = match wire::decode::<Msg>(body) {
            Err(why) => Reply::Failed(why),
            Ok(m) => self.handle(m),
        };
        wire::encode(&reply)
    }

    pub fn handle(&self, m: Msg) -> Reply {
        match m {
            Msg::Append { records } => {
                let refs: Vec<&[u8]> = records.iter().map(|r| r.as_slice()).collect();
                let deadline = Instant::now() + self.cfg.append_timeout;
                loop {
                    if let Some(r) = self.append_local(&refs, deadline) {
                        return match r {
                            Ok(l) => Reply::Appended(l.first().map_or(0, |l| l.0)),
                            Err(e) => Reply::Failed(e.to_string()),
                        };
                    }
                    let mut st = lock(&self.st);
                    if st.stopped.is_some() || Instant::now() >= deadline || st.members.first() != Some(&self.me) {
                        return Reply::Failed("this member is not the primary".into());
                    }
                    st = self.cv.wait_timeout(st, Duration::from_millis(20)).unwrap_or_else(|p| p.into_inner()).0;
                    drop(st);
                }
            }
            Msg::Fetch { id, offset } => self.fetch(id, offset),
            Msg::Ready { view } => {
                let mut st = lock(&self.st);
                tracing::debug!(node = %self.me, view, check = ?st.check(view), "told the log is ready");
                if let Err(r) = st.check(view) {
                    return r;
                }
                st.ready = true;
                self.cv.notify_all();
                Reply::Done
            }
            Msg::Pool { view, req } => {
                if let Err(r) = lock(&self.st).check(view) {
                    return r;
                }
                let close = match &req {
                    Request::Close { id, records, .. } => Some((id.segment, *records)),
                    Request::Open { .. } => None,
                };
                let resp = self.pool.request(req);
                let mut st = lock(&self.st);
                match (&resp, close) {
                    (Response::Closed, Some((base, n))) => {
                        st.segments.insert(base, n);
                    }
                    (Response::Opened, None) if st.check(view).is_ok() => {
                        st.ready = true;
                        self.cv.notify_all();
                    }
                    _ => {}
                }
                Reply::Pool(resp)
            }
            Msg::State { view } => {
                let st = lock(&self.st);
                if let Err(r) = st.check(view) {
                    return r;
                }
                Reply::State {
                    segments: st.segments.iter().map(|(b, c)| Held { base: *b, count: *c }).collect(),
                    pending: st.pending.as_ref().map(|p| Held { base: p.id.segment, count: p.count }),
                }
            }
            Msg::Commit { view, id, count } => {
                let mut st = lock(&self.st);
                if let Err(r) = st.check(view) {
                    return r;
                }
                if id.log != self.cfg.log {
                    return Reply::Failed(format!("segment {id:?} is not of log {}", self.cfg.log));
                }
                match st.pending.take() {
                    Some(p) if p.id == id && count <= p.count => {
                        if count > 0 {
                            let end = end_of(&p.bytes, count);
                            self.pool.flush_recovered(id, &p.bytes[..end]);
                            st.segments.insert(id.segment, count);
                        }
                        Reply::Done
                    }
                    other => {
                        let why = match &other {
                            Some(p) if p.id == id => format!("segment {id:?}: {} records held, {count} asked", p.count),
                            _ if st.segments.get(&id.segment) == Some(&count) => String::new(), // a retry
                            _ => format!("segment {id:?} is not the one recovered here"),
                        };
                        st.pending = other;
                        match why.is_empty() {
                            true => Reply::Done,
                            false => Reply::Failed(why),
                        }
                    }
                }
            }
            Msg::Store { view, id, offset, total, count, bytes } => self.store(view, id, offset, total, count, bytes),
        }
    }

    /// A page of a committed segment's file.
    fn fetch(&self, id: SegmentId, offset: u64) -> Reply {
        if id.log != self.cfg.log || !lock(&self.st).segments.contains_key(&id.segment) {
            return Reply::Failed(format!("segment {id:?} is not held here"));
        }
        let path = self.path(id.segment);
        if !path.exists() && !self.pool.wait_flushed(self.cfg.request_timeout) {
            return Reply::Failed(format!("segment {id:?} is not on disk yet"));
        }
        match std::fs::read(&path) {
            Err(e) => Reply::Failed(format!("{}: {e}", path.display())),
            Ok(b) => {
                let from = (offset as usize).min(b.len());
                let to = (from + MAX_PAGE).min(b.len());
                Reply::Page { total: b.len() as u64, bytes: b[from..to].to_vec() }
            }
        }
    }

    /// Takes a page of a segment this member lacks; the last page is verified
    /// (it must scan to its end with `count` records) and the segment flushed.
    fn store(&self, view: u64, id: SegmentId, offset: u64, total: u64, count: u64, bytes: Vec<u8>) -> Reply {
        let mut st = lock(&self.st);
        if let Err(r) = st.check(view) {
            return r;
        }
        if id.log != self.cfg.log || total as usize > self.cfg.buffer || bytes.len() > MAX_PAGE {
            return Reply::Failed(format!("segment {id:?}: {total} bytes do not fit a buffer here"));
        }
        if st.segments.get(&id.segment) == Some(&count) {
            return Reply::Done; // held already (a retry)
        }
        if !st.seeding.contains_key(&id.segment) && st.seeding.len() >= MAX_SEEDING {
            return Reply::Failed(format!("{MAX_SEEDING} segments are being re-seeded here already"));
        }
        let buf = st.seeding.entry(id.segment).or_default();
        if offset as usize != buf.len() || buf.len() + bytes.len() > total as usize {
            let have = buf.len();
            st.seeding.remove(&id.segment);
            return Reply::Failed(format!("segment {id:?}: page at {offset}, expected {have} (of {total})"));
        }
        buf.extend_from_slice(&bytes);
        if buf.len() < total as usize {
            return Reply::Done;
        }
        let all = st.seeding.remove(&id.segment).unwrap_or_default();
        let r = scan(&all);
        if r.end.0 != all.len() || r.records.len() as u64 != count {
            return Reply::Failed(format!(
                "segment {id:?} verifies to byte {} ({} records), not {total} ({count})",
                r.end.0,
                r.records.len()
            ));
        }
        self.pool.flush_recovered(id, &all);
        st.segments.insert(id.segment, count);
        Reply::Done
    }

    /// Appends at this member if it is the primary; `None` if it is not (or not yet).
    pub fn append_local(&self, records: &[&[u8]], deadline: Instant) -> Option<Result<Vec<Lsn>, AppendError>> {
        let mut p = lock(&self.prim);
        let pr = p.as_mut()?;
        loop {
            match pr.rep.append_batch(records) {
                Err(AppendError::Format(FormatError::Full { .. })) => {
                    if let Err(e) = self.rotate(pr, deadline) {
                        return Some(Err(e));
                    }
                }
                r => return Some(r),
            }
        }
    }

    /// The open buffer is full: close it everywhere and open the next.
    fn rotate(&self, pr: &mut Primary, deadline: Instant) -> Result<(), AppendError> {
        let next = pr.rep.next_lsn().0;
        let count = next - pr.base;
        let close = Request::Close { id: self.seg(pr.base), end: pr.rep.end().0 as u64, records: count };
        self.pool_all(pr.view, &pr.backups, close, deadline)?;
        lock(&self.st).segments.insert(pr.base, count);
        let slot = (pr.slot + 1) % self.cfg.buffers;
        self.pool_all(pr.view, &pr.backups, Request::Open { id: self.seg(next), slot: slot as u32 }, deadline)?;
        pr.rep = self.replicator(&pr.t, slot, &pr.backups, next)?;
        pr.base = next;
        pr.slot = slot;
        Ok(())
    }

    pub fn replicator(
        &self,
        t: &Arc<dyn Transport>,
        slot: usize,
        backups: &[NodeId],
        first: u64,
    ) -> Result<Replicator, AppendError> {
        Ok(Replicator::new(t.clone(), self.region(slot), backups.to_vec(), self.cfg.append_timeout)?
            .starting_at(Lsn(first))
            .with_fence(self.fence.clone()))
    }

    /// Sends a buffer request to every backup, then to this member's own pool;
    /// retries refusals (a buffer still flushing) until `deadline`.
    pub fn pool_all(&self, view: u64, backups: &[NodeId], req: Request, deadline: Instant) -> Result<(), AppendError> {
        let group = self.group().ok_or_else(|| AppendError::Stopped("the group is gone".into()))?;
        for &b in backups.iter().chain(std::iter::once(&self.me)) {
            let mut pause = Duration::from_micros(200);
            loop {
                if self.fence.load(Ordering::Acquire) {
                    return Err(AppendError::ViewChanged);
                }
                let reply = if b == self.me {
                    self.handle(Msg::Pool { view, req: req.clone() })
                } else {
                    let frame = wire::encode(&Msg::Pool { view, req: req.clone() });
                    match group.request(b, &frame, self.cfg.request_timeout) {
                        Ok(body) => wire::decode::<Reply>(&body).unwrap_or_else(Reply::Failed),
                        Err(e) => Reply::Failed(e.to_string()),
                    }
                };
                let why = match reply {
                    Reply::Pool(Response::Opened) | Reply::Pool(Response::Closed) => break,
                    Reply::Stale => return Err(AppendError::ViewChanged),
                    Reply::Pool(Response::Refused(why)) => why,
                    Reply::NotYet => "not in this view yet".into(),
                    Reply::Pool(Response::Error(why)) | Reply::Failed(why) => {
                        return Err(AppendError::Backup { node: b, why })
                    }
                    other => return Err(AppendError::Backup { node: b, why: format!("unexpected answer {other:?}") }),
                };
                if Instant::now() >= deadline {
                    return Err(AppendError::Unavailable(format!("{b}: {why}")));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Makes this member the primary of `view` with a recovered log, if that view
    /// still runs; then tells the application.
    pub fn become_primary(&self, pr: Primary, rec: Recovery) -> bool {
        {
            let mut p = lock(&self.prim);
            let mut st = lock(&self.st);
            if !(st.running() && st.view_id() == Some(pr.view)) || st.stopped.is_some() {
                return false;
            }
            *p = Some(pr);
            st.ready = true;
        }
        self.cv.notify_all();
        if let Some(f) = lock(&self.on_recovered).as_mut() {
            f(&rec);
        }
        true
    }

    pub fn read_from(self: &Arc<Self>, from: Lsn) -> ReadFrom {
        // The open segment first (the primary's lock comes before the state's).
        let open: Option<(u64, Vec<Vec<u8>>)> = {
            let p = lock(&self.prim);
            let (base, region, end) = match p.as_ref() {
                Some(pr) => (Some(pr.base), pr.t.region(self.region(pr.slot)).cloned(), Some(pr.rep.end().0)),
                None => match self.pool.open_buffer() {
                    Some((id, buf)) => (Some(id.segment), Some(buf), None),
                    None => (None, None, None),
                },
            };
            drop(p);
            match (base, region) {
                (Some(base), Some(buf)) => {
                    let mut bytes = vec![0u8; end.unwrap_or(buf.len()).min(buf.len())];
                    buf.read_bytes(0, &mut bytes);
                    let r = scan(&bytes);
                    Some((base, (0..r.records.len()).map(|i| r.data(&bytes, i).to_vec()).collect()))
                }
                _ => None,
            }
        };
        let st = lock(&self.st);
        let mut sources: VecDeque<Source> = st
            .segments
            .iter()
            .filter(|(b, c)| *b + *c > from.0)
            .map(|(b, c)| Source::File { base: *b, count: *c })
            .collect();
        drop(st);
        if let Some((base, recs)) = open {
            if base + recs.len() as u64 > from.0 && !recs.is_empty() {
                sources.push_back(Source::Mem { base, recs });
            }
        }
        ReadFrom { next: from.0, sources, current: VecDeque::new(), shared: self.clone(), failed: false }
    }
}

enum Source {
    File { base: u64, count: u64 },
    Mem { base: u64, recs: Vec<Vec<u8>> },
}

/// The records of a log from some number on ([`super::TailwindLog::read_from`]):
/// `(number, bytes)` in order; segment files are read one at a time as the
/// iteration reaches them. Stops after the first error.
pub struct ReadFrom {
    next: u64,
    sources: VecDeque<Source>,
    current: VecDeque<Vec<u8>>,
    shared: Arc<Shared>,
    failed: bool,
}

impl std::fmt::Debug for ReadFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadFrom").field("next", &self.next).finish()
    }
}

impl ReadFrom {
    fn load(&mut self) -> Result<bool, ReadError> {
        let Some(src) = self.sources.pop_front() else { return Ok(false) };
        let (base, recs) = match src {
            Source::Mem { base, recs } => (base, recs),
            Source::File { base, count } => {
                let id = self.shared.seg(base);
                let path = self.shared.path(base);
                if !path.exists() && !self.shared.pool.wait_flushed(self.shared.cfg.append_timeout) {
                    return Err(ReadError::NotFlushed(id));
                }
                let recs = read_segment(&path)?;
                if recs.len() as u64 != count {
                    return Err(ReadError::Count { id, have: recs.len() as u64, want: count });
                }
                (base, recs)
            }
        };
        if base > self.next {
            return Err(ReadError::Gap(Lsn(self.next)));
        }
        let skip = (self.next - base) as usize;
        self.current = recs.into_iter().skip(skip).collect();
        Ok(true)
    }
}

impl Iterator for ReadFrom {
    type Item = Result<(Lsn, Vec<u8>), ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        while self.current.is_empty() {
            match self.load() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
        let r = self.current.pop_front()?;
        let lsn = Lsn(self.next);
        self.next += 1;
        Some(Ok((lsn, r)))
    }
}
