//! A deterministic simulator of whole groups: several views, crashes (also mid-push,
//! leaving a torn write), crashes of the leader during a view change, joins, leaves
//! and partitions, over random send patterns; the invariants are checked after every
//! step (docs/DESIGN.md §2).
//!
//! The nodes run the real [`Engine`] and the real smc cores over real sst tables,
//! one set per view; only the byte moving and the failure detector are simulated. A
//! push is copied out of the sender's region when posted and applied to the target's
//! region of the same view when the schedule delivers it; each link keeps its order.
//! A write for a view the target has not installed yet waits at the head of its link.
//! A crashed node's queued writes stay in flight, except that one of them may be cut
//! short and everything after it lost. A node suspects a peer some random number of
//! steps after the peer became unreachable (crashed, stopped, or cut off), which is
//! what heartbeats give; suspecting it cuts the link from it.
//!
//! Each view starts with a setup, as in the runtime (`setup.rs`): a node that installs
//! a view waits, taking no turns, until every member it does not suspect has met it in
//! that view's setup, or until its deadline; the ones missing start out suspected, and
//! writes go only over the links made. Members arrive at different steps and may
//! crash before or during their setup.
//!
//! Everything derives from one seed; a failing seed is printed and
//! [`GroupSim::run_seed`] replays it.

mod config;
mod faults;
pub mod invariants;
mod network;
mod setup;

use crate::engine::{Action, Engine, Next};
use crate::membership::MembershipLayout;
use crate::view::View;
use invariants::Checks;
use spindle_smc::sim::Rng;
use spindle_smc::{Mode, SmcCore, SmcLayout, SubgroupSpec};
use spindle_sst::transport::{NodeId, RegionId};
use spindle_sst::{Pushes, Region, Table};
use std::collections::VecDeque;
use std::sync::Arc;

use config::SimLayout;
pub use config::{Fault, GroupSimConfig, Senders};

use network::Link;
pub use spindle_smc::sim::Violation;

/// What a finished run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Steps taken.
    pub steps: u64,
    /// Views installed over all nodes.
    pub installs: u64,
    /// Deliveries over all nodes.
    pub delivered: u64,
    /// Nodes that stopped (minority, removed, left).
    pub stopped: u64,
    /// Installs whose view changed the layout document.
    pub layout_installs: u64,
    /// Deliveries in subgroup 1 of a dynamic layout.
    pub dynamic_delivered: u64,
}

/// One simulated process.
#[derive(Debug)]
pub struct SimNode {
    /// Its id.
    pub id: NodeId,
    /// False once crashed.
    pub alive: bool,
    /// Set once it stopped on its own.
    pub stopped: Option<crate::engine::StopReason>,
    /// Its current view's engine.
    pub engine: Engine,
    cores: Vec<Option<SmcCore>>,
    regions: Vec<Arc<Region>>,
    specs: Vec<SubgroupSpec>,
    /// Next sequence number per subgroup (persists over views).
    next_seq: Vec<u64>,
    /// Messages to send again, per subgroup.
    resend: Vec<VecDeque<Vec<u8>>>,
    /// Step since which each peer has been unreachable from here.
    unreachable_since: Vec<Option<u64>>,
    /// Set while it is setting up its current view.
    setup: Option<setup::Setup>,
    /// Step at which it began to run its current view (its setup ended).
    running_since: u64,
    /// By node index: a link to that node was made in this view's setup.
    linked: Vec<bool>,
    /// Layout edits it asked for that its view does not hold yet.
    edits: Vec<Vec<u8>>,
}

impl SimNode {
    fn active(&self) -> bool {
        self.alive && self.stopped.is_none()
    }
    /// Active and past its setup: it takes turns.
    fn running(&self) -> bool {
        self.active() && self.setup.is_none()
    }
    fn view(&self) -> &View {
        self.engine.view()
    }
}

/// The simulator (see the module docs).
#[derive(Debug)]
pub struct GroupSim {
    /// Its configuration.
    pub cfg: GroupSimConfig,
    /// Every process ever started, by id.
    pub nodes: Vec<SimNode>,
    links: Vec<Vec<Link>>,
    rng: Rng,
    step: u64,
    checks: Checks,
    fired: Vec<bool>,
    /// Join requests not yet answered by a view.
    pending_joins: Vec<NodeId>,
    /// Leader crashes waiting for a change to be under way.
    armed: usize,
    /// Subgroup-leader crashes waiting for a trim to be under way.
    armed_trim: usize,
    /// Leader crashes waiting for a view's setup to be under way.
    armed_setup: usize,
    /// `severed[a][b]`: a partition cut the link from a to b.
    severed: Vec<Vec<bool>>,
    /// Print view changes as they happen (`VIEWS_SIM_TRACE` set).
    trace: bool,
    #[cfg(test)]
    faults: crate::engine::Faults,
    report: Report,
}

