//! A member of a sharded store: one group whose layout is [`ShardLayout`], a
//! Tailwind log and a store per shard, the client service that runs the
//! [`super::rules`], and a driver thread that runs the pullers of the shards this
//! member is the primary of.
//!
//! ```no_run
//! use spindle_kv::shard::host::{HostConfig, ShardHost};
//! use spindle_kv::shard::client::ShardClient;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let group = spindle_views::config::Config::from_file("node.toml")?;
//! let host = ShardHost::start(group, HostConfig::new("/var/lib/kv", 4))?;
//! // Anywhere: a client reaches each key's shard primary directly.
//! let c = ShardClient::connect(&["127.0.0.1:7300".parse()?], None)?;
//! c.put(b"colour", b"blue")?;
//! assert_eq!(c.get(b"colour")?.as_deref(), Some(&b"blue"[..]));
//! # drop(host); Ok(()) }
//! ```
//!
//! A member holds the stores of the shards whose logs it holds a copy of (the
//! shard's subgroup in the current view): it opens a store when it becomes one
//! of the shard's replicas and closes it when it stops being one. A store
//! opened again goes on from what it had applied, through the log (or from a
//! checkpoint of another member's, where the log was trimmed past it).

use super::layout::ShardLayout;
use super::map::{MapEdit, Range, Shard, ShardMap};
use crate::{Store, StoreError};
use spindle_sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spindle_sst::sync::{lock, read, write};
use spindle_sst::transport::NodeId;
use spindle_tailwind::service::{wire as tw, Ack, LogService, StartError, TailwindConfig, LOG_REGIONS};
use spindle_views::group::{Group, GroupBuilder};
use spindle_views::view::View;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

mod driver;
mod serve;

/// Regions each shard's log may take (its buffers and commit word).
const REGIONS_PER_SHARD: u16 = 64;

/// Values read from a migration's old owner on demand, and their bytes.
type ReadCache = (std::collections::HashMap<Vec<u8>, Vec<u8>>, usize);

/// A shard's store over its log.
pub type ShardStore = Store<Arc<LogService>>;

/// How a member of a sharded store runs; [`HostConfig::new`] gives defaults.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Where its logs and stores live (`shard-<s>/log`, `shard-<s>/store`).
    pub dir: PathBuf,
    /// Shards (the same at every member).
    pub shards: u16,
    /// Copies of each shard's log.
    pub replicas: usize,
    /// When a write is acknowledged (see [`Ack`]).
    pub ack: Ack,
    /// Each log buffer's bytes.
    pub buffer: usize,
    /// Records a migration pulls per batch (by default
    /// [`super::puller::BATCH_KEYS`], whose docs give the trade between tails and
    /// speed).
    pub pull_batch: u32,
    /// The share of the time a migration's puller works (0 < share <= 1): after
    /// each batch it pauses so that asking for and logging batches takes this
    /// share of the time, leaving the rest to the clients' requests.
    pub pull_share: f64,
    /// Whether a migration asks the old owner for its next batch while this
    /// shard's log takes the last one (two batches in flight; see
    /// [`super::puller::Puller::ask_ahead`]), or one batch at a time.
    pub pull_ahead: bool,
}

impl HostConfig {
    /// `shards` shards in `dir`: 3 replicas, acknowledged in memory, 1 MiB buffers,
    /// migrations pulling [`super::puller::BATCH_KEYS`] records at a time a
    /// quarter of the time (`pull_share` 0.25: on this project's 2-core host, with
    /// the two shards' primaries on two members, it kept about 0.78x of the
    /// throughput during a move, moving about 9-12 MB/s with batches of 64; with
    /// batches of 256, 0.1 kept 0.73-0.83x at 4-5 MB/s, 0.5 about 0.6x at 18-23
    /// MB/s; docs/benchmarks.md).
    pub fn new(dir: impl Into<PathBuf>, shards: u16) -> HostConfig {
        HostConfig {
            dir: dir.into(),
            shards,
            replicas: 3,
            ack: Ack::Memory,
            buffer: 1 << 20,
            pull_batch: super::puller::BATCH_KEYS,
            pull_share: 0.25,
            pull_ahead: true,
        }
    }
}

