//! Tailwind as a service of a [`views::group::Group`]: a replicated log whose
//! primary is the first member of the log's subgroup and whose backups are the
//! others ([`Replicas`]: the first `replicas` members of the view in rank order).
//!
//! ```text
//!  view v:  primary ──one-sided writes──▶ backup buffers (regions of v's transport)
//!             │  append: own buffer, one write per backup, ack on every completion
//!             │  buffer full: close (backups verify, flush to a file) + open the next
//!  view ends: every member scans the buffer it held open  (Algorithm 1)
//!  view v+1:  the new primary asks the members what they hold, commits the agreed
//!             prefix of that segment, re-seeds members that lack segments, opens
//!             the next segment, and takes appends again
//! ```
//!
//! **The recovered prefix.** Every acknowledged append is in every backup's
//! buffer when the backup scans it: the primary waits for every write completion,
//! and it acknowledges nothing once it has wedged its view for the change
//! (`views`' `on_wedge`, before its wedged row goes out). So each acknowledged
//! write was posted before that row, which the backup receives after it (one
//! link, in order) and before the commit of the next view, which comes after it
//! from the view's leader, the primary itself (the log's members are the view's
//! first ones). It is therefore in the prefix that *every* surviving member
//! holds; records past the shortest survivor's prefix were never acknowledged.
//! The new primary therefore commits the **shortest** recovered prefix among the
//! survivors. Taking the longest instead
//! would also keep every acknowledged record, but it would make the log hold
//! records only one node has, and the segment would have to be copied to the
//! others before the log could go on; the shortest is held by all already. An
//! append whose outcome the caller never learned (the primary died, or
//! [`AppendError::ViewChanged`]) may be in the log or not: read the log to know.
//!
//! **Cut-off.** A member the view change removes is disconnected at the transport
//! (by `views`) before the survivors scan, and each view has fresh buffers, so a
//! late write of a failed primary cannot land in what is scanned or in the next
//! view's buffers.
//!
//! **Re-seeding.** A member that lacks committed segments (it joined the subgroup
//! to replace a failed one) gets them from the new primary, page by page, before
//! the log takes appends in the new view; so does the primary, from any member
//! that has them.
//!
//! **Rejoin.** A member removed while alive (a stall, a partition) ends the view
//! it was removed from as any view ends (a primary stops taking appends) and joins
//! again (`views::config::Config::rejoin`) with its committed segments only: what it
//! scanned of its open buffer is dropped (the members that stayed hold every
//! acknowledged record of it, and it may hold records they dropped), and the new
//! primary re-seeds it with the segments it lacks.
//!
//! **Not done:** a restart of the *whole* group recovers only segments already on
//! disk (closed or committed), not the buffers of the view that was running; a
//! record larger than a buffer is refused.
//!
//! ```no_run
//! use tailwind::service::{TailwindConfig, TailwindLog};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let group = views::config::Config::from_toml(
//!     "node_id = 0\nlisten = \"127.0.0.1:7100\"\ntransport = \"shm\"\nname = \"logs\"",
//! )?;
//! let log = TailwindLog::start(group, TailwindConfig::new("/tmp/tw-node0"))?;
//! let lsn = log.append(b"hello")?;
//! for r in log.read_from(lsn) {
//!     let (lsn, bytes) = r?;
//!     println!("{lsn:?}: {}", String::from_utf8_lossy(&bytes));
//! }
//! # Ok(()) }
//! ```

mod node;
mod recover;
pub mod wire;

use crate::backup::{Backup, BackupConfig, SegmentId};
use crate::format::extent;
pub use crate::replicate::{AppendError, Lsn};
pub use node::{ReadError, ReadFrom};
use node::{Shared, St};
use smc::{Mode, SubgroupSpec};
use sst::transport::{NodeId, RegionId, RegionSpec};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;
use views::group::{Group, GroupBuilder, APP_REGIONS};
use views::layout::{Layout, LayoutError};
use views::view::{View, ViewId};