const SUBGROUPS_MAX: usize = 2;

impl GroupSim {
    /// Builds the first view of `cfg`.
    pub fn new(cfg: GroupSimConfig) -> GroupSim {
        let view = View::initial((0..cfg.initial as u32).map(NodeId).collect());
        let mut sim = GroupSim {
            rng: Rng::new(cfg.seed.rotate_left(23)),
            nodes: Vec::new(),
            links: Vec::new(),
            step: 0,
            checks: Checks::default(),
            fired: vec![false; cfg.faults.len()],
            pending_joins: Vec::new(),
            armed: 0,
            armed_trim: 0,
            armed_setup: 0,
            severed: Vec::new(),
            trace: std::env::var_os("VIEWS_SIM_TRACE").is_some(),
            #[cfg(test)]
            faults: crate::engine::Faults::default(),
            report: Report::default(),
            cfg,
        };
        sim.checks.views.on_install(&view, &view).expect("first view");
        sim.checks.deliveries.unordered = sim.cfg.mode == Mode::Unordered;
        sim.checks.exactly_once.unordered = sim.cfg.mode == Mode::Unordered;
        sim.checks.state.unordered = sim.cfg.mode == Mode::Unordered;
        for &id in view.members() {
            let node = sim.make_node(id, &view, &[]);
            sim.add_node(node);
        }
        sim
    }

    /// Runs the configuration drawn from `seed` to the end.
    pub fn run_seed(seed: u64) -> Result<Report, Violation> {
        GroupSim::new(GroupSimConfig::from_seed(seed)).run()
    }

    fn trace(&self, line: impl FnOnce() -> String) {
        if self.trace {
            eprintln!("step {}: {}", self.step, line());
        }
    }

    /// A trace line about node `i`, with its engine's state.
    fn trace_node(&self, i: usize, what: impl FnOnce() -> String) {
        self.trace(|| format!("{} {}; {}", self.nodes[i].id, what(), self.nodes[i].engine.summary()));
    }

    fn violation(&self, invariant: &'static str, detail: String) -> Violation {
        Violation { seed: self.cfg.seed, step: self.step, invariant, detail }
    }

    fn make_node(&self, id: NodeId, view: &View, suspects: &[NodeId]) -> SimNode {
        let specs = self.cfg.layout(view);
        let (engine, cores, regions) = self.tables(id, view, &specs, suspects);
        SimNode {
            id,
            alive: true,
            stopped: None,
            engine,
            cores,
            regions,
            specs,
            next_seq: vec![0; SUBGROUPS_MAX],
            resend: (0..SUBGROUPS_MAX).map(|_| VecDeque::new()).collect(),
            unreachable_since: Vec::new(),
            setup: None,
            running_since: 0,
            linked: Vec::new(),
            edits: Vec::new(),
        }
    }

    #[allow(clippy::type_complexity)]
    fn tables(
        &self,
        id: NodeId,
        view: &View,
        specs: &[SubgroupSpec],
        suspects: &[NodeId],
    ) -> (Engine, Vec<Option<SmcCore>>, Vec<Arc<Region>>) {
        let senders: Vec<usize> = specs.iter().map(|s| s.senders.len()).collect();
        let mlay = MembershipLayout::new(&senders);
        let mregion = Arc::new(Region::new(mlay.table_bytes(view.members().len())));
        let row = Table::create(mlay.table_layout().clone(), view.members(), id, RegionId(0), mregion.clone())
            .expect("membership table");
        let mut regions = vec![mregion];
        let mut cores = Vec::new();
        for (k, spec) in specs.iter().enumerate() {
            let lay = SmcLayout::new(spec);
            let region = Arc::new(Region::new(lay.table_bytes()));
            regions.push(region.clone());
            cores.push(spec.member_rank(id).map(|_| {
                let row = Table::create(lay.table_layout().clone(), &spec.members, id, RegionId(1 + k as u16), region)
                    .expect("subgroup table");
                SmcCore::new(spec.clone(), row)
            }));
        }
        let mut engine = Engine::new(view.clone(), specs.to_vec(), row, self.cfg.majority, suspects);
        if self.cfg.dynamic {
            engine.set_editor(Arc::new(SimLayout(self.cfg.clone())));
        }
        #[cfg(test)]
        {
            engine.faults = self.faults;
        }
        (engine, cores, regions)
    }

