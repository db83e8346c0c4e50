//! The embeddable Group runtime: membership, failure handling, view changes, joins
//! with state transfer, and sends that survive view changes.
//!
//! ```text
//!   application ── send(k, bytes) ──▶ current epoch's subgroup (read lock)
//!        ▲                                    │ wedged: wait for the next epoch
//!        │ on_deliver(k, msg), on_view(view)  ▼
//!   predicate thread (smc + engine) ── Install/Stop ──▶ manager thread:
//!        stop the old epoch, welcome joiners (view + state), start the next epoch,
//!        send again what the trim discarded, tell the application
//!   control thread: join requests (take if leader, else redirect)
//! ```
//!
//! A first member starts a group alone; others join through any member. The layout
//! decides the subgroups of each view; until a view satisfies it, there are none and
//! sends wait.
//!
//! # Members late to a new view
//! Each view runs over a transport of its own, set up when the view is installed, and
//! members reach that setup at different times. For this node, a member of the new
//! view is *present* once its setup met ours, *missing* if it had not come by our
//! setup deadline ([`GroupBuilder::setup_timeout`]) or its process is gone (its
//! control port refuses connections), and *pending* while it is present but has not
//! beaten in the new view yet. A missing member starts out suspected; a pending one
//! is suspected for silence only after the setup timeout plus the failure timeout.
//! This is safe because suspicion only ever removes members, and the protocol is safe
//! whatever is suspected; the rule is there for availability, so that members merely
//! later than others are not removed until no majority is left.
//!
//! ```no_run
//! use views::config::Config;
//! use views::group::GroupBuilder;
//! use views::layout::Shards;
//! let cfg = Config::builder(0, "127.0.0.1:7000".parse().unwrap()).name("demo").build().unwrap();
//! let group = GroupBuilder::new(cfg)
//!     .layout(Shards { shard_size: 3, ..Shards::default() })
//!     .on_deliver(0, |d| println!("{} says {:?}", d.sender, d.data))
//!     .on_view(|v| println!("view {:?}: {:?}", v.id(), v.members()))
//!     .start()
//!     .unwrap();
//! group.wait_for_members(3, std::time::Duration::from_secs(60));
//! group.send(0, b"hello").unwrap();
//! ```

mod control;
mod deliver;
mod epoch;
mod install;
mod send;

use crate::config::{Config, ConfigError};
use crate::engine::{Next, StopReason};
use crate::layout::{EditError, Layout, Shards};
use crate::view::{View, ViewId};
use crate::wire::MemberInfo;
use epoch::{lock, Epoch};
use sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use sst::transport::NodeId;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::channel;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

use deliver::Callback;
pub use deliver::{Delivery, InPlace, InPlaceBatch};
pub use send::SubgroupHandle;

type ViewFn = Box<dyn FnMut(&View) + Send>;
type ViewEndFn = Box<dyn FnMut(&View, &Arc<dyn sst::transport::Transport>) + Send>;

/// Region ids from here up are the application's ([`GroupBuilder::regions`]); the
/// group's own tables use the ids below.
pub const APP_REGIONS: u16 = 0x8000;
type GetState = Box<dyn Fn() -> Vec<u8> + Send + Sync>;
type RequestFn = Box<dyn Fn(&[u8]) -> Vec<u8> + Send + Sync>;
type SetState = Box<dyn Fn(&[u8]) + Send + Sync>;
/// A per-batch in-place delivery callback (see [`GroupBuilder::deliver_by`]).
pub type BatchCallback = Box<dyn FnMut(&InPlaceBatch<'_>) + Send>;
/// Makes the batch delivery callback of one subgroup of one view.
pub type DeliverFactory = Box<dyn Fn(&View, usize, &smc::SubgroupSpec) -> Option<BatchCallback> + Send + Sync>;

/// State a subgroup declares for joiners: `get` runs at the member that takes the
/// join, at the start of the view that adds it; `set` runs at the joiner before it
/// takes part. Both run while the view is being replaced: they must not call into
/// the [`Group`] (a send there would wait for the view they are part of).
pub struct StateHook {
    get: GetState,
    set: SetState,
}

impl std::fmt::Debug for StateHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateHook")
    }
}