/// The log's buffers are regions `LOG_REGIONS`, `LOG_REGIONS + 1`, ... of every
/// view's transport.
pub const LOG_REGIONS: u16 = APP_REGIONS + 0x100;

/// A log's settings.
#[derive(Debug, Clone)]
pub struct TailwindConfig {
    /// Where this member keeps its segment files.
    pub dir: PathBuf,
    /// The log's number (in the file names).
    pub log: u64,
    /// Members holding the log: the primary and `replicas - 1` backups (fewer while
    /// the group has fewer members).
    pub replicas: usize,
    /// Bytes per buffer (a segment's size).
    pub buffer: usize,
    /// Buffers per view (one open, the others closed and flushing).
    pub buffers: usize,
    /// Closed buffers that may wait for the disk before a backup refuses to open.
    pub max_unflushed: usize,
    /// How long an append waits (for the backups, for a new buffer, or for a
    /// primary after a failure) before it fails.
    pub append_timeout: Duration,
    /// How long one control request (open, close, recovery) waits for its answer.
    pub request_timeout: Duration,
}

impl TailwindConfig {
    /// The defaults: replication factor 3, two buffers of 8 MB, files in `dir`.
    pub fn new(dir: impl AsRef<Path>) -> TailwindConfig {
        TailwindConfig {
            dir: dir.as_ref().to_path_buf(),
            log: 0,
            replicas: 3,
            buffer: crate::backup::DEFAULT_BUFFER,
            buffers: 2,
            max_unflushed: 2,
            append_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(2),
        }
    }

    fn validate(&self) -> Result<(), StartError> {
        let bad = |why: &str| Err(StartError::Config(why.into()));
        if self.replicas == 0 {
            return bad("replicas must be at least 1");
        }
        if self.buffer < 256 || self.buffer % 8 != 0 || self.buffer > 1 << 30 {
            return bad("buffer must be a multiple of 8 between 256 bytes and 1 GiB");
        }
        if !(2..=64).contains(&self.buffers) {
            return bad("buffers must be between 2 and 64");
        }
        if self.max_unflushed == 0 {
            return bad("max_unflushed must be at least 1");
        }
        Ok(())
    }
}

/// The layout a log's group runs: one subgroup, the log's members (the first
/// `replicas` members of the view; the first of them is the primary).
#[derive(Debug, Clone, Copy)]
pub struct Replicas(pub usize);

impl Replicas {
    /// The log's members in `view`.
    pub fn members(&self, view: &View) -> Vec<NodeId> {
        view.members().iter().take(self.0.max(1)).copied().collect()
    }
}

impl Layout for Replicas {
    fn subgroups(&self, view: &View) -> Result<Vec<SubgroupSpec>, LayoutError> {
        let members = self.members(view);
        if members.is_empty() {
            return Err(LayoutError::NeedMembers { need: 1, have: 0 });
        }
        // The log itself sends nothing on it: it names who holds the log.
        let senders = members[..1].to_vec();
        Ok(vec![SubgroupSpec { members, senders, window: 4, max_msg: 64, arena: 0, mode: Mode::Ordered }])
    }
}

/// Why a log could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// A setting is out of range.
    #[error("tailwind config: {0}")]
    Config(String),
    /// The segment directory or a file in it is unusable.
    #[error("tailwind files: {0}")]
    Files(String),
    /// The group did not start.
    #[error(transparent)]
    Group(#[from] views::group::StartError),
}

/// What a primary recovered when it took over (see [`TailwindLog::on_recovered`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The view it took over in.
    pub view: ViewId,
    /// The number the next append gets (the log holds `0..next`).
    pub next: Lsn,
    /// Records that some member had recovered past the agreed prefix (never
    /// acknowledged) and that were dropped.
    pub dropped: u64,
    /// Segments copied to members that lacked them.
    pub reseeded: usize,
}

type RecoveredFn = Box<dyn FnMut(&Recovery) + Send>;

/// A member of a replicated log (see the module docs).
pub struct TailwindLog {
    shared: Arc<Shared>,
    group: Arc<Group>,
    worker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TailwindLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TailwindLog").field("node", &self.shared.me).finish()
    }
}

