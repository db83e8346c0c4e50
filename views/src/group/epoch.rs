//! One view's runtime: its transport, its smc subgroups on the node's predicate
//! thread, and the view-change engine driven from the same thread.
//!
//! ```text
//!  predicate thread: smc passes ─┬─ engine predicate (rows moved, a local input, or wedged)
//!                                ├─ heartbeat timer (beat, then the detector)
//!                                └─ transport events (a broken link: suspect at once)
//!  engine Install/Stop ──▶ channel ──▶ the group's manager thread (builds the next epoch)
//! ```
//!
//! Each view gets fresh tables in fresh regions over a fresh transport (Derecho does
//! the same), so nothing of an old view can land in a new one.
//!
//! # Members late to a new view
//! Members reach a view's setup at different times: each one first finishes the old
//! view's change, which may wait on a failure detector. A member of the new view is,
//! for this node:
//! - **present** once its setup met ours (its shm file is there, or its tcp
//!   connection is made). Setup waits for every member (not already suspected) up to
//!   the setup deadline, `setup_timeout` after this node arrived, and gives each
//!   member the whole of it, whatever the others do.
//! - **missing** if it had not come by that deadline, or if it is gone (its control
//!   port refuses connections: its process no longer exists; setup asks every 50 ms
//!   about each member it still waits for): it starts out suspected, as a failure
//!   would be.
//! - **pending** while it is present but has not beaten in the new table yet: it may
//!   still be waiting out its own setup deadline for a missing member, which ends at
//!   most `setup_timeout` after ours did. Its silence is held against it only after
//!   `setup_timeout + failure_timeout` (then `failure_timeout` once it has beaten).
//!   Transport breaks (a dead pid, a reset connection) still suspect it at once.
//!
//! Why this is safe: suspicion is the one input that can remove a member, and the
//! protocol is safe under any suspicion (a wrong one costs that member its place,
//! never agreement: the majority rule and the leader's takeover wait hold whatever is
//! suspected). Missing and pending only decide *when* a member is suspected. What
//! they protect is liveness: suspecting a live member that is merely late spreads by
//! gossip, and a view whose members each miss the others leaves no majority anywhere
//! (it did: a sequential tcp setup let a dead leader use up the whole deadline, and
//! the survivors of a second failure each went on alone and stopped).

use super::{DataListener, Event, Inner};
use crate::engine::{Action, Cores, Engine, JoinRefusal};
use crate::membership::Joiner;
use crate::membership::MembershipLayout;
use crate::view::View;
use spindle_smc::runtime::{Delivery, Runtime, Subgroup, SubgroupSetup};
use spindle_smc::{SmcCore, SmcLayout, SubgroupSpec};
use spindle_sst::heartbeat::Detector;
use spindle_sst::predicate::{Kind, PollConfig};
use spindle_sst::sync::atomic::{AtomicU64, Ordering};
use spindle_sst::transport::{shm, tcp, NodeId, PeerEvent, RegionId, RegionSpec, Transport};
use spindle_sst::{Pushes, Table};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One view's runtime.
pub(crate) struct Epoch {
    pub(crate) view: View,
    /// The view's transport (applications' regions are registered in it too).
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) specs: Vec<SubgroupSpec>,
    pub(crate) subs: Vec<Option<Subgroup>>,
    pub(crate) driver: Arc<Mutex<Driver>>,
    pub(crate) rt: Option<Runtime>,
    /// The predicate thread's spin budget in this view, in µs.
    pub(crate) spin_us: u64,
    /// Where the messages this node sent in the view are added once it stops
    /// ([`super::metrics::Counters`]).
    sent_ended: Arc<AtomicU64>,
}

impl std::fmt::Debug for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoch").field("view", &self.view).finish_non_exhaustive()
    }
}

/// The engine and what the predicate thread needs around it.
pub(crate) struct Driver {
    pub(crate) engine: Engine,
    subs: Vec<Option<Subgroup>>,
    transport: Arc<dyn Transport>,
    detector: Detector,
    last_fp: u64,
    pub(crate) poke: bool,
    done: bool,
    wedged_at: Option<Instant>,
    tx: Sender<Event>,
    on_wedge: Option<super::hooks::WedgeFn>,
    /// Members suspected in the last pass, cut off at the start of the next one
    /// (see [`step`]).
    cut: Vec<NodeId>,
}

struct SubCores<'a>(&'a [Option<Subgroup>]);

