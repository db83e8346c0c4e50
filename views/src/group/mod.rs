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
//! use spindle_views::config::Config;
//! use spindle_views::group::GroupBuilder;
//! use spindle_views::layout::Shards;
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

mod builder;
mod clients;
mod control;
mod deliver;
mod directory;
pub mod discovery;
mod epoch;
mod error;
mod hooks;
mod install;
mod metrics;
mod recheck;
mod rejoin;
mod removal;
pub mod report;
pub mod restart;
mod send;
mod spin;
mod status;

use crate::config::Config;
use crate::engine::{Next, StopReason};
use crate::layout::{EditError, Layout};
use crate::view::View;
use directory::Directory;
use epoch::Epoch;
use metrics::Counters;
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use status::Status;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use builder::GroupBuilder;
pub use clients::{ClientHandler, ClientLimits, ClientSession};
pub use deliver::{Delivery, InPlace, InPlaceBatch};
pub use error::{RequestError, SendError, StartError};
pub use hooks::{BatchCallback, DeliverFactory, StateHook};
pub use metrics::Metrics;
pub use removal::{NoMajority, Removal};
pub use send::{SendCache, SubgroupHandle};

/// A protocol of a layer above on the members' point-to-point requests
/// ([`Group::request_service`], [`GroupBuilder::serve`]): each request carries its
/// service's number and is answered by that service's handler, so protocols that
/// share a group never have to tell each other's bytes apart. Numbers are the
/// layers' to pick; [`Service::APP`] is the application's own
/// ([`Group::request`], [`GroupBuilder::on_request`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Service(pub u16);

impl Service {
    /// The application's requests.
    pub const APP: Service = Service(0);
}

/// Region ids from here up are the application's ([`GroupBuilder::regions`]); the
/// group's own tables use the ids below.
pub const APP_REGIONS: u16 = 0x8000;

/// The application's regions of a view ([`GroupBuilder::regions_by`]).
pub(crate) type RegionsFn = Arc<dyn Fn(&View) -> Vec<spindle_sst::transport::RegionSpec> + Send + Sync>;

/// The application regions written at a node in a view ([`GroupBuilder::reserve_regions_by`]).
pub(crate) type HeldFn = Arc<dyn Fn(&View, NodeId) -> Vec<spindle_sst::transport::RegionId> + Send + Sync>;

/// Where a member's data plane sets up each view's transport (tcp and rdma).
pub(crate) enum DataListener {
    Tcp(spindle_sst::transport::tcp::Listener),
    Rdma(spindle_sst::transport::rdma::RdmaListener),
}

/// What the predicate thread tells the manager thread.
pub(crate) enum Event {
    Install(Box<Next>, Instant),
    Stop(StopReason),
}

/// A member's state, shared by the application's handle, the control plane's
/// threads, the manager thread and each view's predicate thread. Each concern has
/// its own part: the callbacks ([`hooks`]), the members' addresses and waiting
/// joiners ([`directory`]), requests ([`control`]), running or stopped
/// ([`status`]), counters ([`metrics`]) and the current view's runtime (`current`).
pub(crate) struct Inner {
    pub(crate) cfg: Config,
    pub(crate) layout: Arc<dyn Layout>,
    pub(crate) hooks: hooks::Hooks,
    pub(crate) directory: Directory,
    requests: control::RequestPool,
    pub(crate) status: Status,
    pub(crate) counters: Counters,
    /// Client sessions (processes outside the view served by this member).
    pub(crate) clients: Arc<clients::Clients>,
    /// The current view's runtime; `None` once stopped. Senders hold the read lock
    /// while they send; installing a view takes the write lock.
    pub(crate) current: RwLock<Option<Epoch>>,
    /// Layout edits this node asked for that no view holds yet.
    edits: Mutex<Vec<Vec<u8>>>,
    /// Per subgroup of the current view: discarded messages not yet sent again
    /// because the view wedged first (sent after the next install).
    pub(crate) carry: Mutex<Vec<(usize, Vec<Vec<u8>>)>>,
    pub(crate) app_regions: RegionsFn,
    pub(crate) held_regions: HeldFn,
    pub(crate) setup_timeout: Duration,
    send_timeout: Duration,
    /// The tcp data port, bound once for every view's setup (tcp transport only).
    pub(crate) data_listener: Option<DataListener>,
    /// While this node is out of its view: its restore of that view (see
    /// [`crate::restore`]).
    pub(crate) restore: Mutex<Option<crate::restore::Restore>>,
    /// What the group's members and clients prove themselves with, if anything
    /// (see [`crate::auth`]).
    pub(crate) creds: Option<crate::auth::Credentials>,
    /// The key of the group's client session tokens (its founder's, or the
    /// secret's; a joiner takes it from its welcome).
    pub(crate) client_key: Mutex<[u8; 32]>,
}