impl TailwindLog {
    /// Starts (or joins, if `group.contact` is set) the group and this member of
    /// the log. The group runs the [`Replicas`] layout; the log uses its control
    /// plane and its regions [`LOG_REGIONS`]..
    pub fn start(group: views::config::Config, cfg: TailwindConfig) -> Result<TailwindLog, StartError> {
        cfg.validate()?;
        if group.node_id == views::config::AUTO_ID {
            // Its segment files and its place among the replicas go by the node id,
            // which a restarted member must keep.
            return Err(StartError::Config("a Tailwind member needs an explicit node_id".into()));
        }
        let pool = Backup::new(BackupConfig { dir: cfg.dir.clone(), max_unflushed: cfg.max_unflushed })
            .map_err(|e| StartError::Files(format!("{}: {e}", cfg.dir.display())))?;
        let segments = node::existing_segments(&cfg.dir, cfg.log).map_err(StartError::Files)?;
        let shared = Arc::new(Shared {
            me: NodeId(group.node_id),
            layout: Replicas(cfg.replicas),
            cfg: cfg.clone(),
            pool,
            st: Mutex::new(St::new(segments)),
            cv: Condvar::new(),
            fence: Default::default(),
            wedged_view: Default::default(),
            prim: Mutex::new(None),
            group: OnceLock::new(),
            on_recovered: Mutex::new(None),
        });
        let regions =
            (0..cfg.buffers).map(|i| RegionSpec { id: RegionId(LOG_REGIONS + i as u16), len: cfg.buffer }).collect();
        let (s1, s2, s3, s4, s5) = (shared.clone(), shared.clone(), shared.clone(), shared.clone(), shared.clone());
        let group = GroupBuilder::new(group)
            .on_rejoin(move |_| s4.rejoined())
            .on_wedge(move |v| s5.wedged(v))
            .layout(Replicas(cfg.replicas))
            .regions(regions)
            .on_view_end(move |v, _| s1.view_ends(v))
            .on_view_start(move |v, t| s2.view_starts(v, t))
            .on_request(move |body| s3.answer(body))
            .start()?;
        let group = Arc::new(group);
        let _ = shared.group.set(Arc::downgrade(&group));
        let s = shared.clone();
        let g = group.clone();
        let worker = std::thread::Builder::new()
            .name("tailwind".into())
            .spawn(move || recover::work(&s, &g))
            .map_err(|e| StartError::Config(format!("cannot start the worker thread: {e}")))?;
        Ok(TailwindLog { shared, group, worker: Some(worker) })
    }

    /// The group the log runs in.
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// This member.
    pub fn node(&self) -> NodeId {
        self.shared.me
    }

    /// The current primary, if the log takes appends now (the primary recovered).
    pub fn primary(&self) -> Option<NodeId> {
        let st = node::lock(&self.shared.st);
        st.ready.then(|| st.members.first().copied()).flatten()
    }

    /// True if this member is the primary and takes appends.
    pub fn is_primary(&self) -> bool {
        node::lock(&self.shared.prim).is_some()
    }

