//! One member's handle on one log, independent of who owns the group: the
//! stand-alone [`super::TailwindLog`] and a host running several logs beside other
//! subgroups (a DDS domain) both drive it through the same calls.
//!
//! A host creates the service ([`LogService::new`]) with the log's members as a
//! function of the view (the primary first) and the first of its region ids,
//! registers [`LogService::regions`] in every view's transport, forwards the
//! group's hooks (`view_starts`, `view_ends`, `wedged`, `rejoined`) and the request
//! frames whose [`super::wire::log_of`] is this log's number ([`LogService::answer`]),
//! then [`LogService::attach`]es it to the group once it runs.

use super::node::{self, Shared, St};
use super::{wire, Recovery, StartError, TailwindConfig};
use crate::backup::{Backup, BackupConfig, SegmentId};
use crate::format::{extent, Tag, TAG_BYTES};
use crate::replicate::{AppendError, Lsn};
use node::{AppendOpts, Others, ReadFrom, Tail};
use spindle_sst::transport::{NodeId, RegionId, RegionSpec, Transport};
use spindle_views::group::Group;
use spindle_views::view::View;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The regions a log with settings `cfg` takes from `base` on: its buffers, then
/// its commit word's.
pub fn regions(base: u16, cfg: &TailwindConfig) -> Vec<RegionSpec> {
    let mut r: Vec<RegionSpec> =
        (0..cfg.buffers).map(|i| RegionSpec { id: RegionId(base + i as u16), len: cfg.buffer }).collect();
    r.push(RegionSpec { id: RegionId(base + cfg.buffers as u16), len: 64 });
    r
}

/// An application's request handler (see [`LogService::serve_app`]): a request
/// body in, the answer out.
pub(super) type AppFn = Arc<dyn Fn(&[u8]) -> Vec<u8> + Send + Sync>;

/// One member of one replicated log (see the module docs).
pub struct LogService {
    pub(super) shared: Arc<Shared>,
    /// Tailing readers kept between pages ([`LogService::read_page`]).
    pub(super) pages: Mutex<Vec<Tail>>,
    /// The application's request handler ([`LogService::serve_app`]).
    pub(super) app: Mutex<Option<AppFn>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    syncer: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for LogService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogService").field("node", &self.shared.me).field("log", &self.shared.cfg.log).finish()
    }
}

impl LogService {
    /// This member (`me`) of log `cfg.log`, holding its buffers in regions
    /// `region_base..region_base + cfg.buffers` of every view's transport; the
    /// log's members in a view are `members(view)`, the primary first. Reads the
    /// segments `cfg.dir` holds.
    pub fn new(
        me: NodeId,
        cfg: TailwindConfig,
        region_base: u16,
        members: impl Fn(&View) -> Vec<NodeId> + Send + Sync + 'static,
    ) -> Result<LogService, StartError> {
        cfg.validate()?;
        if region_base < spindle_views::group::APP_REGIONS || region_base.checked_add(cfg.buffers as u16 + 1).is_none()
        {
            return Err(StartError::Config(format!("region ids from {region_base:#x} are not the application's")));
        }
        let pool = Backup::new(BackupConfig { dir: cfg.dir.clone(), max_unflushed: cfg.max_unflushed })
            .map_err(|e| StartError::Files(format!("{}: {e}", cfg.dir.display())))?;
        let (mut segments, floor) = node::existing_segments(&cfg.dir, cfg.log).map_err(StartError::Files)?;
        // Ack::Disk's synced open segments (none otherwise).
        let pending = node::recover_open_files(&cfg.dir, cfg.log, floor, &mut segments).map_err(StartError::Files)?;
        let shared = Arc::new(Shared {
            me,
            members_of: Box::new(members),
            region_base,
            cfg,
            pool,
            st: Mutex::new(St::new(segments, floor)),
            cv: Condvar::new(),
            fence: Default::default(),
            wedged_view: Default::default(),
            prim: Mutex::new(None),
            group: OnceLock::new(),
            on_recovered: Mutex::new(None),
            tail_waiters: Default::default(),
            dedupe: Default::default(),
            counts: Default::default(),
            durable: Default::default(),
            publishing: Default::default(),
            others: Default::default(),
        });
        node::lock(&shared.st).pending = pending;
        Ok(LogService {
            shared,
            pages: Mutex::default(),
            app: Mutex::default(),
            worker: Mutex::new(None),
            syncer: Mutex::new(None),
        })
    }