/// Why a member did not start (or an operator's request failed).
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The number of shards is out of range.
    #[error(transparent)]
    Map(#[from] super::MapError),
    /// A shard's log (or the group) did not start.
    #[error(transparent)]
    Log(#[from] StartError),
    /// The group did not start.
    #[error(transparent)]
    Group(#[from] spindle_views::group::StartError),
    /// A shard's store did not open.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The map's edit was refused, or no view took it in time.
    #[error(transparent)]
    Edit(#[from] spindle_views::layout::EditError),
    /// The driver thread did not start.
    #[error("no driver thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// What admission needs of the current view, and the requests in flight.
#[derive(Debug)]
struct ViewState {
    map: ShardMap,
    version: u64,
    wedged: bool,
    /// Requests admitted and not answered: (id, the map version admitted under).
    inflight: Vec<(u64, u64)>,
    next: u64,
}

pub(crate) struct Inner {
    layout: ShardLayout,
    pull_batch: u32,
    /// Bytes a pulled batch holds at most: a quarter of a log buffer (a batch is
    /// one record of the new owner's log).
    pull_bytes: u32,
    pull_share: f64,
    pull_ahead: bool,
    me: NodeId,
    group: OnceLock<Weak<Group>>,
    logs: Vec<Arc<LogService>>,
    /// Where the shards' stores live.
    dir: PathBuf,
    /// Each shard's store, while this member holds a copy of the shard's log
    /// (read by every request; written when a view moves a shard's replicas).
    stores: RwLock<Vec<Option<Arc<ShardStore>>>>,
    view: Mutex<ViewState>,
    changed: Condvar,
    stop: AtomicBool,
    /// Records and bytes this member's pullers logged.
    pulled: (AtomicU64, AtomicU64),
    /// For each migration this member pulls: the last key of the batches logged
    /// (every record of the range up to it is in this shard's log).
    cursors: Mutex<std::collections::BTreeMap<u64, Vec<u8>>>,
    /// Values read from the old owner on demand, per migration pulled here (see
    /// `serve`).
    read_cache: Mutex<std::collections::BTreeMap<u64, ReadCache>>,
}

/// A running member (see the module docs).
pub struct ShardHost {
    inner: Arc<Inner>,
    group: Arc<Group>,
    driver: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ShardHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardHost").field("node", &self.inner.me).finish()
    }
}

impl ShardHost {
    /// Starts (or joins, with `group.contact`) the store's group as a member.
    pub fn start(group: spindle_views::config::Config, cfg: HostConfig) -> Result<ShardHost, HostError> {
        let first = ShardMap::new(cfg.shards)?;
        if group.node_id == spindle_views::config::AUTO_ID {
            return Err(StartError::Config("a sharded store's member needs an explicit node_id".into()).into());
        }
        let me = NodeId(group.node_id);
        let layout = ShardLayout { shards: cfg.shards, replicas: cfg.replicas };
        let mut logs = Vec::new();
        for s in 0..cfg.shards {
            let tw = TailwindConfig {
                log: u64::from(s),
                replicas: cfg.replicas,
                buffer: cfg.buffer,
                ack: cfg.ack,
                ..TailwindConfig::new(cfg.dir.join(format!("shard-{s}")).join("log"))
            };
            let base = LOG_REGIONS + s * REGIONS_PER_SHARD;
            logs.push(Arc::new(LogService::new(me, tw, base, move |v| layout.replicas_of(s, v))?));
        }
        let view = ViewState { map: first, version: 0, wedged: true, inflight: Vec::new(), next: 0 };
        let inner = Arc::new(Inner {
            layout,
            pull_batch: cfg.pull_batch,
            pull_bytes: u32::try_from(cfg.buffer / 4).unwrap_or(u32::MAX),
            pull_share: if cfg.pull_share > 0.0 && cfg.pull_share <= 1.0 { cfg.pull_share } else { 1.0 },
            pull_ahead: cfg.pull_ahead,
            me,
            group: OnceLock::new(),
            logs,
            dir: cfg.dir.clone(),
            stores: RwLock::new(vec![None; usize::from(cfg.shards)]),
            view: Mutex::new(view),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            pulled: (AtomicU64::new(0), AtomicU64::new(0)),
            cursors: Mutex::default(),
            read_cache: Mutex::default(),
        });
        let handler = serve::Clients::default();
        let regions = inner.logs.iter().flat_map(|l| l.regions()).collect();
        let (i1, i2, i3, i4, i5, i6) =
            (inner.clone(), inner.clone(), inner.clone(), inner.clone(), inner.clone(), inner.clone());
        let group = GroupBuilder::new(group)
            .layout(layout)
            .regions(regions)
            .on_view_start(move |v, t| {
                for l in &i1.logs {
                    l.view_starts(v, t);
                }
                i1.view_started(v);
            })
            .on_view_end(move |v, _| i2.logs.iter().for_each(|l| l.view_ends(v)))
            .on_wedge(move |v| {
                i3.logs.iter().for_each(|l| l.wedged(v));
                lock(&i3.view).wedged = true;
            })
            .on_rejoin(move |_| i4.logs.iter().for_each(|l| l.rejoined()))
            .serve(tw::SERVICE, move |body| i5.answer_log(body))
            .serve(super::wire::SERVICE, move |body| i6.answer_peer(body))
            .client_handler(handler.clone())
            .start()?;
        let group = Arc::new(group);
        let _ = inner.group.set(Arc::downgrade(&group));
        for l in &inner.logs {
            l.attach(&group)?;
        }
        // The stores open once the logs run (a store asks its log at once).
        inner.hold_stores()?;
        handler.serve(&inner);
        let d = inner.clone();
        let driver = std::thread::Builder::new()
            .name("kv-shards".into())
            .spawn(move || driver::run(&d))
            .map_err(HostError::Thread)?;
        Ok(ShardHost { inner, group, driver: Some(driver) })
    }

    /// This member's node id.
    pub fn node(&self) -> NodeId {
        self.inner.me
    }

    /// The group.
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// The map of this member's view, and its version.
    pub fn map(&self) -> (ShardMap, u64) {
        let v = lock(&self.inner.view);
        (v.map.clone(), v.version)
    }

    /// Shard `s`'s store at this member, if it holds one (it does while it is
    /// one of the shard's replicas: see the module docs).
    pub fn store(&self, s: Shard) -> Option<Arc<ShardStore>> {
        self.inner.store(s)
    }

    /// Moves `range` (owned by one shard now) to shard `to`: returns the map
    /// version that holds the move once a view does (the new owner serves the
    /// range from then on and pulls its records; see [`ShardHost::wait_migrations`]).
    pub fn migrate(&self, range: Range, to: Shard, within: Duration) -> Result<u64, HostError> {
        let view = self.group.edit_layout(&MapEdit::Migrate { range, to }.encode(), within)?;
        Ok(view.layout().version())
    }

    /// Records and bytes the migrations this member pulled have logged so far.
    pub fn pulled(&self) -> (u64, u64) {
        (self.inner.pulled.0.load(Ordering::Relaxed), self.inner.pulled.1.load(Ordering::Relaxed))
    }

    /// Waits (up to `within`) until this member's map lists no migration.
    pub fn wait_migrations(&self, within: Duration) -> bool {
        self.group.wait_for_view(within, |v| self.inner.layout.map_of(v).is_some_and(|m| m.migrations().is_empty()))
    }

    /// Closes the stores and leaves the group (waiting up to `within`).
    pub fn leave(mut self, within: Duration) -> bool {
        self.stop_driver();
        self.group.leave(within)
    }

    fn stop_driver(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.inner.changed.notify_all();
        if let Some(d) = self.driver.take() {
            let _ = d.join();
        }
    }
}

impl Drop for ShardHost {
    fn drop(&mut self) {
        self.stop_driver();
        for l in &self.inner.logs {
            l.stop("the member stopped");
        }
        self.group.shutdown();
    }
}

impl Inner {
    fn view_started(&self, v: &View) {
        let Some(map) = self.layout.map_of(v) else {
            tracing::error!(view = v.id().0, "a view whose layout is not this store's map");
            return;
        };
        let mut st = lock(&self.view);
        st.map = map;
        st.version = v.layout().version();
        st.wedged = false;
        drop(st);
        self.changed.notify_all();
    }

    /// A request frame of the logs' service, to the log it names.
    fn answer_log(&self, body: &[u8]) -> Vec<u8> {
        match tw::log_of(body).and_then(|l| self.logs.get(l as usize)) {
            Some(l) => l.answer(body),
            None => tw::encode(0, &tw::Reply::Failed("no such log".into())),
        }
    }

    fn group(&self) -> Option<Arc<Group>> {
        self.group.get().and_then(Weak::upgrade)
    }

    /// Shard `s`'s store, while this member holds it.
    fn store(&self, s: Shard) -> Option<Arc<ShardStore>> {
        read(&self.stores).get(usize::from(s)).cloned().flatten()
    }

    /// Opens the store of each shard whose log this member now holds a copy of,
    /// and closes those of the others (a request still using one keeps it until
    /// it answers). The first store that did not open is the error; the others
    /// are still seen to.
    fn hold_stores(&self) -> Result<(), StoreError> {
        let mut first = Ok(());
        for (s, log) in self.logs.iter().enumerate() {
            let want = log.members().contains(&self.me);
            let held = read(&self.stores)[s].is_some();
            if want && !held {
                let dir = self.dir.join(format!("shard-{s}")).join("store");
                match Store::open_keyed(&dir, Arc::new(log.clone()), crate::Apply::Eager) {
                    Ok(store) => write(&self.stores)[s] = Some(Arc::new(store)),
                    Err(e) => {
                        tracing::warn!(shard = s, %e, "a shard's store did not open");
                        first = first.and(Err(e));
                    }
                }
            } else if !want && held {
                let closed = write(&self.stores)[s].take();
                drop(closed);
            }
        }
        first
    }

    /// Shard `s`'s primary, as this member's log knows it.
    fn primary(&self, s: Shard) -> Option<NodeId> {
        self.logs.get(usize::from(s)).and_then(|l| l.primary())
    }

    /// Whether no request admitted in a view older than the current one runs.
    fn drained(&self) -> bool {
        let st = lock(&self.view);
        st.inflight.iter().all(|(_, v)| *v == st.version)
    }
}