    /// Waits up to `within` until some member is the primary and takes appends
    /// (as far as this member knows; not while a view change is under way, from
    /// this member's wedge until the next view's primary recovered); returns it.
    pub fn wait_for_primary(&self, within: Duration) -> Option<NodeId> {
        let deadline = Instant::now() + within;
        let mut st = node::lock(&self.shared.st);
        loop {
            if st.ready && !self.shared.fence.load(sst::sync::atomic::Ordering::SeqCst) {
                return st.members.first().copied();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || st.stopped.is_some() {
                return None;
            }
            st = self
                .shared
                .cv
                .wait_timeout(st, left.min(Duration::from_millis(50)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Appends one record and returns its number once every backup holds it. At
    /// a member that is not the primary the record is sent to the primary. Waits
    /// (up to the append timeout) through a failover.
    ///
    /// On [`AppendError::ViewChanged`], [`AppendError::Backup`] or
    /// [`AppendError::Timeout`] the record may or may not be in the log.
    pub fn append(&self, data: &[u8]) -> Result<Lsn, AppendError> {
        Ok(self.append_batch(&[data])?[0])
    }

    /// Appends several records with one write per backup and one wait (the
    /// pipelined form: a caller with many records passes them together); returns
    /// their numbers, consecutive, once every backup holds all of them.
    pub fn append_batch(&self, records: &[&[u8]]) -> Result<Vec<Lsn>, AppendError> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let need: usize = records.iter().map(|r| extent(r.len())).sum();
        if need > self.shared.cfg.buffer {
            return Err(AppendError::TooLarge { need, buffer: self.shared.cfg.buffer });
        }
        let deadline = Instant::now() + self.shared.cfg.append_timeout;
        loop {
            if let Some(r) = self.shared.append_local(records, deadline) {
                return r;
            }
            // Not the primary: forward to it if there is one, else wait for one.
            let primary = {
                let st = node::lock(&self.shared.st);
                if let Some(why) = &st.stopped {
                    return Err(AppendError::Stopped(why.clone()));
                }
                st.ready.then(|| st.members.first().copied()).flatten()
            };
            match primary {
                Some(p) if p != self.shared.me => return self.forward(p, records, deadline),
                _ => {
                    if Instant::now() >= deadline {
                        return Err(AppendError::Unavailable("no primary recovered within the append timeout".into()));
                    }
                    self.wait_for_primary(Duration::from_millis(50));
                }
            }
        }
    }

    fn forward(&self, to: NodeId, records: &[&[u8]], deadline: Instant) -> Result<Vec<Lsn>, AppendError> {
        let msg = wire::Msg::Append { records: records.iter().map(|r| r.to_vec()).collect() };
        let within = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
        let body = self
            .group
            .request(to, &wire::encode(&msg), within)
            .map_err(|e| AppendError::Backup { node: to, why: format!("forwarding to the primary: {e}") })?;
        match wire::decode::<wire::Reply>(&body) {
            Ok(wire::Reply::Appended(first)) => Ok((first..first + records.len() as u64).map(Lsn).collect()),
            Ok(wire::Reply::Failed(why)) => Err(AppendError::Backup { node: to, why }),
            Ok(other) => Err(AppendError::Backup { node: to, why: format!("unexpected answer {other:?}") }),
            Err(why) => Err(AppendError::Backup { node: to, why }),
        }
    }

    /// The records from `from` on, in order, as this member holds them: committed
    /// segments (from their files), then the open buffer. At the primary these
    /// are exactly the acknowledged records; at a backup the open buffer's last
    /// record may be one whose append was not acknowledged yet (a failover may
    /// drop it). A member that lacks a segment (re-seeding not done) reports
    /// [`ReadError::Gap`].
    pub fn read_from(&self, from: Lsn) -> ReadFrom {
        self.shared.read_from(from)
    }

    /// Called at the primary each time it takes over (its first view included),
    /// after recovery and before it takes appends.
    pub fn on_recovered(&self, f: impl FnMut(&Recovery) + Send + 'static) {
        *node::lock(&self.shared.on_recovered) = Some(Box::new(f));
    }

    /// Segments this member holds on disk or is writing there, by first record.
    pub fn segments(&self) -> Vec<(SegmentId, u64)> {
        let st = node::lock(&self.shared.st);
        st.segments.iter().map(|(b, c)| (self.shared.seg(*b), *c)).collect()
    }

    /// Waits (bounded) until every closed segment is on this member's disk.
    pub fn wait_flushed(&self, within: Duration) -> bool {
        self.shared.pool.wait_flushed(within)
    }

    /// Leaves the group gracefully (see [`Group::leave`]).
    pub fn leave(&self, within: Duration) -> bool {
        self.group.leave(within)
    }
}

impl Drop for TailwindLog {
    fn drop(&mut self) {
        self.shared.stop("the log was dropped".into());
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
        self.group.shutdown();
    }
}