impl Inner {
    /// How the tcp data links prove themselves and are keyed (see
    /// [`crate::auth::Credentials::link_auth`]); `None` without credentials.
    pub(crate) fn link_auth(&self) -> Option<std::sync::Arc<dyn spindle_sst::transport::tcp::LinkAuth>> {
        self.creds.as_ref().map(crate::auth::Credentials::link_auth)
    }

    /// The secret discovery beacons are tagged with: a group secret's only.
    pub(crate) fn beacon_secret(&self) -> Option<&crate::auth::Secret> {
        self.creds.as_ref().and_then(crate::auth::Credentials::secret)
    }
    /// The edits still due in `view` (those it does not hold yet); drops the ones
    /// that no longer apply (their waiters see the error).
    pub(crate) fn edits_due(&self, view: &View) -> Vec<Vec<u8>> {
        let mut edits = lock(&self.edits);
        edits.retain(|e| matches!(self.layout.edit(view.layout().bytes(), e), Ok(Some(_))));
        edits.clone()
    }

    /// Wedges the current view's subgroups and wakes their senders, so that a sender
    /// waiting for a slot (which holds the read lock) gives up and lets a stop take
    /// the write lock. Without it a minority member whose window was full hung here.
    fn freeze_current(&self) {
        if let Some(e) = spindle_sst::sync::read(&self.current).as_ref() {
            for s in e.subs.iter().flatten() {
                s.with_core(|c| c.wedge());
                s.wake_senders();
            }
        }
    }

    /// Stops this node for `why`, a failure the operator should hear of (see
    /// [`Inner::end`]).
    fn stop_with(&self, why: String) {
        tracing::warn!(%why, "this node stops");
        self.end(why);
    }

    /// Ends this node (the first reason given is kept): its view's runtime stops and
    /// every waiter wakes.
    fn end(&self, why: String) {
        self.status.set_stopped(why);
        self.clients.close_all();
        self.freeze_current();
        let mut cur = spindle_sst::sync::write(&self.current);
        if let Some(mut e) = cur.take() {
            e.stop();
        }
        drop(cur);
        self.status.bump();
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
        spindle_sst::sync::read(&self.inner.current).as_ref().map(|e| e.view.clone())
    }

    /// The current view and its transport, for one-sided writes into the
    /// application's regions ([`GroupBuilder::regions`]) of its members. A new view
    /// has a new transport: take it again after a view change.
    pub fn transport(&self) -> Option<(View, Arc<dyn spindle_sst::transport::Transport>)> {
        let cur = spindle_sst::sync::read(&self.inner.current);
        cur.as_ref().map(|e| (e.view.clone(), e.transport.clone()))
    }

    /// This node's id (the one the group gave it, if its config asked for one).
    pub fn node(&self) -> NodeId {
        NodeId(self.inner.cfg.node_id)
    }

    /// Where this node's control plane listens (what joiners use as contact).
    pub fn listen_addr(&self) -> SocketAddr {
        self.inner.cfg.listen
    }

    /// Where member `node`'s control plane listens (what its clients connect
    /// to), if this node knows it: itself, or a member of a view it ran.
    pub fn control_addr_of(&self, node: NodeId) -> Option<SocketAddr> {
        if node == self.node() {
            return Some(self.listen_addr());
        }
        self.inner.directory.control_of(node)
    }

    /// The current members (empty once stopped).
    pub fn members(&self) -> Vec<NodeId> {
        self.view().map(|v| v.members().to_vec()).unwrap_or_default()
    }

    /// Why the others removed this node, while it is joining the group again
    /// ([`crate::config::Config::rejoin`]); `None` while it runs a view (or
    /// stopped). Sends wait meanwhile, up to the send timeout.
    pub fn rejoining(&self) -> Option<String> {
        self.inner.status.rejoining()
    }

    /// Why this node is out of its group's view while it runs (it lost its
    /// majority, or the others removed it), until it is back; `None` while it runs
    /// a view. Sends fail with [`SendError::NoMajority`] meanwhile if it lost its
    /// majority (and wait, up to the send timeout, if it was removed).
    pub fn removal(&self) -> Option<Removal> {
        self.inner.status.removal()
    }

    /// Why this node stopped, if it did.
    #[inline]
    pub fn stopped(&self) -> Option<String> {
        self.inner.status.stopped()
    }

    /// The identity this member's certificate names, if the group admits members
    /// by certificate (with a secret, or none, there is none).
    pub fn certificate_identity(&self) -> Option<&str> {
        match &self.inner.creds {
            Some(crate::auth::Credentials::Certificates(c)) => Some(c.name()),
            _ => None,
        }
    }