impl Cores for SubCores<'_> {
    fn with_core<R>(&mut self, k: usize, f: impl FnOnce(&mut SmcCore) -> R) -> R {
        self.0[k].as_ref().expect("a subgroup this node is in").with_core(f)
    }
}

use spindle_sst::sync::lock;

/// Why a view could not start at this node.
#[derive(Debug)]
pub(crate) enum SetupFailed {
    /// The host has no room for the shared memory this node writes (a full or too
    /// small `/dev/shm`): starting again cannot help until someone makes room.
    NoRoom(String),
    /// Anything else (a peer missing, a port, a file): another view may start.
    Other(String),
}

impl SetupFailed {
    /// True where trying again cannot help.
    pub(crate) fn lasting(&self) -> bool {
        matches!(self, SetupFailed::NoRoom(_))
    }
}

impl std::fmt::Display for SetupFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupFailed::NoRoom(why) | SetupFailed::Other(why) => f.write_str(why),
        }
    }
}

impl From<String> for SetupFailed {
    fn from(why: String) -> Self {
        SetupFailed::Other(why)
    }
}

impl From<&str> for SetupFailed {
    fn from(why: &str) -> Self {
        SetupFailed::Other(why.into())
    }
}

impl Epoch {
    /// Builds the runtime of `view` (the transport setup waits for its members).
    pub(crate) fn start(
        inner: &Arc<Inner>,
        view: View,
        suspects: &[NodeId],
        tx: Sender<Event>,
    ) -> Result<Epoch, SetupFailed> {
        let cfg = &inner.cfg;
        let me = NodeId(cfg.node_id);
        let specs = match inner.layout.subgroups(&view) {
            Ok(s) => s,
            Err(e) => {
                tracing::info!(node = %me, view = view.id().0, %e, "layout not satisfied: no subgroups in this view");
                Vec::new()
            }
        };
        let senders: Vec<usize> = specs.iter().map(|s| s.senders.len()).collect();
        let mlay = MembershipLayout::new(&senders);
        let mut regions = vec![RegionSpec { id: RegionId(0), len: mlay.table_bytes(view.members().len()) }];
        for (k, s) in specs.iter().enumerate() {
            regions.push(RegionSpec { id: RegionId(1 + k as u16), len: SmcLayout::new(s).table_bytes() });
        }
        for r in (inner.app_regions)(&view) {
            if r.id.0 < super::APP_REGIONS || regions.iter().any(|o| o.id == r.id) {
                tracing::error!(node = %me, view = view.id().0, region = ?r.id, "an application region with a reserved or repeated id: left out");
                continue;
            }
            regions.push(r);
        }
        let peers: Vec<NodeId> = view.members().iter().copied().filter(|n| *n != me && !suspects.contains(n)).collect();
        let timeout = inner.setup_timeout;
        let gone = inner.directory.gone_probe();
        let transport: Arc<dyn Transport> = match cfg.transport {
            crate::config::Transport::Shm => {
                let c = shm::ShmConfig {
                    partial: true,
                    gone: Some(gone),
                    ..shm::ShmConfig::new(format!("{}-v{}", cfg.name, view.id().0), me, peers.clone(), regions, timeout)
                };
                Arc::new(shm::join(&c).map_err(|e| {
                    let why = format!("shm setup of view {}: {e}", view.id().0);
                    match e {
                        spindle_sst::transport::SetupError::NoRoom(_) => SetupFailed::NoRoom(why),
                        _ => SetupFailed::Other(why),
                    }
                })?)
            }
            crate::config::Transport::Tcp | crate::config::Transport::Rdma => {
                let addrs = inner.directory.data_addrs(&peers)?;
                let group = spindle_sst::hash::digest(cfg.name.as_bytes()) ^ view.id().0;
                let v = view.id().0;
                match inner.data_listener.as_ref().ok_or("no data port bound")? {
                    DataListener::Tcp(listener) => {
                        let auth = inner.link_auth();
                        let c = tcp::TcpConfig {
                            timeout,
                            partial: true,
                            gone: Some(gone),
                            auth,
                            ..tcp::TcpConfig::new(me, addrs, group, regions)
                        };
                        Arc::new(listener.establish(&c).map_err(|e| format!("tcp setup of view {v}: {e}"))?)
                    }
                    DataListener::Rdma(listener) => {
                        let c = spindle_sst::transport::rdma::RdmaConfig {
                            timeout,
                            partial: true,
                            device: cfg.rdma_device.clone(),
                            port: cfg.rdma_port,
                            gid_index: cfg.gid_index,
                            ..spindle_sst::transport::rdma::RdmaConfig::new(me, addrs, group, regions)
                        };
                        listener.establish_dyn(&c).map_err(|e| format!("rdma setup of view {v}: {e}"))?
                    }
                }
            }
            crate::config::Transport::Mem => {
                return Err("the mem transport serves smc tests only; a Group needs shm or tcp".into())
            }
        };
        let present = transport.peers();
        let missing: Vec<NodeId> = peers.iter().copied().filter(|p| !present.contains(p)).collect();
        if !missing.is_empty() {
            tracing::warn!(node = %me, view = view.id().0, ?missing, "members missing at setup start out suspected");
        }
        let mut suspects = suspects.to_vec();
        suspects.extend(missing);
        // The application's regions written here in this view, reserved before any
        // write lands in them (see `GroupBuilder::reserve_regions_by`).
        for id in (inner.held_regions)(&view, me) {
            if let Some(r) = transport.region(id) {
                r.reserve(0, r.len()).map_err(|e| SetupFailed::NoRoom(format!("region {:#x}: {e}", id.0)))?;
            }
        }
        let row = Table::create_shared(mlay.table_layout().clone(), view.members(), me, RegionId(0), &*transport)
            .map_err(|e| format!("membership table: {e}"))?;
        // The membership row is written by this node alone, all of it: reserved where
        // it lies in a file (`shm`), so a full /dev/shm fails the setup (see the
        // subgroups' rows in `spindle_smc::runtime`).
        let whole = spindle_sst::table::ColumnRange { off: 0, len: mlay.table_layout().row_bytes() };
        row.reserve(whole).map_err(|e| SetupFailed::NoRoom(format!("membership table: {e}")))?;
        let mut setups = Vec::new();
        let mut mine = Vec::new();
        for (k, spec) in specs.iter().enumerate() {
            if spec.member_rank(me).is_some() {
                mine.push(k);
                setups.push(SubgroupSetup {
                    spec: spec.clone(),
                    region: RegionId(1 + k as u16),
                    upcall: inner.hooks.upcall(k, &view, spec, inner.counters.delivered.clone(), inner.clients.clone()),
                    delivery: Delivery::Inline,
                });
            }
        }
        let spin_us = cfg.spin_us.unwrap_or_else(|| {
            let here = super::spin::members_here(&view, cfg.transport, cfg.listen, &inner.directory);
            super::spin::auto_spin_us(here, super::spin::host_cores())
        });
        let poll = PollConfig {
            spin: Duration::from_micros(spin_us),
            busy_yield: Duration::from_micros(cfg.busy_yield_us),
            name: format!("spindle-{}-v{}", me.0, view.id().0),
            ..PollConfig::default()
        };
        let rt = Runtime::start(transport.clone(), setups, poll).map_err(|e| match e {
            e @ spindle_smc::runtime::StartError::Reserve { .. } => SetupFailed::NoRoom(format!("runtime: {e}")),
            e => SetupFailed::Other(format!("runtime: {e}")),
        })?;
        let mut subs: Vec<Option<Subgroup>> = vec![None; specs.len()];
        for (i, k) in mine.iter().enumerate() {
            subs[*k] = Some(rt.subgroups()[i].clone());
        }
        let mut engine = Engine::new(view.clone(), specs.clone(), row, cfg.majority, &suspects);
        engine.set_editor(inner.layout.clone());
        for e in inner.edits_due(&view) {
            engine.request_edit(&e);
        }
        // A member found at setup may still be in its own setup (it arrived later and
        // waits for the missing ones up to its own deadline): it is pending, not
        // silent, until that deadline could have passed. See the module docs.
        let detector =
            Detector::for_table(engine.table(), Instant::now(), cfg.failure_timeout()).with_startup_grace(timeout);
        let driver = Arc::new(Mutex::new(Driver {
            last_fp: u64::MAX,
            engine,
            subs: subs.clone(),
            transport: transport.clone(),
            detector,
            poke: true,
            done: false,
            wedged_at: None,
            tx,
            on_wedge: inner.hooks.on_wedge.clone(),
            cut: Vec::new(),
        }));
        wire_predicates(&rt, &driver, cfg.heartbeat());
        let sent_ended = inner.counters.sent_ended();
        Ok(Epoch { view, transport, specs, subs, driver, rt: Some(rt), spin_us, sent_ended })
    }

