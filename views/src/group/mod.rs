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

use crate::config::{Config, ConfigError};
use crate::engine::{Next, StopReason};
use crate::layout::{Layout, Shards};
use crate::view::{View, ViewId};
use crate::wire::{MemberInfo, ViewMsg};
use epoch::{lock, Epoch};
use sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use sst::transport::NodeId;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

use deliver::Callback;
pub use deliver::{Delivery, InPlace};

type ViewFn = Box<dyn FnMut(&View) + Send>;
type GetState = Box<dyn Fn() -> Vec<u8> + Send + Sync>;
type RequestFn = Box<dyn Fn(&[u8]) -> Vec<u8> + Send + Sync>;
type SetState = Box<dyn Fn(&[u8]) + Send + Sync>;

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
}

pub(crate) enum Event {
    Install(Box<Next>, Instant),
    Stop(StopReason),
}

pub(crate) struct Inner {
    pub(crate) cfg: Config,
    pub(crate) layout: Arc<dyn Layout>,
    deliver: HashMap<usize, Arc<Mutex<Callback>>>,
    on_view: Mutex<Option<ViewFn>>,
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
    pub(crate) data_listener: Option<sst::transport::tcp::Listener>,
}

impl Inner {
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// The smc upcall of subgroup `k` in view `vid`: each message to the callback.
    pub(crate) fn upcall(&self, k: usize, vid: ViewId, senders: Vec<NodeId>) -> smc::runtime::Upcall {
        deliver::upcall(self.deliver.get(&k).cloned(), self.delivered.clone(), vid, senders)
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
    on_view: Option<ViewFn>,
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
            on_view: None,
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
                Some(
                    sst::transport::tcp::bind(addr)
                        .map_err(|e| StartError::Listen { addr, why: format!("data port: {e}") })?,
                )
            }
            _ => None,
        };
        let inner = Arc::new(Inner {
            cfg: cfg.clone(),
            layout: self.layout,
            deliver: self.deliver,
            on_view: Mutex::new(self.on_view),
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
                    control::join(control::member_info(me, cfg.listen), contact, deadline).map_err(StartError::Join)?;
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
            }
        };
        let epoch = Epoch::start(&inner, first.clone(), &[], tx.clone()).map_err(StartError::Setup)?;
        *inner.current.write().unwrap_or_else(|p| p.into_inner()) = Some(epoch);
        if let Some(f) = lock(&inner.on_view).as_mut() {
            f(&first);
        }
        let manager = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("spindle-views".into())
                .spawn(move || manage(inner, rx, tx))
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

/// The manager thread: installs views and stops the node.
fn manage(inner: Arc<Inner>, rx: Receiver<Event>, tx: std::sync::mpsc::Sender<Event>) {
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Event::Install(next, began)) => {
                if let Err(why) = install(&inner, *next, began, &tx) {
                    inner.stop_with(why);
                    return;
                }
            }
            Ok(Event::Stop(why)) => {
                let text = match why {
                    StopReason::Minority { live, members } => format!(
                        "only {live} of {members} members are reachable: a minority must not go on (majority rule)"
                    ),
                    StopReason::Removed => "removed from the group by the others".into(),
                    StopReason::Left => "left the group".into(),
                    StopReason::Protocol(why) => format!("membership protocol error: {why}"),
                };
                inner.stop_with(text);
                return;
            }
            Err(RecvTimeoutError::Timeout) if inner.is_shut_down() => return,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn install(inner: &Arc<Inner>, next: Next, began: Instant, tx: &std::sync::mpsc::Sender<Event>) -> Result<(), String> {
    let me = NodeId(inner.cfg.node_id);
    let mut cur = inner.current.write().unwrap_or_else(|p| p.into_inner());
    let mut old = cur.take().ok_or("no view to leave")?;
    // No send is in flight now (senders hold the read lock): take what the trim
    // discarded, including anything published since the engine looked.
    let resend: Vec<(usize, Vec<Vec<u8>>)> = next
        .my_cuts
        .iter()
        .filter_map(|(k, cut)| old.sub(*k).map(|s| (*k, s.with_core(|c| c.own_messages_from(*cut)))))
        .collect();
    {
        let mut dir = lock(&inner.directory);
        dir.retain(|n, _| next.view.rank_of(*n).is_some());
        for j in &next.joins {
            if let Some(a) = j.addr {
                dir.insert(j.node, control::member_info(j.node, SocketAddr::V4(a)));
            }
        }
    }
    let msg = ViewMsg {
        id: next.view.id().0,
        members: {
            let dir = lock(&inner.directory);
            next.view.members().iter().filter_map(|n| dir.get(n).cloned()).collect()
        },
    };
    for j in &next.joins {
        if let Some(stream) = lock(&inner.joiners).remove(&j.node) {
            if let Err(e) = control::welcome(inner, stream, msg.clone()) {
                tracing::warn!(joiner = %j.node, %e, "could not send the view to a joiner");
            }
        }
    }
    tracing::info!(node = %me, "trim done, stopping the old view");
    old.stop();
    drop(old);
    lock(&inner.joiners).clear(); // requests not taken into this view are retried by the joiners
    let epoch = Epoch::start(inner, next.view.clone(), &next.suspects, tx.clone())?;
    let mut resent = 0;
    for (k, msgs) in resend {
        match epoch.sub(k) {
            Some(s) => {
                for m in msgs {
                    s.send(&m).map_err(|e| format!("resending in view {}: {e}", next.view.id().0))?;
                    resent += 1;
                }
            }
            None => tracing::warn!(node = %me, subgroup = k, lost = msgs.len(), "no longer a sender: messages dropped"),
        }
    }
    *cur = Some(epoch);
    drop(cur);
    {
        let mut m = lock(&inner.metrics);
        m.views_installed += 1;
        m.view_change_ms.push(began.elapsed().as_secs_f64() * 1e3);
        m.resent += resent;
    }
    tracing::info!(node = %me, view = next.view.id().0, members = ?next.view.members(), "view installed");
    inner.bump();
    if let Some(f) = lock(&inner.on_view).as_mut() {
        f(&next.view);
    }
    Ok(())
}

