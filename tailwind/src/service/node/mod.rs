//! One member's side of the service: its state, the view callbacks, the answers to
//! the other members' requests, the primary's append path and the read path.

use super::wire::{self, Held, Msg, Reply, MAX_PAGE};
use super::{RecoveredFn, Recovery, TailwindConfig};
use crate::backup::{read_segment, segment_path, Backup, Request, Response, SegmentError, SegmentId};
use crate::format::{scan, FormatError, ENTRY};
use crate::replicate::{AppendError, Lsn, Replicator};
use spindle_sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spindle_sst::transport::{NodeId, RegionId, Transport};
use spindle_views::group::Group;
use spindle_views::view::View;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use thiserror::Error;

/// The most segments a member takes pages of at once (the primary copies one at a
/// time; this bounds what a confused or hostile sender can make it hold).
const MAX_SEEDING: usize = 4;

pub(super) use spindle_sst::sync::lock;

/// The log's members in a view, the primary first.
pub(super) type MembersFn = Box<dyn Fn(&View) -> Vec<NodeId> + Send + Sync>;

/// A segment recovered at a view's end, not yet cut to the agreed prefix.
#[derive(Debug)]
pub(super) struct Pending {
    pub id: SegmentId,
    /// The valid prefix's bytes.
    pub bytes: Vec<u8>,
    pub count: u64,
    /// Read from this member's `.open` file at start (`Ack::Disk`), not scanned
    /// from a buffer at a view's end.
    pub from_disk: bool,
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
    /// The trim floor: segments that end at or before it are gone.
    pub trimmed: u64,
}

impl St {
    pub fn new(segments: BTreeMap<u64, u64>, trimmed: u64) -> St {
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
            trimmed,
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
    /// The log's members in a view, the primary first.
    pub members_of: MembersFn,
    /// The first of the log's regions in every view's transport.
    pub region_base: u16,
    pub cfg: TailwindConfig,
    pub pool: Backup,
    pub st: Mutex<St>,
    pub cv: Condvar,
    /// Set when this member wedges its view for a change, or the view ends: an
    /// append waiting for its backups gives up, and none is acknowledged.
    pub fence: Arc<AtomicBool>,
    /// One more than the id of the last view this member wedged (0: none).
    pub wedged_view: AtomicU64,
    pub prim: Mutex<Option<Primary>>,
    pub group: OnceLock<Weak<Group>>,
    pub on_recovered: Mutex<Option<RecoveredFn>>,
    /// Tailing readers waiting here (the primary wakes them after an append only
    /// if there are any).
    pub tail_waiters: AtomicU64,
    /// The tagged appends in the log (the primary's; taken after `prim`).
    pub dedupe: Mutex<dedupe::Dedupe>,
    /// Appends acknowledged by this member as the primary: records, batches,
    /// data bytes.
    pub counts: [AtomicU64; 3],
    /// `Ack::Disk`: the first record not on this member's disk yet.
    pub durable: AtomicU64,
    /// `Ack::Disk`: one commit-point publication at a time.
    pub publishing: Mutex<()>,
    /// Views started here, and the appends this member took for the others.
    pub others: Mutex<Others>,
}

/// What a reader at the primary that keeps track of its own appends must also
/// know ([`crate::service::LogService::others`]): how many views started at
/// this member (a new one may have a new primary, and records it recovered),
/// and the appends it took as the primary for other members (forwarded to it):
/// how many are under way and the newest record of those that returned.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Others {
    /// Views started at this member.
    pub views: u64,
    /// Forwarded appends under way.
    pub busy: u64,
    /// The newest record a forwarded append returned.
    pub last: Option<Lsn>,
}

/// The committed segments on disk in `dir` for log `log` (first record ->
/// records), and the trim floor; a damaged one is an error naming the file. A
/// segment below the floor (a trim interrupted) is removed.
pub(super) fn existing_segments(dir: &Path, log: u64) -> Result<(BTreeMap<u64, u64>, u64), String> {
    let floor = trim::read_floor(dir, log)?;
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
        if base + records.len() as u64 <= floor {
            let _ = std::fs::remove_file(e.path());
            continue;
        }
        out.insert(base, records.len() as u64);
    }
    Ok((out, floor))
}