    /// The handle of subgroup `k`, if this node is in it.
    pub(crate) fn sub(&self, k: usize) -> Option<&Subgroup> {
        self.subs.get(k).and_then(|s| s.as_ref())
    }

    /// A handle to run this view's passes on a waiting thread (see
    /// [`spindle_sst::predicate::Lender`]); `None` once stopped.
    pub(crate) fn lender(&self) -> Option<spindle_sst::predicate::Lender<()>> {
        self.rt.as_ref().map(|rt| rt.predicates().lender())
    }

    /// Asks the predicate thread to run the engine now.
    pub(crate) fn poke(&self) {
        lock(&self.driver).poke = true;
        if let Some(rt) = &self.rt {
            rt.predicates().notify();
        }
    }

    /// Stops the predicate thread; the transport goes when the last handle does.
    /// Asks this view's engine to add `joiner` (taken, redirected to the leader, or
    /// refused); the caller pokes the predicate thread once it kept the connection.
    pub(crate) fn request_join(&self, joiner: Joiner) -> Result<(), JoinRefusal> {
        lock(&self.driver).engine.request_join(joiner)
    }

    /// Suspects `peer` from outside the predicate thread (its certificate is no
    /// longer valid): the view changes without it.
    pub(crate) fn suspect(&self, peer: NodeId) {
        {
            let mut d = lock(&self.driver);
            if d.engine.peer_done(peer) {
                return;
            }
            d.engine.suspect(peer);
        }
        self.poke();
    }