/// Why a group could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The control port could not be bound.
    #[error("control plane on {addr}: {why}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The error.
        why: String,
    },
    /// The join failed (no member answered in time, or the id is taken).
    #[error("join: {0}")]
    Join(String),
    /// The first view's runtime could not be set up.
    #[error("setup: {0}")]
    Setup(String),
}

/// Why a send did not happen.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SendError {
    /// The caller's error: this node does not send in that subgroup in this view.
    #[error("this node is not a sender of subgroup {0} in the current view")]
    NotSender(usize),
    /// The caller's error: too large for the subgroup.
    #[error("message of {len} bytes exceeds max_msg {max}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Retry: no view with that subgroup came within the wait (the layout may need
    /// more members).
    #[error("no view with subgroup {0} yet")]
    NotReady(usize),
    /// Fatal for this node: it is no longer a member.
    #[error("this node stopped: {0}")]
    Stopped(String),
}

impl SendError {
    /// True if this node can never send again (it left the group or was removed).
    pub fn is_fatal(&self) -> bool {
        matches!(self, SendError::Stopped(_))
    }
}

/// Why a point-to-point request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    /// Not a member this node knows of.
    #[error("{0} is not a member")]
    NotAMember(NodeId),
    /// The connection, the deadline or the other side failed (it may take no
    /// requests); the text says which.
    #[error("request failed: {0}")]
    Failed(String),
}

/// Counters of a running group.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    /// Views installed after the first one this node had.
    pub views_installed: u64,
    /// Milliseconds from the start of each view change (the wedge) to the next view
    /// running here, in order.
    pub view_change_ms: Vec<f64>,
    /// Messages delivered to the application.
    pub delivered: u64,
    /// Messages this node sent (resends not counted again).
    pub sent: u64,
    /// Messages sent again after a view change discarded them.
    pub resent: u64,
    /// Of those, messages whose resend waited for a later view because the next
    /// view was already changing when it was installed.
    pub resends_carried: u64,
}

/// Where a member's data plane sets up each view's transport (tcp and rdma).
pub(crate) enum DataListener {
    Tcp(sst::transport::tcp::Listener),
    Rdma(sst::transport::rdma::RdmaListener),
}

impl Inner {
    /// Runs the application's view-start and view callbacks for a view just installed.
    pub(crate) fn view_started(&self, view: &View, transport: &Arc<dyn sst::transport::Transport>) {
        if let Some(f) = lock(&self.on_view_start).as_mut() {
            f(view, transport);
        }
        if let Some(f) = lock(&self.on_view).as_mut() {
            f(view);
        }
    }
}

pub(crate) enum Event {
    Install(Box<Next>, Instant),
    Stop(StopReason),
}

pub(crate) struct Inner {
    pub(crate) cfg: Config,
    pub(crate) layout: Arc<dyn Layout>,
    deliver: HashMap<usize, Arc<Mutex<Callback>>>,
    deliver_by: Option<DeliverFactory>,
    /// Layout edits this node asked for that no view holds yet.
    edits: Mutex<Vec<Vec<u8>>>,
    /// Per subgroup of the current view: discarded messages not yet sent again
    /// because the view wedged first (sent after the next install).
    pub(crate) carry: Mutex<Vec<(usize, Vec<Vec<u8>>)>>,
    on_view: Mutex<Option<ViewFn>>,
    on_view_end: Mutex<Option<ViewEndFn>>,
    on_view_start: Mutex<Option<ViewEndFn>>,
    pub(crate) app_regions: Vec<sst::transport::RegionSpec>,
    pub(crate) state: Vec<(usize, StateHook)>,
    pub(crate) on_request: Option<RequestFn>,
    next_request: AtomicU64,
    requests: control::RequestPool,
    pub(crate) current: RwLock<Option<Epoch>>,
    /// Raised at every view installed and at the stop; waiters sleep on `changed`.
    generation: AtomicU64,
    gen_lock: Mutex<()>,
    changed: Condvar,
    is_stopped: AtomicBool,
    stopped: Mutex<Option<String>>,
    sent: AtomicU64,
    pub(crate) directory: Mutex<HashMap<NodeId, MemberInfo>>,
    pub(crate) joiners: Mutex<HashMap<NodeId, TcpStream>>,
    metrics: Mutex<Metrics>,
    delivered: Arc<AtomicU64>,
    shutdown: AtomicBool,
    pub(crate) setup_timeout: Duration,
    send_timeout: Duration,
    /// The tcp data port, bound once for every view's setup (tcp transport only).
    pub(crate) data_listener: Option<DataListener>,
}