/// Where record `count` would start in a scanned buffer (the end of the first
/// `count` records).
fn end_of(bytes: &[u8], count: u64) -> usize {
    match count {
        0 => 0,
        c => scan(bytes).records[c as usize - 1].end.0,
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
        RegionId(self.region_base + slot as u16)
    }

    /// The region whose word 0 is the commit point: the number of the first
    /// record not acknowledged yet (the primary writes it after each append).
    pub fn commit_region(&self) -> RegionId {
        RegionId(self.region_base + self.cfg.buffers as u16)
    }

    pub fn group(&self) -> Option<Arc<Group>> {
        self.group.get().and_then(Weak::upgrade)
    }

    /// Stops this member: appends fail with `why`, and the view's transport and
    /// buffers are let go (so that a transport's files go with its group, even
    /// while the host keeps this member).
    pub fn stop(&self, why: String) {
        self.fence.store(true, Ordering::SeqCst);
        // An append in flight sees the fence and gives the primary's lock back.
        lock(&self.prim).take();
        {
            let mut st = lock(&self.st);
            st.stopped.get_or_insert(why);
            st.transport = None;
            st.ready = false;
        }
        self.pool.set_buffers(Vec::new());
        self.cv.notify_all();
    }

    /// A view ends (the install thread, before its regions go): give up on the
    /// append in flight, then recover the buffer this member held open.
    pub fn view_ends(&self, _view: &View) {
        self.fence.store(true, Ordering::SeqCst);
        // Not ready from now on: appenders wait for the next primary instead of
        // retrying on this one while the append in flight gives up.
        lock(&self.st).ready = false;
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
                _ => st.pending = Some(Pending { id, bytes, count, from_disk: false }),
            }
        }
        self.cv.notify_all();
    }

    /// This member wedged its view for a change (the predicate thread, before the
    /// others learn it): the primary acknowledges no append from now on, so that
    /// every append it acknowledged was written to each backup before the wedged
    /// row the backups see before they scan (see [`crate::replicate`]).
    pub fn wedged(&self, view: &View) {
        self.wedged_view.store(view.id().0 + 1, Ordering::SeqCst);
        self.fence.store(true, Ordering::SeqCst);
        self.cv.notify_all();
    }

    /// This member was removed while alive and is back (before the view that has
    /// it again starts): what it scanned of its open buffer is dropped. Every
    /// acknowledged record of that segment is held by the members that stayed,
    /// while this buffer may hold records they dropped, under a base they may
    /// have opened again; the new primary re-seeds it with what it lacks.
    pub fn rejoined(&self) {
        let mut st = lock(&self.st);
        if let Some(p) = st.pending.take() {
            tracing::info!(node = %self.me, id = ?p.id, records = p.count, "rejoined: dropping the scanned open segment");
        }
        st.seeding.clear();
    }

    /// A view starts: take its buffers; its primary recovers (the worker).
    pub fn view_starts(&self, view: &View, t: &Arc<dyn Transport>) {
        let buffers = (0..self.cfg.buffers).filter_map(|i| t.region(self.region(i)).cloned()).collect();
        self.pool.set_buffers(buffers);
        lock(&self.others).views += 1;
        let mut st = lock(&self.st);
        st.view = Some(view.clone());
        st.transport = Some(t.clone());
        st.members = (self.members_of)(view);
        st.ready = false;
        st.work = true;
        st.seeding.clear();
        // Down for the new view, unless it wedged already (its predicate thread
        // runs before this): either this sees the wedge, or the wedge comes after.
        self.fence.store(false, Ordering::SeqCst);
        if self.wedged_view.load(Ordering::SeqCst) == view.id().0 + 1 {
            self.fence.store(true, Ordering::SeqCst);
        }
        self.cv.notify_all();
    }
}

mod append;
mod dedupe;
mod disk;
mod read;
mod serve;
mod tail;
mod trim;

pub use append::AppendOpts;
pub use dedupe::{PER_PRODUCER, SCAN_SEGMENTS};
pub use disk::MAX_REPLICAS;
pub(super) use disk::{recover_open_files, sync_loop};
pub use read::{ReadError, ReadFrom};
pub use tail::Tail;
#[cfg(feature = "async")]
pub use tail::TailStream;