/// Sends in one subgroup of a [`Group`] (see [`Group::subgroup`]).
#[derive(Debug, Clone, Copy)]
pub struct SubgroupHandle<'a> {
    group: &'a Group,
    k: usize,
}

impl SubgroupHandle<'_> {
    /// Sends a copy of `data` (see [`Group::send`]).
    pub fn send(&self, data: &[u8]) -> Result<(), SendError> {
        self.group.send(self.k, data)
    }
    /// Sends a message built in place (see [`Group::send_with`]).
    pub fn send_with(&self, len: usize, build: impl Fn(&mut smc::runtime::SendSlot<'_>)) -> Result<(), SendError> {
        self.group.send_with(self.k, len, build)
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
    fn wait_until(&self, within: Duration, f: impl Fn(&Epoch) -> bool) -> bool {
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

    /// A handle for sending in subgroup `k` (the subgroup of that index in every view).
    pub fn subgroup(&self, k: usize) -> SubgroupHandle<'_> {
        SubgroupHandle { group: self, k }
    }

    /// Sends a copy of `data` in subgroup `k`; waits through view changes (up to the
    /// send timeout for a view that has the subgroup).
    pub fn send(&self, k: usize, data: &[u8]) -> Result<(), SendError> {
        self.send_with(k, data.len(), |slot| slot.write(0, data))
    }

    /// Sends a `len`-byte message built in place by `build` (which may run more than
    /// once if a view change interrupts the send).
    pub fn send_with(
        &self,
        k: usize,
        len: usize,
        build: impl Fn(&mut smc::runtime::SendSlot<'_>),
    ) -> Result<(), SendError> {
        let deadline = Instant::now() + self.inner.send_timeout;
        loop {
            if let Some(why) = self.stopped() {
                return Err(SendError::Stopped(why));
            }
            let gen = self.inner.generation.load(Ordering::SeqCst);
            {
                let cur = self.inner.current.read().unwrap_or_else(|p| p.into_inner());
                if let Some(e) = cur.as_ref() {
                    match (e.specs.get(k), e.sub(k)) {
                        (Some(spec), Some(s)) if spec.sender_rank(NodeId(self.inner.cfg.node_id)).is_some() => {
                            match s.reserve(len) {
                                Ok(mut slot) => {
                                    build(&mut slot);
                                    slot.commit();
                                    self.inner.sent.fetch_add(1, Ordering::Relaxed);
                                    return Ok(());
                                }
                                Err(smc::SendError::TooLarge { len, max }) => {
                                    return Err(SendError::TooLarge { len, max })
                                }
                                Err(_) => {} // wedged: wait for the next view
                            }
                        }
                        (Some(_), _) => return Err(SendError::NotSender(k)),
                        (None, _) => {} // the layout is not satisfied yet
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SendError::NotReady(k));
            }
            self.inner.wait_change(gen, left.min(Duration::from_millis(20)));
        }
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