    /// The regions the log takes in every view's transport: its buffers, then
    /// its commit word's (ids `region_base ..= region_base + buffers`).
    pub fn regions(&self) -> Vec<RegionSpec> {
        regions(self.shared.region_base, &self.shared.cfg)
    }

    /// The log's regions written at `node` in `view`: all of them where `node`
    /// holds the log (its primary writes its own buffers and the backups'), none
    /// elsewhere. For [`spindle_views::group::GroupBuilder::reserve_regions_by`].
    pub fn held_regions(&self, view: &View, node: NodeId) -> Vec<RegionId> {
        match (self.shared.members_of)(view).contains(&node) {
            true => self.regions().into_iter().map(|r| r.id).collect(),
            false => Vec::new(),
        }
    }

    /// Starts the member's recovery worker on `group` (held weakly: the host owns
    /// it). Once only; a second call is an error.
    pub fn attach(&self, group: &Arc<Group>) -> Result<(), StartError> {
        if self.shared.group.set(Arc::downgrade(group)).is_err() {
            return Err(StartError::Config("the log is attached to a group already".into()));
        }
        let s = self.shared.clone();
        let worker = std::thread::Builder::new()
            .name(format!("tailwind-{}", self.shared.cfg.log))
            .spawn(move || super::recover::work(&s))
            .map_err(|e| StartError::Config(format!("cannot start the worker thread: {e}")))?;
        *node::lock(&self.worker) = Some(worker);
        if self.shared.disk() {
            let s = self.shared.clone();
            let syncer = std::thread::Builder::new()
                .name(format!("tailwind-sync-{}", self.shared.cfg.log))
                .spawn(move || node::sync_loop(&s))
                .map_err(|e| StartError::Config(format!("cannot start the syncer thread: {e}")))?;
            *node::lock(&self.syncer) = Some(syncer);
        }
        Ok(())
    }

    /// Whether [`LogService::attach`] was called.
    pub fn is_attached(&self) -> bool {
        self.shared.group.get().is_some()
    }

    /// The group's `on_view_start` hook.
    pub fn view_starts(&self, view: &View, t: &Arc<dyn Transport>) {
        self.shared.view_starts(view, t)
    }

    /// The group's `on_view_end` hook.
    pub fn view_ends(&self, view: &View) {
        self.shared.view_ends(view)
    }

    /// The group's `on_wedge` hook (quick, never blocks).
    pub fn wedged(&self, view: &View) {
        self.shared.wedged(view)
    }

    /// The group's `on_rejoin` hook.
    pub fn rejoined(&self) {
        self.shared.rejoined()
    }

    /// Answers a request frame of this log (see [`super::wire`]).
    pub fn answer(&self, body: &[u8]) -> Vec<u8> {
        if let Some(answer) = self.answer_app(body) {
            return answer;
        }
        let log = self.shared.cfg.log;
        let reply = match wire::decode::<wire::Msg>(log, body) {
            Err(why) => wire::Reply::Failed(why),
            Ok(wire::Msg::Read { from, max }) => self.answer_read(from, max),
            Ok(m) => self.shared.handle(m),
        };
        wire::encode(log, &reply)
    }

    /// The log's number.
    pub fn log(&self) -> u64 {
        self.shared.cfg.log
    }

    /// The log's settings.
    pub fn config(&self) -> &TailwindConfig {
        &self.shared.cfg
    }

    /// The log's members in the last view this member started, the primary first.
    pub fn members(&self) -> Vec<NodeId> {
        node::lock(&self.shared.st).members.clone()
    }

    /// Stops this member of the log: appends and waits fail with `why`.
    pub fn stop(&self, why: &str) {
        self.shared.stop(why.into());
        let threads = [node::lock(&self.worker).take(), node::lock(&self.syncer).take()];
        for w in threads.into_iter().flatten() {
            // The worker itself may drop the last handle on the group, and so this.
            if w.thread().id() != std::thread::current().id() {
                let _ = w.join();
            }
        }
    }

