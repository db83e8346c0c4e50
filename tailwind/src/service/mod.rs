//! Tailwind as a service of a [`spindle_views::group::Group`]: a replicated log whose
//! primary is the first of the log's members in the view and whose backups are
//! the others. [`LogService`] is one member of one log, driven by whoever owns the
//! group: [`TailwindLog`] (a group of its own, the [`Replicas`] layout: the first
//! `replicas` members of the view in rank order) or a DDS domain, which runs
//! several logs beside its topics with their primaries spread over the members
//! (`spindle_dds::logs`).
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
//! buffer when the backup scans it. The primary acknowledges an append only once
//! every backup's transport completed its write (the bytes are in the backup's
//! memory: landed on mem and shm, applied before the acknowledgement frame on tcp),
//! and only if it has not wedged its view yet (`views`' `on_wedge` raises the
//! fence before the wedged row goes out). A backup scans after it learns the
//! next view's commit, which the view's leader posts only after it saw the wedged
//! row of every member that stays, the primary included; a primary that does not
//! stay is cut off at each backup's transport before that backup scans. Either
//! way the write completed before the scan, whoever the leader is. It is therefore
//! in the prefix that *every* surviving member holds; records past the shortest
//! survivor's prefix were never acknowledged.
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
//! again (`spindle_views::config::Config::rejoin`) with its committed segments only: what it
//! scanned of its open buffer is dropped (the members that stayed hold every
//! acknowledged record of it, and it may hold records they dropped), and the new
//! primary re-seeds it with the segments it lacks.
//!
//! **Not done:** a restart of the *whole* group recovers only segments already on
//! disk (closed or committed), not the buffers of the view that was running; a
//! record larger than a buffer is refused.
//!
//! ```no_run
//! use spindle_tailwind::service::{TailwindConfig, TailwindLog};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let group = spindle_views::config::Config::from_toml(
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

mod app;
mod member;
mod metrics;
mod node;
mod page;
mod recover;
pub mod wire;

pub use crate::replicate::{AppendError, Lsn};
pub use app::{AppError, APP};
pub use member::{regions, LogService};
pub use metrics::LogMetrics;
#[cfg(feature = "async")]
pub use node::TailStream;
pub use node::{Others, ReadError, ReadFrom, Tail, MAX_REPLICAS as MAX_DISK_REPLICAS, PER_PRODUCER, SCAN_SEGMENTS};
use spindle_smc::{Mode, SubgroupSpec};
use spindle_sst::transport::NodeId;
use spindle_views::group::{Group, GroupBuilder, APP_REGIONS};
use spindle_views::layout::{Layout, LayoutError};
use spindle_views::view::{View, ViewId};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

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
    /// When an append is acknowledged: in every replica's memory (the default), or
    /// also on the disk of a majority of the replicas ([`Ack`]).
    pub ack: Ack,
}

/// When an append is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Ack {
    /// Once every replica holds it in memory (its buffer): a failure of some
    /// replicas loses nothing acknowledged; a restart of all of them loses what
    /// was not in a closed segment yet.
    #[default]
    Memory,
    /// Once every replica holds it in memory **and** a majority of the replicas
    /// have it on disk: each replica's syncer thread writes its open buffer's new
    /// records to a file and syncs it, many appends at a time (group commit), and
    /// tells the primary how far it got. A restart of every replica (kill -9 of
    /// all) loses no acknowledged append.
    Disk,
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
            ack: Ack::Memory,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), StartError> {
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
        if self.ack == Ack::Disk && self.replicas > MAX_DISK_REPLICAS {
            return bad("Ack::Disk takes at most 7 replicas");
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
        Ok(vec![SubgroupSpec { members, senders, window: 4, max_msg: 64, arena: 0, mode: Mode::Ordered, relay: false }])
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
    Group(#[from] spindle_views::group::StartError),
}

/// What a primary recovered when it took over (see [`LogService::on_recovered`]).
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

/// A member of a replicated log that owns its group (see the module docs): a
/// [`LogService`] over a group of its own, running the [`Replicas`] layout. Every
/// [`LogService`] call works on it (`Deref`).
pub struct TailwindLog {
    service: Arc<LogService>,
    group: Arc<Group>,
}

impl std::fmt::Debug for TailwindLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TailwindLog").field("node", &self.service.node()).finish()
    }
}

impl std::ops::Deref for TailwindLog {
    type Target = LogService;
    fn deref(&self) -> &LogService {
        &self.service
    }
}

impl TailwindLog {
    /// Starts (or joins, if `group.contact` is set) the group and this member of
    /// the log. The group runs the [`Replicas`] layout; the log uses its control
    /// plane and its regions [`LOG_REGIONS`]..
    pub fn start(group: spindle_views::config::Config, cfg: TailwindConfig) -> Result<TailwindLog, StartError> {
        TailwindLog::start_with(group, cfg, |b| b)
    }

    /// [`TailwindLog::start`], with `more` adding to the group's builder what the
    /// application needs beside the log (a client handler, say: see
    /// [`GroupBuilder::client_handler`]). The log's own hooks are set after it:
    /// `more` must not replace them.
    pub fn start_with(
        group: spindle_views::config::Config,
        cfg: TailwindConfig,
        more: impl FnOnce(GroupBuilder) -> GroupBuilder,
    ) -> Result<TailwindLog, StartError> {
        if group.node_id == spindle_views::config::AUTO_ID {
            // Its segment files and its place among the replicas go by the node id,
            // which a restarted member must keep.
            return Err(StartError::Config("a Tailwind member needs an explicit node_id".into()));
        }
        let layout = Replicas(cfg.replicas);
        let service = Arc::new(LogService::new(NodeId(group.node_id), cfg, LOG_REGIONS, move |v| layout.members(v))?);
        let (s1, s2, s3, s4, s5, s6) =
            (service.clone(), service.clone(), service.clone(), service.clone(), service.clone(), service.clone());
        let group = more(GroupBuilder::new(group))
            .on_rejoin(move |_| s4.rejoined())
            .on_wedge(move |v| s5.wedged(v))
            .layout(layout)
            .regions(service.regions())
            .reserve_regions_by(move |v, n| s6.held_regions(v, n))
            .on_view_end(move |v, _| s1.view_ends(v))
            .on_view_start(move |v, t| s2.view_starts(v, t))
            .serve(wire::SERVICE, move |body| s3.answer(body))
            .start()?;
        let group = Arc::new(group);
        service.attach(&group)?;
        Ok(TailwindLog { service, group })
    }

    /// The group the log runs in.
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// Leaves the group gracefully (see [`Group::leave`]).
    pub fn leave(&self, within: Duration) -> bool {
        self.group.leave(within)
    }
}

impl Drop for TailwindLog {
    fn drop(&mut self) {
        self.service.stop("the log was dropped");
        self.group.shutdown();
    }
}