impl Inner {
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// The smc upcall of subgroup `k` of `view`: each message to the callback (the
    /// one registered for `k`, else the one the factory makes).
    pub(crate) fn upcall(&self, k: usize, view: &View, spec: &smc::SubgroupSpec) -> smc::runtime::Upcall {
        let cb = self.deliver.get(&k).cloned().or_else(|| {
            let f = self.deliver_by.as_ref()?(view, k, spec)?;
            Some(Arc::new(Mutex::new(Callback::Batch(f))))
        });
        deliver::upcall(cb, self.delivered.clone(), view.id(), spec.senders.clone())
    }

    /// The edits still due in `view` (those it does not hold yet); drops the ones
    /// that no longer apply (their waiters see the error).
    pub(crate) fn edits_due(&self, view: &View) -> Vec<Vec<u8>> {
        let mut edits = lock(&self.edits);
        edits.retain(|e| matches!(self.layout.edit(view.layout().bytes(), e), Ok(Some(_))));
        edits.clone()
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let _g = lock(&self.gen_lock);
        self.changed.notify_all();
    }

    /// Sleeps up to `most` unless the generation moved past `seen`.
    fn wait_change(&self, seen: u64, most: Duration) {
        let g = lock(&self.gen_lock);
        if self.generation.load(Ordering::SeqCst) == seen {
            let _ = self.changed.wait_timeout(g, most);
        }
    }

    fn set_stopped(&self, why: String) {
        lock(&self.stopped).get_or_insert(why);
        self.is_stopped.store(true, Ordering::Release);
    }

    /// Wedges the current view's subgroups and wakes their senders, so that a sender
    /// waiting for a slot (which holds the read lock) gives up and lets a stop take
    /// the write lock. Without it a minority member whose window was full hung here.
    fn freeze_current(&self) {
        if let Some(e) = self.current.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
            for s in e.subs.iter().flatten() {
                s.with_core(|c| c.wedge());
                s.wake_senders();
            }
        }
    }

    fn stop_with(&self, why: String) {
        tracing::warn!(%why, "this node stops");
        self.set_stopped(why);
        self.freeze_current();
        let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
        if let Some(mut e) = cur.take() {
            e.stop();
        }
        drop(cur);
        self.bump();
    }
}

/// The data-plane address of a member: its control port plus one.
pub(crate) fn data_addr(control: SocketAddr) -> SocketAddr {
    SocketAddr::new(control.ip(), control.port() + 1)
}

/// Builds a [`Group`] from a [`Config`], a layout and callbacks.
pub struct GroupBuilder {
    cfg: Config,
    layout: Arc<dyn Layout>,
    deliver: HashMap<usize, Arc<Mutex<Callback>>>,
    deliver_by: Option<DeliverFactory>,
    on_view: Option<ViewFn>,
    on_view_end: Option<ViewEndFn>,
    on_view_start: Option<ViewEndFn>,
    app_regions: Vec<sst::transport::RegionSpec>,
    state: Vec<(usize, StateHook)>,
    on_request: Option<RequestFn>,
    setup_timeout: Duration,
    send_timeout: Duration,
}

impl std::fmt::Debug for GroupBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupBuilder").field("cfg", &self.cfg).finish_non_exhaustive()
    }
}

impl GroupBuilder {
    /// A builder; the default layout is one subgroup of every member, all sending,
    /// ordered, with the config's window and message size.
    pub fn new(cfg: Config) -> GroupBuilder {
        let layout =
            Shards { shard_size: 1, max_shards: 1, window: cfg.window, max_msg: cfg.max_msg, ..Shards::default() };
        let all = AllMembers(layout);
        let setup_timeout = (cfg.failure_timeout() * 3).max(Duration::from_secs(3));
        GroupBuilder {
            cfg,
            layout: Arc::new(all),
            deliver: HashMap::new(),
            deliver_by: None,
            on_view: None,
            on_view_end: None,
            on_view_start: None,
            app_regions: Vec::new(),
            state: Vec::new(),
            on_request: None,
            setup_timeout,
            send_timeout: Duration::from_secs(30),
        }
    }