    /// This member.
    pub fn node(&self) -> NodeId {
        self.shared.me
    }

    /// The current primary, if the log takes appends now (the primary recovered).
    pub fn primary(&self) -> Option<NodeId> {
        // Ready at the primary itself only once it took over (`become_primary`;
        // see `opened_makes_ready`), so this never names it before that.
        let st = node::lock(&self.shared.st);
        st.ready.then(|| st.members.first().copied()).flatten()
    }

    /// The views started at this member and the appends it took for other
    /// members as the primary (see [`Others`]): with its own appends, what a
    /// reader at the primary must wait for.
    pub fn others(&self) -> Others {
        *node::lock(&self.shared.others)
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
            if st.ready && !self.shared.fence.load(spindle_sst::sync::atomic::Ordering::SeqCst) {
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
        self.append_with(records, AppendOpts::default())
    }

    /// Appends `data` as record number `seq` of `producer` (a number the caller
    /// keeps, e.g. random per process) so that it lands **once** however often
    /// it is tried: a retry finds it in the log and returns its number. Retries
    /// by itself (through failovers) until the append timeout; after any error the
    /// caller may call it again with the same numbers. Numbers go up per producer;
    /// see [`super::PER_PRODUCER`] and [`super::SCAN_SEGMENTS`] for how far back a
    /// retry is recognized.
    pub fn append_once(&self, producer: u64, seq: u64, data: &[u8]) -> Result<Lsn, AppendError> {
        Ok(self.append_batch_once(producer, seq, &[data])?[0])
    }

    /// [`LogService::append_once`] of a batch numbered `first_seq`, `first_seq + 1`,
    /// ...; a retry must repeat the batch whole ([`AppendError::Sequence`]
    /// otherwise). The numbers returned are consecutive unless a retry found them.
    pub fn append_batch_once(&self, producer: u64, first_seq: u64, records: &[&[u8]]) -> Result<Vec<Lsn>, AppendError> {
        let deadline = Instant::now() + self.shared.cfg.append_timeout;
        let opts = AppendOpts { tag: Some(Tag { producer, seq: first_seq }), expect: None };
        loop {
            match self.append_with(records, opts) {
                Err(AppendError::ViewChanged | AppendError::Timeout(_) | AppendError::Backup { .. })
                    if Instant::now() < deadline =>
                {
                    self.wait_for_primary(deadline.saturating_duration_since(Instant::now()));
                }
                r => return r,
            }
        }
    }

    /// Appends `records` only if the log's next record number is `expected`
    /// (a single writer's state machine: nothing appended since it last looked);
    /// [`AppendError::Conflict`] with the actual next number otherwise.
    pub fn append_if(&self, expected: Lsn, records: &[&[u8]]) -> Result<Vec<Lsn>, AppendError> {
        self.append_with(records, AppendOpts { tag: None, expect: Some(expected.0) })
    }

    fn append_with(&self, records: &[&[u8]], opts: AppendOpts) -> Result<Vec<Lsn>, AppendError> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let tag = if opts.tag.is_some() { TAG_BYTES } else { 0 };
        let need: usize = records.iter().map(|r| extent(r.len() + tag)).sum();
        if need > self.shared.cfg.buffer {
            return Err(AppendError::TooLarge { need, buffer: self.shared.cfg.buffer });
        }
        let deadline = Instant::now() + self.shared.cfg.append_timeout;
        loop {
            if let Some(r) = self.shared.append_here(records, opts, deadline) {
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
                Some(p) if p != self.shared.me => return self.forward(p, records, opts, deadline),
                _ => {
                    if Instant::now() >= deadline {
                        return Err(AppendError::Unavailable("no primary recovered within the append timeout".into()));
                    }
                    self.wait_for_primary(Duration::from_millis(50));
                }
            }
        }
    }