    fn add_node(&mut self, node: SimNode) {
        let i = node.id.0 as usize;
        assert_eq!(i, self.nodes.len(), "node ids are dense");
        self.nodes.push(node);
        let n = self.nodes.len();
        for row in &mut self.links {
            row.resize_with(n, Link::default);
        }
        self.links.push((0..n).map(|_| Link::default()).collect());
        for row in &mut self.severed {
            row.resize(n, false);
        }
        self.severed.push(vec![false; n]);
        // The first view's members are linked to one another from the start.
        let first = self.step == 0;
        for node in &mut self.nodes {
            node.unreachable_since.resize(n, None);
            node.linked.resize(n, first);
        }
    }

    /// Application turn at node `i`: one message per subgroup it sends in, maybe.
    fn app_turn(&mut self, i: usize) {
        for k in 0..self.nodes[i].specs.len() {
            let node = &self.nodes[i];
            let Some(core) = node.cores[k].as_ref() else { continue };
            if core.sender_rank().is_none() || !core.can_reserve() {
                continue;
            }
            let data = if let Some(m) = node.resend[k].front() {
                m.clone()
            } else if node.next_seq[k] < self.cfg.msgs_per_sender && self.rng.chance(self.cfg.send_chance) {
                payload(self.cfg.seed, node.id, k, node.next_seq[k], self.cfg.max_msg.max(self.cfg.arena))
            } else {
                continue;
            };
            let node = &mut self.nodes[i];
            let core = node.cores[k].as_mut().expect("checked");
            let Ok(res) = core.reserve(data.len()) else { continue };
            res.write(0, &data);
            core.commit(res);
            if node.resend[k].pop_front().is_none() {
                node.next_seq[k] += 1;
            }
        }
    }

    /// One pass at node `i`: smc stages and delivery for each subgroup, then the engine.
    fn pass(&mut self, i: usize) -> Result<(), Violation> {
        let mut pushes = Pushes::default();
        let vid = self.nodes[i].view().id().0;
        for k in 0..self.nodes[i].specs.len() {
            let Some(core) = self.nodes[i].cores[k].as_mut() else { continue };
            core.poll(&mut pushes);
            if let Some(d) = core.take_deliverable() {
                let msgs: Vec<Vec<u8>> = d.batch.iter().map(|m| m.to_vec()).collect();
                core.finish(d, &mut pushes);
                self.on_deliver(i, vid, k, &msgs)?;
            }
        }
        let mut actions = Vec::new();
        {
            let node = &mut self.nodes[i];
            node.engine.step(&mut node.cores, &mut pushes, &mut actions);
        }
        for a in actions {
            match a {
                Action::Disconnect(n) => {
                    let l = &mut self.links[n.0 as usize][i];
                    l.cut = true;
                    l.queue.clear();
                }
                Action::Deliver { subgroup, batch } => {
                    let msgs: Vec<Vec<u8>> = batch.batch.iter().map(|m| m.to_vec()).collect();
                    self.trace_node(i, || format!("trim {} msgs", msgs.len()));
                    self.nodes[i].cores[subgroup].as_mut().expect("member").finish(batch, &mut pushes);
                    self.on_deliver(i, vid, subgroup, &msgs)?;
                }
                Action::Install(next) => {
                    self.trace_node(i, || format!("install {:?}", next.view));
                    self.post(i, &mut pushes);
                    return self.install(i, next);
                }
                Action::Stop(crate::engine::StopReason::Protocol(why)) => {
                    return Err(self.violation(invariants::view_agreement::NAME, format!("protocol error: {why}")));
                }
                Action::Stop(why) => {
                    self.trace_node(i, || format!("stop {why:?}"));
                    if matches!(why, crate::engine::StopReason::Minority { .. }) {
                        if let Err(d) = self.check_availability(i) {
                            return Err(self.violation(invariants::availability::NAME, d));
                        }
                    }
                    self.report.stopped += 1;
                    self.nodes[i].stopped = Some(why);
                }
            }
        }
        self.post(i, &mut pushes);
        Ok(())
    }