    /// The subgroups as a function of the view.
    pub fn layout(mut self, l: impl Layout + 'static) -> Self {
        self.layout = Arc::new(l);
        self
    }

    /// How long a view's setup waits for a member that has not come (default 3× the
    /// failure timeout, at least 3 s). A member that has not come by then starts out
    /// suspected in that view (one whose process is gone is not waited for at all); a
    /// member that came but is still in its own setup is given this long again
    /// before its silence counts (see "Members late to a new view" in the module
    /// docs). It must exceed how far apart live members reach a view's setup.
    pub fn setup_timeout(mut self, d: Duration) -> Self {
        self.setup_timeout = d;
        self
    }

    /// How long a send waits for a view that has its subgroup (default 30 s); then it
    /// fails with [`SendError::NotReady`].
    pub fn send_timeout(mut self, d: Duration) -> Self {
        self.send_timeout = d;
        self
    }

    /// Called with every message delivered in subgroup `k`, in delivery order, with
    /// the payload copied into a buffer (one copy per message; see
    /// [`GroupBuilder::on_deliver_in_place`] for none). Replaces an earlier callback
    /// of `k`.
    pub fn on_deliver(mut self, k: usize, f: impl FnMut(&Delivery<'_>) + Send + 'static) -> Self {
        self.deliver.insert(k, Arc::new(Mutex::new(Callback::Copy(Box::new(f)))));
        self
    }

    /// Like [`GroupBuilder::on_deliver`], but the callback reads each message in its
    /// slot (word reads or a copy of what it needs; valid until it returns): no copy.
    ///
    /// ```no_run
    /// # use views::{config::Config, group::GroupBuilder};
    /// # let cfg = Config::builder(0, "127.0.0.1:7000".parse().unwrap()).build().unwrap();
    /// let g = GroupBuilder::new(cfg).on_deliver_in_place(0, |d| {
    ///     let first = d.message.word(0); // bytes 0..8 of the payload, read in place
    ///     println!("{} sent {} bytes, first word {first}", d.sender, d.message.len());
    /// });
    /// ```
    pub fn on_deliver_in_place(mut self, k: usize, f: impl FnMut(&InPlace<'_>) + Send + 'static) -> Self {
        self.deliver.insert(k, Arc::new(Mutex::new(Callback::InPlace(Box::new(f)))));
        self
    }

    /// Makes the delivery callback of each subgroup of each view that has no
    /// callback of its own ([`GroupBuilder::on_deliver`]): for dynamic layouts, whose
    /// subgroups mean different things in different views. Runs at the start of every
    /// view, before it delivers anything, once per subgroup this node is in; `None`
    /// delivers that subgroup to nobody. The callback gets each delivered batch,
    /// read in place ([`InPlaceBatch::iter`]).
    pub fn deliver_by(
        mut self,
        f: impl Fn(&View, usize, &smc::SubgroupSpec) -> Option<BatchCallback> + Send + Sync + 'static,
    ) -> Self {
        self.deliver_by = Some(Box::new(f));
        self
    }

    /// Answers point-to-point requests from other members ([`Group::request`]) on
    /// the control plane's threads: bytes in, bytes out.
    pub fn on_request(mut self, f: impl Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static) -> Self {
        self.on_request = Some(Box::new(f));
        self
    }

    /// Called with every view this node installs, the first one included.
    pub fn on_view(mut self, f: impl FnMut(&View) + Send + 'static) -> Self {
        self.on_view = Some(Box::new(f));
        self
    }

    /// Registers `regions` (ids at least [`APP_REGIONS`], distinct) in every view's
    /// transport, for the application's own one-sided writes
    /// ([`Group::transport`]); each view's are fresh and zeroed (see
    /// [`GroupBuilder::on_view_end`] to keep what they held).
    pub fn regions(mut self, regions: Vec<sst::transport::RegionSpec>) -> Self {
        self.app_regions = regions;
        self
    }

    /// Called at the end of every view this node leaves for the next one, with that
    /// view's transport, after its last delivery and before its regions are dropped:
    /// the moment to read what peers wrote into the application's regions. Runs on
    /// the thread that installs views; it must not call into the [`Group`].
    pub fn on_view_end(mut self, f: impl FnMut(&View, &Arc<dyn sst::transport::Transport>) + Send + 'static) -> Self {
        self.on_view_end = Some(Box::new(f));
        self
    }

    /// Called with every view this node installs (the first one included) and that
    /// view's transport, just before [`GroupBuilder::on_view`]: the moment to take
    /// the new view's application regions ([`GroupBuilder::regions`]). Runs on the
    /// thread that installs views; it must not call into the [`Group`].
    pub fn on_view_start(mut self, f: impl FnMut(&View, &Arc<dyn sst::transport::Transport>) + Send + 'static) -> Self {
        self.on_view_start = Some(Box::new(f));
        self
    }

    /// Declares subgroup `k`'s state for joiners (see [`StateHook`]).
    pub fn state(
        mut self,
        k: usize,
        get: impl Fn() -> Vec<u8> + Send + Sync + 'static,
        set: impl Fn(&[u8]) + Send + Sync + 'static,
    ) -> Self {
        self.state.push((k, StateHook { get: Box::new(get), set: Box::new(set) }));
        self
    }

    /// Starts a new group (no contact) or joins one; returns once this node runs a
    /// view.
    pub fn start(self) -> Result<Group, StartError> {
        self.cfg.validate()?;
        for (i, r) in self.app_regions.iter().enumerate() {
            if r.id.0 < APP_REGIONS || self.app_regions[..i].iter().any(|o| o.id == r.id) {
                return Err(StartError::Setup(format!(
                    "application region {:?}: ids must be distinct and at least {APP_REGIONS:#x}",
                    r.id
                )));
            }
        }
        let cfg = self.cfg.clone();
        let me = NodeId(cfg.node_id);
        let listener =
            TcpListener::bind(cfg.listen).map_err(|e| StartError::Listen { addr: cfg.listen, why: e.to_string() })?;
        if cfg.transport == crate::config::Transport::Shm {
            // Files of members that were killed (or interrupted) before they could
            // remove theirs; only files whose creating process is gone are removed.
            let swept = sst::transport::shm::remove_stale_files();
            if swept > 0 {
                tracing::info!(swept, "removed /dev/shm files of processes that no longer exist");
            }
        }
        let data_listener = match cfg.transport {
            crate::config::Transport::Tcp => {
                let addr = data_addr(cfg.listen);
                Some(DataListener::Tcp(
                    sst::transport::tcp::bind(addr)
                        .map_err(|e| StartError::Listen { addr, why: format!("data port: {e}") })?,
                ))
            }
            crate::config::Transport::Rdma => {
                // Refuse at once, with the reason, rather than at the first view.
                sst::transport::rdma::available().map_err(StartError::Setup)?;
                let addr = data_addr(cfg.listen);
                Some(DataListener::Rdma(
                    sst::transport::rdma::bind(addr)
                        .map_err(|e| StartError::Listen { addr, why: format!("data port: {e}") })?,
                ))
            }
            _ => None,
        };
        let inner = Arc::new(Inner {
            cfg: cfg.clone(),
            layout: self.layout,
            deliver: self.deliver,
            deliver_by: self.deliver_by,
            edits: Mutex::new(Vec::new()),
            carry: Mutex::new(Vec::new()),
            on_view: Mutex::new(self.on_view),
            on_view_end: Mutex::new(self.on_view_end),
            on_view_start: Mutex::new(self.on_view_start),
            app_regions: self.app_regions,
            state: self.state,
            on_request: self.on_request,
            next_request: AtomicU64::new(1),
            requests: control::RequestPool::default(),
            current: RwLock::new(None),
            generation: AtomicU64::new(0),
            gen_lock: Mutex::new(()),
            changed: Condvar::new(),
            is_stopped: AtomicBool::new(false),
            stopped: Mutex::new(None),
            sent: AtomicU64::new(0),
            directory: Mutex::new(HashMap::from([(me, control::member_info(me, cfg.listen))])),
            joiners: Mutex::new(HashMap::new()),
            metrics: Mutex::new(Metrics::default()),
            delivered: Arc::new(AtomicU64::new(0)),
            shutdown: AtomicBool::new(false),
            setup_timeout: self.setup_timeout,
            send_timeout: self.send_timeout,
            data_listener,
        });
        let server = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("spindle-control".into())
                .spawn(move || control::serve(inner, listener))
                .map_err(|e| StartError::Setup(e.to_string()))?
        };
        let (tx, rx) = channel();
        let first = match cfg.contact {
            None => View::initial(vec![me]),
            Some(contact) => {
                let deadline = Instant::now() + Duration::from_secs(120);
                let (view, states) =
                    control::join(control::member_info(me, cfg.listen), contact, deadline, cfg.failure_timeout() * 3)
                        .map_err(StartError::Join)?;
                for (k, bytes) in states {
                    if let Some((_, hook)) = inner.state.iter().find(|(x, _)| *x == k) {
                        (hook.set)(&bytes);
                    }
                }
                let mut dir = lock(&inner.directory);
                for m in &view.members {
                    dir.insert(NodeId(m.node), m.clone());
                }
                drop(dir);
                View::with_id(ViewId(view.id), view.members.iter().map(|m| NodeId(m.node)).collect())
                    .with_layout(crate::view::LayoutDoc::new(view.layout_version, view.layout))
            }
        };
        let epoch = Epoch::start(&inner, first.clone(), &[], tx.clone()).map_err(StartError::Setup)?;
        let transport = epoch.transport.clone();
        *inner.current.write().unwrap_or_else(|p| p.into_inner()) = Some(epoch);
        inner.view_started(&first, &transport);
        let manager = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("spindle-views".into())
                .spawn(move || install::manage(inner, rx, tx))
                .map_err(|e| StartError::Setup(e.to_string()))?
        };
        Ok(Group { inner, threads: Mutex::new(vec![server, manager]) })
    }
}