    fn forward(
        &self,
        to: NodeId,
        records: &[&[u8]],
        opts: AppendOpts,
        deadline: Instant,
    ) -> Result<Vec<Lsn>, AppendError> {
        let msg = wire::Msg::Append {
            records: records.iter().map(|r| r.to_vec()).collect(),
            tag: opts.tag.map(|t| (t.producer, t.seq)),
            expect: opts.expect,
        };
        let within = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
        let group = self.shared.group().ok_or_else(|| AppendError::Stopped("the group is gone".into()))?;
        let body = group
            .request_service(super::wire::SERVICE, to, &wire::encode(self.shared.cfg.log, &msg), within)
            .map_err(|e| AppendError::Backup { node: to, why: format!("forwarding to the primary: {e}") })?;
        match wire::decode::<wire::Reply>(self.shared.cfg.log, &body) {
            Ok(wire::Reply::Appended(l)) if l.len() == records.len() => Ok(l.into_iter().map(Lsn).collect()),
            Ok(wire::Reply::Conflict(next)) => Err(AppendError::Conflict { next: Lsn(next) }),
            Ok(wire::Reply::Sequence(why)) => Err(AppendError::Sequence(why)),
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
    /// [`super::ReadError::Gap`].
    pub fn read_from(&self, from: Lsn) -> ReadFrom {
        self.shared.read_from(from)
    }

    /// The log's records from `from` on as they commit (acknowledged appends
    /// only, never one that a failover may drop), blocking while there are no
    /// more: see [`Tail`]. At a member that does not hold the log (not one of its
    /// replicas) it reports [`super::ReadError::NotReplica`].
    pub fn subscribe(&self, from: Lsn) -> Tail {
        Tail::new(self.shared.clone(), from)
    }

    /// The commit point as this member knows it: the number of the first record
    /// not known to be acknowledged (`None` where the log is not held).
    pub fn committed(&self) -> Option<Lsn> {
        self.shared.committed().map(|(c, _)| Lsn(c))
    }

    /// Removes the log's committed segments that end at or before record
    /// `before` at every member of the log (a snapshot of what they held is kept
    /// elsewhere: see the key-value store in `bench`); returns how many this member
    /// removed. Reads from a trimmed record on report [`super::ReadError::Gap`]. A
    /// member that misses it (down, or not a member now) is trimmed by the next
    /// primary's recovery; `before` past the commit point is refused.
    pub fn trim(&self, before: Lsn) -> Result<usize, AppendError> {
        // Only committed segments are ever removed; the check is for the caller.
        let committed = self.shared.committed().map_or(u64::MAX, |(c, _)| c);
        if before.0 > committed {
            return Err(AppendError::Unavailable(format!("trim to {before:?} past the commit point {committed}")));
        }
        let members = node::lock(&self.shared.st).members.clone();
        let group = self.shared.group().ok_or_else(|| AppendError::Stopped("the group is gone".into()))?;
        let mut here = 0;
        for m in members {
            if m == self.shared.me {
                here = self.shared.trim_here(before.0).map_err(|why| AppendError::Backup { node: m, why })?;
                continue;
            }
            let frame = wire::encode(self.shared.cfg.log, &wire::Msg::Trim { before: before.0 });
            let reply = group
                .request_service(super::wire::SERVICE, m, &frame, self.shared.cfg.request_timeout)
                .map_err(|e| e.to_string())
                .and_then(|b| wire::decode::<wire::Reply>(self.shared.cfg.log, &b));
            match reply {
                Ok(wire::Reply::Trimmed(_)) => {}
                Ok(wire::Reply::Failed(why)) | Err(why) => {
                    tracing::warn!(node = %self.shared.me, to = %m, %why, "a member missed a trim (the next recovery trims it)");
                }
                Ok(other) => tracing::warn!(to = %m, ?other, "unexpected answer to a trim"),
            }
        }
        Ok(here)
    }

    /// The trim floor here: records before it may be gone.
    pub fn trimmed(&self) -> Lsn {
        Lsn(node::lock(&self.shared.st).trimmed)
    }

    /// Called at the primary each time it takes over (its first view included),
    /// after recovery, on the thread that recovered, just after it began to take
    /// appends: a caller that sees [`LogService::is_primary`] may get there before
    /// the hook ran.
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
}

impl Drop for LogService {
    fn drop(&mut self) {
        self.stop("the log was dropped");
    }
}
