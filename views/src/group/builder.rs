//! Building a [`Group`]: the layout, the callbacks, the timeouts, then `start`.

use super::clients::{ClientLimits, Clients};
use super::control;
use super::deliver::{Callback, Delivery, InPlace};
use super::directory::{data_addr, member_info, Directory};
use super::discovery;
use super::epoch::Epoch;
use super::hooks::{BatchCallback, Hooks, StateHook};
use super::install;
use super::metrics::Counters;
use super::status::Status;
use super::{DataListener, Group, Inner, StartError, APP_REGIONS};
use crate::config::{Config, AUTO_ID};
use crate::layout::{Layout, Shards};
use crate::view::View;
use spindle_sst::transport::NodeId;
use std::net::TcpListener;
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Builds a [`Group`] from a [`Config`], a layout and callbacks.
pub struct GroupBuilder {
    cfg: Config,
    layout: Arc<dyn Layout>,
    hooks: Hooks,
    app_regions: super::RegionsFn,
    held_regions: super::HeldFn,
    fixed_regions: Option<Vec<spindle_sst::transport::RegionSpec>>,
    client_limits: ClientLimits,
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
        let layout = Shards {
            shard_size: 1,
            max_shards: 1,
            window: cfg.ring_window(),
            max_msg: cfg.max_msg,
            arena: cfg.arena,
            relay: cfg.relay,
            ..Shards::default()
        };
        let all = AllMembers(layout);
        let setup_timeout = (cfg.failure_timeout() * 3).max(Duration::from_secs(3));
        GroupBuilder {
            cfg,
            layout: Arc::new(all),
            hooks: Hooks::default(),
            app_regions: Arc::new(|_| Vec::new()),
            held_regions: Arc::new(|_, _| Vec::new()),
            fixed_regions: None,
            client_limits: ClientLimits::default(),
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
    /// fails with [`SendError::NotReady`](super::SendError::NotReady).
    pub fn send_timeout(mut self, d: Duration) -> Self {
        self.send_timeout = d;
        self
    }

    /// Called with every message delivered in subgroup `k`, in delivery order, with
    /// the payload copied into a buffer (one copy per message; see
    /// [`GroupBuilder::on_deliver_in_place`] for none). Replaces an earlier callback
    /// of `k`.
    pub fn on_deliver(mut self, k: usize, f: impl FnMut(&Delivery<'_>) + Send + 'static) -> Self {
        self.hooks.deliver.insert(k, Arc::new(Mutex::new(Callback::Copy(Box::new(f)))));
        self
    }

    /// Like [`GroupBuilder::on_deliver`], but the callback reads each message in its
    /// slot (word reads or a copy of what it needs; valid until it returns): no copy.
    ///
    /// ```no_run
    /// # use spindle_views::{config::Config, group::GroupBuilder};
    /// # let cfg = Config::builder(0, "127.0.0.1:7000".parse().unwrap()).build().unwrap();
    /// let g = GroupBuilder::new(cfg).on_deliver_in_place(0, |d| {
    ///     let first = d.message.word(0); // bytes 0..8 of the payload, read in place
    ///     println!("{} sent {} bytes, first word {first}", d.sender, d.message.len());
    /// });
    /// ```
    pub fn on_deliver_in_place(mut self, k: usize, f: impl FnMut(&InPlace<'_>) + Send + 'static) -> Self {
        self.hooks.deliver.insert(k, Arc::new(Mutex::new(Callback::InPlace(Box::new(f)))));
        self
    }

    /// Makes the delivery callback of each subgroup of each view that has no
    /// callback of its own ([`GroupBuilder::on_deliver`]): for dynamic layouts, whose
    /// subgroups mean different things in different views. Runs at the start of every
    /// view, before it delivers anything, once per subgroup this node is in; `None`
    /// delivers that subgroup to nobody. The callback gets each delivered batch,
    /// read in place ([`InPlaceBatch::iter`](super::InPlaceBatch::iter)).
    pub fn deliver_by(
        mut self,
        f: impl Fn(&View, usize, &spindle_smc::SubgroupSpec) -> Option<BatchCallback> + Send + Sync + 'static,
    ) -> Self {
        self.hooks.deliver_by = Some(Box::new(f));
        self
    }

    /// Answers point-to-point requests from other members ([`Group::request`]) on
    /// the control plane's threads: bytes in, bytes out.
    pub fn on_request(mut self, f: impl Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static) -> Self {
        self.hooks.on_request = Some(Box::new(f));
        self
    }

    /// Answers point-to-point requests for `service` from other members
    /// ([`Group::request_service`](super::Group::request_service)): how the layers
    /// above keep their protocols apart on one control plane. A second handler for
    /// a service replaces the first; [`super::Service::APP`] is
    /// [`GroupBuilder::on_request`]'s.
    pub fn serve(mut self, service: super::Service, f: impl Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static) -> Self {
        match service.0 {
            0 => self.hooks.on_request = Some(Box::new(f)),
            s => {
                self.hooks.services.insert(s, Box::new(f));
            }
        }
        self
    }

    /// Serves the application's own protocol to clients (see
    /// [`super::ClientHandler`]); without one, client requests go to
    /// [`GroupBuilder::on_request`] and client posts are refused.
    pub fn client_handler(mut self, h: impl super::ClientHandler + 'static) -> Self {
        self.hooks.client_handler = Some(Arc::new(h));
        self
    }

    /// Called with every view this node installs, the first one included.
    pub fn on_view(mut self, f: impl FnMut(&View) + Send + 'static) -> Self {
        self.hooks.on_view = Mutex::new(Some(Box::new(f)));
        self
    }

    /// Called when this node, removed by the others while alive, was taken into the
    /// group again ([`crate::config::Config::rejoin`]): with why it was removed,
    /// after the joiners' state hooks ran and before the view that has it again
    /// starts (then [`GroupBuilder::on_view`] runs as for any view). Messages
    /// delivered while it was out are not delivered to it; the state hooks carry
    /// what it needs. Runs on the thread that installs views; it must not call into
    /// the [`Group`].
    pub fn on_rejoin(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.hooks.on_rejoin = Some(Box::new(f));
        self
    }

    /// Called at once when this node's view ends without it while it runs: it
    /// could not reach a majority of the view's members ([`super::Removal::NoMajority`]:
    /// which members it lost, and how many must be back), or the others removed it.
    /// With [`crate::config::Config::rejoin`] on (the default) it then works on
    /// getting back, and [`GroupBuilder::on_rejoin`] runs when it is; meanwhile
    /// [`Group::removal`] says the same, and sends fail with
    /// [`super::SendError::NoMajority`] after a lost majority. Runs on the thread
    /// that installs views; it must not call into the [`Group`].
    pub fn on_removed(mut self, f: impl Fn(&super::Removal) + Send + Sync + 'static) -> Self {
        self.hooks.on_removed = Some(Box::new(f));
        self
    }

    /// Called when this node wedges its view for a change (a failure, a join, a
    /// leave or a layout edit is under way), before it tells the other members
    /// that it wedged: everything it posted to a peer before the call reaches that
    /// peer before its wedged row does (one link, in order), and a peer cannot
    /// install the next view before this node's commit, if this node is the
    /// view's leader. The moment for a service of one-sided writes to stop
    /// acknowledging them (Tailwind's primary, the leader, does).
    /// Runs on the predicate thread: it must be quick, must not block and must
    /// not call into the [`Group`].
    pub fn on_wedge(mut self, f: impl Fn(&View) + Send + Sync + 'static) -> Self {
        self.hooks.on_wedge = Some(Arc::new(f));
        self
    }

    /// Registers `regions` (ids at least [`APP_REGIONS`], distinct) in every view's
    /// transport, for the application's own one-sided writes
    /// ([`Group::transport`]); each view's are fresh and zeroed (see
    /// [`GroupBuilder::on_view_end`] to keep what they held).
    pub fn regions(mut self, regions: Vec<spindle_sst::transport::RegionSpec>) -> Self {
        self.fixed_regions = Some(regions.clone());
        self.app_regions = Arc::new(move |_| regions.clone());
        self
    }

    /// Like [`GroupBuilder::regions`], with the regions a function of the view
    /// (e.g. of its layout document: a service created at run time gets its
    /// regions from the view that lists it). Every member must compute the same
    /// regions for a view. A view's regions whose ids are below [`APP_REGIONS`] or
    /// repeat are left out of that view (and logged).
    pub fn regions_by(
        mut self,
        f: impl Fn(&View) -> Vec<spindle_sst::transport::RegionSpec> + Send + Sync + 'static,
    ) -> Self {
        self.fixed_regions = None;
        self.app_regions = Arc::new(f);
        self
    }

    /// The application regions ([`GroupBuilder::regions`]) that will be written at
    /// a node in a view, by the node itself or by its peers' one-sided writes:
    /// `f(view, node)`. Each is reserved whole when the view starts where it lies
    /// in a file (`shm`; see [`spindle_sst::region::Region::reserve`]), before any
    /// write, so a `/dev/shm` without room for it stops this node with "cannot
    /// reserve" (as for the group's own tables) instead of a peer's write into it
    /// meeting `SIGBUS`. Regions left out stay sparse: their pages are allocated
    /// when first written.
    pub fn reserve_regions_by(
        mut self,
        f: impl Fn(&View, NodeId) -> Vec<spindle_sst::transport::RegionId> + Send + Sync + 'static,
    ) -> Self {
        self.held_regions = Arc::new(f);
        self
    }

    /// Called at the end of every view this node leaves for the next one (or was
    /// removed from, before it joins again), with that view's transport, after its
    /// last delivery and before its regions are dropped:
    /// the moment to read what peers wrote into the application's regions. Runs on
    /// the thread that installs views; it must not call into the [`Group`].
    pub fn on_view_end(
        mut self,
        f: impl FnMut(&View, &Arc<dyn spindle_sst::transport::Transport>) + Send + 'static,
    ) -> Self {
        self.hooks.on_view_end = Mutex::new(Some(Box::new(f)));
        self
    }

    /// Called with every view this node installs (the first one included) and that
    /// view's transport, just before [`GroupBuilder::on_view`]: the moment to take
    /// the new view's application regions ([`GroupBuilder::regions`]). Runs on the
    /// thread that installs views; it must not call into the [`Group`].
    pub fn on_view_start(
        mut self,
        f: impl FnMut(&View, &Arc<dyn spindle_sst::transport::Transport>) + Send + 'static,
    ) -> Self {
        self.hooks.on_view_start = Mutex::new(Some(Box::new(f)));
        self
    }

    /// How many clients (processes outside the view, [`crate::client`]) this member
    /// serves and how much it buffers for each (see [`ClientLimits`]).
    pub fn client_limits(mut self, limits: ClientLimits) -> Self {
        self.client_limits = limits;
        self
    }

    /// Declares subgroup `k`'s state for joiners (see [`StateHook`]).
    pub fn state(
        mut self,
        k: usize,
        get: impl Fn() -> Vec<u8> + Send + Sync + 'static,
        set: impl Fn(&[u8]) + Send + Sync + 'static,
    ) -> Self {
        self.hooks.state.push((k, StateHook { get: Box::new(get), set: Box::new(set) }));
        self
    }

    /// Starts a new group (no contact) or joins one; returns once this node runs a
    /// view.
    pub fn start(mut self) -> Result<Group, StartError> {
        self.cfg.validate()?;
        let fixed = self.fixed_regions.take().unwrap_or_default();
        for (i, r) in fixed.iter().enumerate() {
            if r.id.0 < APP_REGIONS || fixed[..i].iter().any(|o| o.id == r.id) {
                return Err(StartError::Setup(format!(
                    "application region {:?}: ids must be distinct and at least {APP_REGIONS:#x}",
                    r.id
                )));
            }
        }
        let mut cfg = self.cfg.clone();
        let creds = cfg.security.credentials()?;
        if let Some(crate::auth::Credentials::Secret(s)) = &creds {
            if s.name().is_some() {
                return Err(crate::config::ConfigError::Invalid {
                    key: "security.identity",
                    why: "is for clients: a member holds the group secret".into(),
                }
                .into());
            }
        }
        let secret = creds.as_ref().and_then(crate::auth::Credentials::secret).cloned();
        if creds.is_none() && !cfg.listen.ip().is_loopback() {
            tracing::warn!(
                listen = %cfg.listen,
                "no group secret or certificates and a non-loopback address: any process that reaches this port or hears \
                 discovery can join (see docs/security.md)"
            );
        }
        // A member started again on its state directory takes its id back.
        let stored = match &cfg.state_dir {
            Some(dir) => super::restart::load(dir, &cfg.name)?,
            None => None,
        };
        if let (Some(s), AUTO_ID) = (&stored, cfg.node_id) {
            cfg.node_id = s.node;
        }
        let (listener, data_listener) = bind(&mut cfg)?;
        if cfg.transport == crate::config::Transport::Shm {
            // Files of members that were killed (or interrupted) before they could
            // remove theirs; only files whose creating process is gone are removed.
            let swept = spindle_sst::transport::shm::remove_stale_files();
            if swept > 0 {
                tracing::info!(swept, "removed /dev/shm files of processes that no longer exist");
            }
        }
        if cfg.contact.is_none() && cfg.discovery {
            let wait = Duration::from_millis(cfg.discovery_wait_ms);
            cfg.contact = match discovery::look(&cfg, wait, secret.as_ref()) {
                Ok(discovery::Found::Member(a) | discovery::Found::Starter(a)) => Some(a),
                Ok(discovery::Found::Nothing) => None,
                Ok(discovery::Found::OtherCredentials(at)) => {
                    let why = match &creds {
                        Some(_) => crate::auth::AuthError::Failed,
                        None => crate::auth::AuthError::Required,
                    };
                    return Err(StartError::Auth { contact: at, why });
                }
                // A member of the stranded view restores it through a stranded
                // member (see `restart`); anyone else would split the group.
                Ok(discovery::Found::Stranded { at, view }) => match &stored {
                    Some(_) => Some(at),
                    None => return Err(StartError::Stranded { name: cfg.name.clone(), view }),
                },
                Err(e) => {
                    return Err(StartError::Setup(format!(
                        "discovery: {e} (give a contact, or set discovery = false to start a group alone)"
                    )))
                }
            };
            if let Some(a) = cfg.contact {
                tracing::info!(contact = %a, "discovery found the group");
            }
        }
        // A node without an id learns the one the group gives it by joining (the
        // node that starts a group is 0); so it joins before anything takes its id.
        let join = |cfg: &Config, me: u32, contact| {
            let deadline = Instant::now() + Duration::from_secs(120);
            let last_view = stored.as_ref().map(|s| s.view);
            let info = member_info(NodeId(me), cfg.listen);
            control::join(info, contact, deadline, cfg.failure_timeout() * 3, last_view, creds.as_ref()).map_err(|e| {
                match e {
                    control::JoinError::Auth { contact, why } => StartError::Auth { contact, why },
                    control::JoinError::Refused(why) => StartError::Join(why),
                }
            })
        };
        let mut welcome = None;
        if cfg.node_id == AUTO_ID {
            cfg.node_id = match cfg.contact {
                None => 0,
                Some(contact) => {
                    let w = join(&cfg, AUTO_ID, contact)?;
                    let mine = w.0.members.iter().find(|m| m.control == cfg.listen).map(|m| m.node);
                    welcome = Some(w);
                    mine.ok_or_else(|| StartError::Join("the view that took this node does not list it".into()))?
                }
            };
        }
        let me = NodeId(cfg.node_id);
        let inner = Arc::new(Inner {
            cfg: cfg.clone(),
            layout: self.layout,
            hooks: self.hooks,
            edits: Mutex::new(Vec::new()),
            carry: Mutex::new(Vec::new()),
            app_regions: self.app_regions,
            held_regions: self.held_regions,
            requests: control::RequestPool::default(),
            current: RwLock::new(None),
            status: Status::default(),
            counters: Counters::default(),
            clients: Arc::new(Clients::new(self.client_limits)),
            directory: Directory::new(me, cfg.listen),
            setup_timeout: self.setup_timeout,
            send_timeout: self.send_timeout,
            data_listener,
            restore: std::sync::Mutex::new(None),
            creds: creds.clone(),
            client_key: Mutex::new(
                crate::auth::client_key(secret.as_ref()).map_err(|e| StartError::Setup(format!("random: {e}")))?,
            ),
        });
        let server = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("spindle-control".into())
                .spawn(move || control::serve(inner, listener))
                .map_err(|e| StartError::Setup(e.to_string()))?
        };
        let mut threads = vec![server];
        if cfg.discovery {
            let inner = inner.clone();
            let beacons =
                std::thread::Builder::new().name("spindle-discovery".into()).spawn(move || discovery::serve(inner));
            threads.push(beacons.map_err(|e| StartError::Setup(e.to_string()))?);
        }
        if let Some(every) = super::recheck::interval(&inner) {
            let inner = inner.clone();
            let checks = std::thread::Builder::new()
                .name("spindle-recheck".into())
                .spawn(move || super::recheck::run(inner, every));
            threads.push(checks.map_err(|e| StartError::Setup(e.to_string()))?);
        }
        let (tx, rx) = channel();
        let first = match cfg.contact {
            None => Ok(View::initial(vec![me])),
            Some(contact) => match welcome {
                Some(w) => Ok(w),
                None => join(&cfg, cfg.node_id, contact),
            }
            .map(|w| super::rejoin::take_welcome(&inner, w)),
        };
        let epoch = first.and_then(|v| {
            Ok((Epoch::start(&inner, v.clone(), &[], tx.clone()).map_err(|e| StartError::Setup(e.to_string()))?, v))
        });
        let (epoch, first) = match epoch {
            Ok(e) => e,
            Err(e) => {
                // The threads started so far end with the node.
                inner.status.shut_down();
                inner.end(e.to_string());
                for t in threads {
                    let _ = t.join();
                }
                return Err(e);
            }
        };
        let transport = epoch.transport.clone();
        *spindle_sst::sync::write(&inner.current) = Some(epoch);
        super::restart::remember(&inner, &first);
        inner.hooks.view_started(&first, &transport);
        let manager = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("spindle-views".into())
                .spawn(move || install::manage(inner, rx, tx))
                .map_err(|e| StartError::Setup(e.to_string()))?
        };
        threads.push(manager);
        Ok(Group { inner, threads: Mutex::new(threads) })
    }
}

/// Binds the control port and, for tcp and rdma, the data port (the next one).
/// With port 0 the OS picks the control port, and another pair is tried while the
/// next port is taken; `cfg.listen` becomes the address bound.
fn bind(cfg: &mut Config) -> Result<(TcpListener, Option<DataListener>), StartError> {
    let pick = cfg.listen.port() == 0;
    let mut tries = 0;
    loop {
        let listener =
            TcpListener::bind(cfg.listen).map_err(|e| StartError::Listen { addr: cfg.listen, why: e.to_string() })?;
        let bound = listener.local_addr().map_err(|e| StartError::Listen { addr: cfg.listen, why: e.to_string() })?;
        let listen = if pick { bound } else { cfg.listen };
        if listen.port() == u16::MAX {
            continue; // no room for the data port; only possible with port 0
        }
        let addr = data_addr(listen);
        let data = match cfg.transport {
            crate::config::Transport::Tcp => {
                spindle_sst::transport::tcp::bind(addr).map(|l| Some(DataListener::Tcp(l)))
            }
            crate::config::Transport::Rdma => {
                // Refuse at once, with the reason, rather than at the first view.
                spindle_sst::transport::rdma::available().map_err(StartError::Setup)?;
                spindle_sst::transport::rdma::bind(addr).map(|l| Some(DataListener::Rdma(l)))
            }
            _ => Ok(None),
        };
        match data {
            Ok(d) => {
                cfg.listen = listen;
                return Ok((listener, d));
            }
            Err(_) if pick && tries < 50 => tries += 1,
            Err(e) => return Err(StartError::Listen { addr, why: format!("data port: {e}") }),
        }
    }
}

/// The default layout: one subgroup of every member (all sending).
#[derive(Debug)]
struct AllMembers(Shards);

impl Layout for AllMembers {
    fn subgroups(&self, view: &View) -> Result<Vec<spindle_smc::SubgroupSpec>, crate::layout::LayoutError> {
        let n = view.members().len();
        Shards { shard_size: n, ..self.0.clone() }.subgroups(view)
    }
}