    fn on_deliver(&mut self, i: usize, vid: u64, k: usize, msgs: &[Vec<u8>]) -> Result<(), Violation> {
        for m in msgs {
            self.report.delivered += 1;
            if self.cfg.dynamic && k == 1 {
                self.report.dynamic_delivered += 1;
            }
            let id = self.nodes[i].id;
            if let Err((name, d)) = self.checks.on_deliver(id, vid, k, m) {
                return Err(self.violation(name, d));
            }
        }
        Ok(())
    }

    fn install(&mut self, i: usize, next: Next) -> Result<(), Violation> {
        self.report.installs += 1;
        let old = self.nodes[i].view().clone();
        if next.view.layout() != old.layout() {
            self.report.layout_installs += 1;
        }
        let id = self.nodes[i].id;
        let wedged = self.nodes[i].engine.is_wedged()
            && self.nodes[i].cores.iter().flatten().all(|c| c.member_wedged(c.table().my_rank()));
        let mine: Vec<usize> = (0..self.nodes[i].specs.len()).filter(|k| self.nodes[i].cores[*k].is_some()).collect();
        if let Err((name, d)) = self.checks.on_install(id, &old, &mine, &next, wedged) {
            return Err(self.violation(name, d));
        }
        let specs = self.cfg.layout(&next.view);
        let (engine, cores, regions) = self.tables(id, &next.view, &specs, &next.suspects);
        let node = &mut self.nodes[i];
        for &(k, cut) in &next.my_cuts {
            let msgs = node.cores[k].as_mut().expect("a sender's core").own_messages_from(cut);
            let mut q: VecDeque<Vec<u8>> = msgs.into();
            q.append(&mut node.resend[k]);
            node.resend[k] = q;
        }
        for k in 0..SUBGROUPS_MAX {
            if !specs.get(k).is_some_and(|s| s.member_rank(id).is_some()) {
                self.checks.exactly_once.on_left_subgroup(id, k);
            }
            let still = specs.get(k).is_some_and(|s| s.sender_rank(id).is_some());
            if !still {
                for m in node.resend[k].drain(..) {
                    self.checks.exactly_once.on_dropped(id, k, &m);
                }
            }
        }
        node.engine = engine;
        node.edits.retain(|e| matches!(GroupSimConfig::edit(next.view.layout().bytes(), e), Ok(Some(_))));
        for e in &node.edits {
            node.engine.request_edit(e);
        }
        node.cores = cores;
        node.regions = regions;
        node.specs = specs;
        self.begin_setup(i, &next.suspects);
        // The first member to install a view starts its joiners, with its state.
        for j in next.joins {
            self.pending_joins.retain(|p| *p != j.node);
            if self.nodes.len() <= j.node.0 as usize {
                let joiner = self.make_node(j.node, &next.view, &next.suspects);
                self.add_node(joiner);
                self.begin_setup(j.node.0 as usize, &next.suspects);
                if let Err(d) = self.checks.state.on_transfer(id, j.node, next.view.id().0) {
                    return Err(self.violation(invariants::state_transfer::NAME, d));
                }
            }
        }
        Ok(())
    }

    /// One random step.
    pub fn step(&mut self) -> Result<(), Violation> {
        self.step += 1;
        self.fire_faults();
        self.ask_to_join();
        self.detect();
        self.setups();
        let live: Vec<usize> = (0..self.nodes.len()).filter(|i| self.nodes[*i].running()).collect();
        if live.is_empty() {
            // Nobody takes turns (all are setting up, or gone); writes still land.
            let links = self.deliverable_links();
            if !links.is_empty() {
                let (f, t) = links[self.rng.below(links.len() as u64) as usize];
                self.deliver_one(f, t);
            }
            return Ok(());
        }
        match self.rng.below(3) {
            0 => {
                let i = live[self.rng.below(live.len() as u64) as usize];
                self.app_turn(i);
                Ok(())
            }
            1 => {
                let i = live[self.rng.below(live.len() as u64) as usize];
                self.pass(i)
            }
            _ => {
                let links = self.deliverable_links();
                if !links.is_empty() {
                    let (f, t) = links[self.rng.below(links.len() as u64) as usize];
                    self.deliver_one(f, t);
                }
                Ok(())
            }
        }
    }