    /// True once this view is wedged (a change is under way).
    pub(crate) fn is_wedged(&self) -> bool {
        lock(&self.driver).engine.is_wedged()
    }

    /// Asks this view's leader for a layout edit (see [`crate::layout::Layout::edit`]).
    pub(crate) fn request_edit(&self, edit: &[u8]) {
        lock(&self.driver).engine.request_edit(edit);
        self.poke();
    }

    /// Asks to leave the group at the next view change.
    pub(crate) fn leave(&self) {
        lock(&self.driver).engine.leave();
        self.poke();
    }

    pub(crate) fn stop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.stop();
            // The predicate thread took in its last entries: the view's count is final.
            self.sent_ended.fetch_add(self.messages_sent(), Ordering::Relaxed);
            // What is still queued (over tcp, the rest of a large payload and, behind
            // it, this member's echo of the next view) goes out before the links
            // close: a peer still trimming sees the echo and takes the close for a
            // member that moved on, not for a failure.
            self.transport.drain(DRAIN);
        }
    }
}

impl Epoch {
    /// Messages this node sent in the view so far, as its subgroups' cores took
    /// them in (a message is counted within a pass of its send; resends after a
    /// view change counted again).
    pub(crate) fn messages_sent(&self) -> u64 {
        self.subs.iter().flatten().map(|s| s.stats().messages_sent).sum()
    }
}

/// The longest a member leaving a view waits for its last writes to go out.
const DRAIN: Duration = Duration::from_millis(500);

/// How often a busy predicate thread looks at the membership rows (see
/// `wire_predicates`): a view change's steps wait this much more at most.
const MEMBERSHIP_PACE: Duration = Duration::from_micros(50);