    /// The predicate thread's spin budget in the current view, in µs: the
    /// configured one, or the one chosen from the host
    /// ([`spindle_sst::spin::auto_spin_us`], counting this host's members of the
    /// view); `None` before the first view.
    pub fn spin_us(&self) -> Option<u64> {
        self.inner.current.read().unwrap_or_else(|p| p.into_inner()).as_ref().map(|e| e.spin_us)
    }

    /// Waits until `done` holds or `deadline` passes by running this node's
    /// predicate passes on the calling thread, if the group is configured latency
    /// first ([`crate::config::Config::latency_first`]); across a view change it
    /// goes on with the next view's passes. `Some(true)`: `done` held; `Some(false)`:
    /// the deadline passed; `None`: it did not wait (the setting is off, another
    /// thread runs the passes, or the node stopped), so the caller waits its usual
    /// way. `done` and the node's triggers run on this thread: hold no lock while
    /// calling.
    pub fn wait_running_passes(&self, deadline: Instant, mut done: impl FnMut() -> bool) -> Option<bool> {
        use spindle_sst::predicate::Lent;
        if !self.inner.cfg.latency_first {
            return None;
        }
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) && Instant::now() >= deadline {
                return Some(done());
            }
            let (view, lender) = {
                let cur = spindle_sst::sync::read(&self.inner.current);
                let e = cur.as_ref()?;
                (e.view.id(), e.lender()?)
            };
            match lender.run_until(deadline, &mut done) {
                Lent::Done => return Some(true),
                Lent::TimedOut => return Some(false),
                // Stopped for a view change: the next view's passes, if there is one.
                Lent::Unavailable if self.view().is_some_and(|v| v.id() != view) => continue,
                Lent::Unavailable => return None,
            }
        }
    }

    /// Counters so far.
    pub fn metrics(&self) -> Metrics {
        // Under the view's read lock: a view change counts its resends and the
        // ended view's sends under the write lock, so both are seen or neither.
        let cur = spindle_sst::sync::read(&self.inner.current);
        let mut m = self.inner.counters.snapshot(cur.as_ref().map_or(0, Epoch::messages_sent));
        drop(cur);
        m.clients = self.inner.clients.connected() as u64;
        m.clients_dropped = self.inner.clients.dropped();
        m
    }

    /// Waits until the view has at least `n` members and no change is under way;
    /// false on timeout or stop.
    pub fn wait_for_members(&self, n: usize, within: Duration) -> bool {
        self.wait_until(within, |e| e.view.members().len() >= n && !e.is_wedged())
    }

    /// Waits up to `within` for a view that `f` accepts (tested at once, then at
    /// each view change; no polling); false on timeout or stop.
    pub fn wait_for_view(&self, within: Duration, mut f: impl FnMut(&View) -> bool) -> bool {
        self.wait_until(within, |e| f(&e.view))
    }

    /// Waits up to `within` for a view satisfying `f`.
    fn wait_until(&self, within: Duration, mut f: impl FnMut(&Epoch) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let gen = self.inner.status.generation();
            if let Some(e) = spindle_sst::sync::read(&self.inner.current).as_ref() {
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
            self.inner.status.wait_change(gen, left.min(Duration::from_millis(50)));
        }
    }

    /// Sends `body` to member `to` over the control plane and waits up to `within`
    /// for its handler's answer (see [`GroupBuilder::on_request`]). Point to point,
    /// outside the multicast order. One connection per member is kept open between
    /// requests (closed after 4 s idle); concurrent requests to one member open more.
    pub fn request(&self, to: NodeId, body: &[u8], within: Duration) -> Result<Vec<u8>, RequestError> {
        self.request_service(Service::APP, to, body, within)
    }

    /// [`Group::request`] for one of the services the layers above register
    /// ([`GroupBuilder::serve`]): the member answers with that service's handler,
    /// or refuses if it has none.
    pub fn request_service(
        &self,
        service: Service,
        to: NodeId,
        body: &[u8],
        within: Duration,
    ) -> Result<Vec<u8>, RequestError> {
        let addr = self.inner.directory.control_of(to).ok_or(RequestError::NotAMember(to))?;
        let creds = self.inner.creds.as_ref();
        self.inner.requests.request(to, addr, service.0, body, within, creds).map_err(RequestError::Failed)
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
        if let Some(e) = spindle_sst::sync::read(&self.inner.current).as_ref() {
            // If this view's list is full or it is ending, the next view asks again.
            e.request_edit(edit);
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
        if let Some(e) = spindle_sst::sync::read(&self.inner.current).as_ref() {
            e.leave();
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

    /// Stops this node (without leaving: the others will see it fail). Called (or
    /// the last handle dropped) on one of the group's own threads, in a hook that
    /// held a handle, it does not wait for that thread: it ends by itself.
    pub fn shutdown(&self) {
        self.inner.status.shut_down();
        self.inner.end("shut down".into());
        let me = std::thread::current().id();
        for t in lock(&self.threads).drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.shutdown();
    }
}