    /// True once faults are over and the live members agree and are idle: one view,
    /// unwedged, every message sent and resent, every core without work, no write in
    /// flight, and the same number of deliveries per subgroup at every member.
    fn settled(&self) -> bool {
        if self.nodes.iter().all(|n| !n.active()) {
            return true;
        }
        if self.fired.iter().any(|f| !f)
            || self.armed > 0
            || self.armed_trim > 0
            || self.armed_setup > 0
            || self.nodes.iter().any(|n| n.active() && n.setup.is_some())
            || !self.pending_joins.is_empty()
            || !self.deliverable_links().is_empty()
        {
            return false;
        }
        let live: Vec<&SimNode> = self.nodes.iter().filter(|n| n.active()).collect();
        let Some(first) = live.first() else { return true };
        let vid = first.view().id();
        // A member that crashed must be found out and removed first: quiet traffic
        // is not the end while the view still names a dead member.
        if first.view().members().iter().any(|m| self.nodes.get(m.0 as usize).is_some_and(|n| !n.alive)) {
            return false;
        }
        let idle = live.iter().all(|n| {
            n.view().id() == vid
                && !n.engine.is_wedged()
                && n.resend.iter().all(|q| q.is_empty())
                && n.edits.iter().all(|e| matches!(GroupSimConfig::edit(n.view().layout().bytes(), e), Ok(None)))
                && (0..n.specs.len()).all(|k| {
                    n.cores[k].as_ref().map_or(true, |c| {
                        !c.has_work() && (c.sender_rank().is_none() || n.next_seq[k] >= self.cfg.msgs_per_sender)
                    })
                })
        });
        idle && (0..first.specs.len()).all(|k| {
            let counts: Vec<usize> = live
                .iter()
                .filter(|n| n.cores[k].is_some())
                .map(|n| self.checks.deliveries.count(n.id, vid.0, k))
                .collect();
            counts.windows(2).all(|w| w[0] == w[1])
        })
    }

    /// Runs to the end: until settled, or a violation, or `max_steps` (a stall).
    pub fn run(mut self) -> Result<Report, Violation> {
        self.run_to_settled()?;
        let live: Vec<&SimNode> = self.nodes.iter().filter(|n| n.active()).collect();
        if let Some(first) = live.first() {
            for k in 0..first.specs.len() {
                let members: Vec<NodeId> = live.iter().filter(|n| n.cores[k].is_some()).map(|n| n.id).collect();
                if let Err(d) = self.checks.deliveries.at_end(first.view().id().0, k, &members) {
                    return Err(self.violation(invariants::delivery_agreement::NAME, d));
                }
            }
        }
        self.report.steps = self.step;
        Ok(self.report)
    }

    fn run_to_settled(&mut self) -> Result<(), Violation> {
        while !self.settled() {
            if self.step >= self.cfg.max_steps {
                let state: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| {
                        format!(
                            "{}: alive {} stopped {:?} setup {:?} members {:?} {}",
                            n.id,
                            n.alive,
                            n.stopped,
                            n.setup,
                            n.view().members(),
                            n.engine.summary()
                        )
                    })
                    .collect();
                return Err(self.violation(invariants::progress::NAME, state.join("; ")));
            }
            self.step()?;
        }
        Ok(())
    }
}

/// The payload of `node`'s `seq`-th message in subgroup `k`: word 0 names it.
pub fn payload(seed: u64, node: NodeId, k: usize, seq: u64, max_msg: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ ((node.0 as u64) << 40) ^ ((k as u64) << 32) ^ seq);
    let len = 8 + rng.below(max_msg as u64 - 7) as usize;
    let mut v = vec![0u8; len];
    v[..8].copy_from_slice(&(((node.0 as u64) << 40) | ((k as u64) << 32) | seq).to_le_bytes());
    for b in &mut v[8..] {
        *b = rng.next_u64() as u8;
    }
    v
}

/// Decodes word 0 of a payload: (sender, subgroup, seq).
pub fn parse_payload(m: &[u8]) -> Option<(NodeId, usize, u64)> {
    let w = u64::from_le_bytes(m.get(..8)?.try_into().ok()?);
    Some((NodeId((w >> 40) as u32), ((w >> 32) & 0xff) as usize, w & 0xffff_ffff))
}

#[cfg(test)]
mod tests;