fn wire_predicates(rt: &Runtime, driver: &Arc<Mutex<Driver>>, period: Duration) {
    let pt = rt.predicates();
    let (d1, d2) = (driver.clone(), driver.clone());
    // Paced: summing the rows' control words costs more than a pass of the data
    // path, so while messages flow it is looked at every MEMBERSHIP_PACE, and
    // always before the thread parks.
    pt.register_paced(
        Kind::Recurrent,
        MEMBERSHIP_PACE,
        move |_: &()| match d1.try_lock() {
            // Everything a step waits on shows in the rows' fingerprint or comes as a
            // local input (poke); the heartbeat timer pokes during a change as a safety
            // net. So a change that waits (for a suspicion, say) does not spin.
            Ok(d) => !d.done && (d.poke || d.engine.fingerprint() != d.last_fp),
            Err(_) => true,
        },
        move |_, pushes| step(&d2, pushes),
    );
    let d3 = driver.clone();
    pt.every(period, move |_, pushes| {
        let mut d = lock(&d3);
        if d.done {
            return;
        }
        pushes.push(d.engine.beat());
        if d.engine.is_wedged() {
            d.poke = true;
        }
        let now = Instant::now();
        d.detector.look(now);
        let table = d.engine.table().clone();
        let col = d.engine.heartbeat_column();
        for r in (0..table.rows()).filter(|r| *r != table.my_rank()) {
            let peer = table.members()[r];
            if d.engine.peer_done(peer) {
                continue; // it moved on to the next view
            }
            // A peer whose bytes keep arriving is alive, even while its heartbeat
            // waits behind megabytes of large messages on the same tcp stream.
            let heard = d.transport.heard(peer);
            d.detector.heard(now, peer, heard);
            if let Some(s) = d.detector.observe(now, peer, table.counter(r, col)) {
                tracing::warn!(peer = %s.peer, reason = ?s.reason, "suspected");
                d.engine.suspect(s.peer);
                d.poke = true;
            }
        }
        // A sender whose ring entry lied (a bad length or offset) was refused by its
        // subgroup; it is removed like a failed member (checked on this timer: a
        // refusal is rare and costs a lock per subgroup here, not on every pass).
        let subs = d.subs.clone();
        for s in subs.iter().flatten() {
            for (peer, why) in s.with_core(|c| c.take_refused()) {
                tracing::warn!(%peer, %why, "sender refused: suspected");
                d.engine.suspect(peer);
                d.poke = true;
            }
        }
    });
    let d4 = driver.clone();
    pt.on_event(move |_, ev, _| {
        let PeerEvent::Broken { peer, reason } = ev;
        let mut d = lock(&d4);
        if d.engine.peer_done(*peer) {
            return; // it moved on to the next view and closed its links
        }
        if d.detector.broken(*peer, reason).is_some() {
            tracing::warn!(peer = %peer, %reason, "link broken: suspected");
        }
        d.engine.suspect(*peer);
        d.poke = true;
    });
}

/// One engine step on the predicate thread.
///
/// A member suspected in a step is cut off at the start of the next one, once the
/// row that says so went out with this step's pushes (or at once, if the view ends
/// in this step): the others, the suspect included, read the suspicion before the
/// suspect sees its link break. Cut off first, the suspect would take the break
/// for this member's failure and could spread that suspicion to the others before
/// this member's row reached them; a revoked member's certificate check met that
/// race, and the revoked member and a third formed the next view without the
/// member that checked. Rows of a suspect are never read again from the step that
/// suspects it (see `crate::engine`), so its writes landing meanwhile change nothing.
fn step(driver: &Mutex<Driver>, pushes: &mut Pushes) {
    let mut d = lock(driver);
    if d.done {
        return;
    }
    cut_off(&mut d);
    d.poke = false;
    d.last_fp = d.engine.fingerprint();
    let mut actions = Vec::new();
    let subs = d.subs.clone();
    let was_wedged = d.engine.is_wedged();
    d.engine.step(&mut SubCores(&subs), pushes, &mut actions);
    if d.engine.is_wedged() && !was_wedged {
        d.wedged_at = Some(Instant::now());
        tracing::info!(change = %d.engine.summary(), "view change begins");
        // Before the wedged row goes out (the pushes are posted after this step).
        if let Some(f) = &d.on_wedge {
            f(d.engine.view());
        }
        for s in subs.iter().flatten() {
            s.wake_senders();
        }
    }
    d.cut.extend(actions.iter().filter_map(|a| if let Action::Disconnect(n) = a { Some(*n) } else { None }));
    if actions.iter().any(|a| matches!(a, Action::Install(_) | Action::Stop(_))) {
        cut_off(&mut d); // no next pass: the view ends
    } else if !d.cut.is_empty() {
        d.poke = true; // the next pass cuts them off
    }
    for a in actions {
        match a {
            Action::Disconnect(_) => {}
            Action::Deliver { subgroup, batch } => {
                subs[subgroup].as_ref().expect("a subgroup this node is in").deliver(batch, pushes);
                // The install waits for this batch to finish, which no row shows.
                d.poke = true;
            }
            Action::Install(next) => {
                d.done = true;
                let at = d.wedged_at.unwrap_or_else(Instant::now);
                let _ = d.tx.send(Event::Install(Box::new(next), at));
            }
            Action::Stop(why) => {
                d.done = true;
                let _ = d.tx.send(Event::Stop(why));
            }
        }
    }
}

/// Cuts off the members suspected in an earlier step.
fn cut_off(d: &mut Driver) {
    for n in std::mem::take(&mut d.cut) {
        d.transport.disconnect(n);
    }
}