/// The default layout: one subgroup of every member (all sending).
#[derive(Debug)]
struct AllMembers(Shards);

impl Layout for AllMembers {
    fn subgroups(&self, view: &View) -> Result<Vec<smc::SubgroupSpec>, crate::layout::LayoutError> {
        let n = view.members().len();
        Shards { shard_size: n, ..self.0.clone() }.subgroups(view)
    }
}

/// A running member of a group (see the module docs). Dropping it shuts it down
/// without leaving (the others see a failure); [`Group::leave`] leaves gracefully.
pub struct Group {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("node", &self.inner.cfg.node_id).field("view", &self.view()).finish()
    }
}

impl Group {
    /// The current view, if this node still runs one.
    pub fn view(&self) -> Option<View> {
        self.inner.current.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|e| e.view.clone())
    }

    /// The current view and its transport, for one-sided writes into the
    /// application's regions ([`GroupBuilder::regions`]) of its members. A new view
    /// has a new transport: take it again after a view change.
    pub fn transport(&self) -> Option<(View, Arc<dyn sst::transport::Transport>)> {
        let cur = self.inner.current.read().unwrap_or_else(|p| p.into_inner());
        cur.as_ref().map(|e| (e.view.clone(), e.transport.clone()))
    }

    /// Where this node's control plane listens (what joiners use as contact).
    pub fn listen_addr(&self) -> SocketAddr {
        self.inner.cfg.listen
    }

    /// The current members (empty once stopped).
    pub fn members(&self) -> Vec<NodeId> {
        self.view().map(|v| v.members().to_vec()).unwrap_or_default()
    }

    /// Why this node stopped, if it did.
    pub fn stopped(&self) -> Option<String> {
        if !self.inner.is_stopped.load(Ordering::Acquire) {
            return None; // no lock on the send path
        }
        lock(&self.inner.stopped).clone()
    }

    /// Counters so far.
    pub fn metrics(&self) -> Metrics {
        let mut m = lock(&self.inner.metrics).clone();
        m.delivered = self.inner.delivered.load(Ordering::Relaxed);
        m.sent = self.inner.sent.load(Ordering::Relaxed);
        m
    }

    /// Waits until the view has at least `n` members and no change is under way;
    /// false on timeout or stop.
    pub fn wait_for_members(&self, n: usize, within: Duration) -> bool {
        self.wait_until(within, |e| e.view.members().len() >= n && !lock(&e.driver).engine.is_wedged())
    }

    /// Waits up to `within` for a view satisfying `f`.
    fn wait_until(&self, within: Duration, mut f: impl FnMut(&Epoch) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let gen = self.inner.generation.load(Ordering::SeqCst);
            if let Some(e) = self.inner.current.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
                if f(e) {
                    return true;
                }
            }
            if self.stopped().is_some() {
                return false;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            self.inner.wait_change(gen, left.min(Duration::from_millis(50)));
        }
    }

    /// Sends `body` to member `to` over the control plane and waits up to `within`
    /// for its handler's answer (see [`GroupBuilder::on_request`]). Point to point,
    /// outside the multicast order. One connection per member is kept open between
    /// requests (closed after 4 s idle); concurrent requests to one member open more.
    pub fn request(&self, to: NodeId, body: &[u8], within: Duration) -> Result<Vec<u8>, RequestError> {
        let addr = lock(&self.inner.directory).get(&to).map(|m| m.control).ok_or(RequestError::NotAMember(to))?;
        let id = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        control::request(&self.inner.requests, to, addr, id, body, within).map_err(RequestError::Failed)
    }

    /// Changes the layout document (see [`Layout::edit`]): the edit goes to the
    /// view's leader, which proposes the edited document with the next view (the
    /// same members, unless a membership change is due too). Returns the first view
    /// that holds the edit, at once if the current one does; waits up to `within`.
    ///
    /// Errors: the layout's own refusal (checked here first, against the current
    /// document), a document over [`crate::layout::MAX_DOC`], or
    /// [`EditError::NotApplied`] if no view took it in time or this node stopped.
    pub fn edit_layout(&self, edit: &[u8], within: Duration) -> Result<View, EditError> {
        let layout = self.inner.layout.clone();
        let check = |v: &View| match layout.edit(v.layout().bytes(), edit) {
            Ok(Some(d)) if d.len() > crate::layout::MAX_DOC => Err(EditError::TooLarge(d.len())),
            other => other,
        };
        if edit.len() + 8 > crate::layout::MAX_EDITS {
            return Err(EditError::Invalid(format!("an edit of {} bytes exceeds MAX_EDITS", edit.len())));
        }
        let view = self.view().ok_or_else(|| EditError::NotApplied(self.stopped().unwrap_or_default()))?;
        if check(&view)?.is_none() {
            return Ok(view);
        }
        lock(&self.inner.edits).push(edit.to_vec());
        if let Some(e) = self.inner.current.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
            // If this view's list is full or it is ending, the next view asks again.
            lock(&e.driver).engine.request_edit(edit);
            e.poke();
        }
        let mut result = Err(EditError::NotApplied(format!("no view took the edit within {within:?}")));
        self.wait_until(within, |e| match check(&e.view) {
            Ok(Some(_)) => false,
            Ok(None) => {
                result = Ok(e.view.clone());
                true
            }
            Err(why) => {
                result = Err(why);
                true
            }
        });
        lock(&self.inner.edits).retain(|e| e != edit);
        if let (Err(EditError::NotApplied(_)), Some(why)) = (&result, self.stopped()) {
            return Err(EditError::NotApplied(why));
        }
        result
    }

    /// Leaves the group gracefully: a view change removes this node after everything
    /// it is owed is delivered. Waits up to `within`.
    pub fn leave(&self, within: Duration) -> bool {
        if let Some(e) = self.inner.current.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
            lock(&e.driver).engine.leave();
            e.poke();
        }
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.stopped().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Stops this node (without leaving: the others will see it fail).
    pub fn shutdown(&self) {
        self.inner.shutdown.store(true, Ordering::Release);
        self.inner.set_stopped("shut down".into());
        self.inner.freeze_current();
        let mut cur = self.inner.current.write().unwrap_or_else(|p| p.into_inner());
        if let Some(mut e) = cur.take() {
            e.stop();
        }
        drop(cur);
        self.inner.bump();
        for t in lock(&self.threads).drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.shutdown();
    }
}
