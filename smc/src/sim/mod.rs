//! A deterministic simulator of one subgroup: N nodes in one thread, a fake transport
//! that delays and interleaves writes per link (but keeps each link's order, as every
//! real transport does), and the protocol invariants checked after every step.
//!
//! Everything comes from one seed: the subgroup (nodes, senders, window, message
//! size, mode), each sender's pattern (continuous, bursty, silent, random delays),
//! per-link speeds, and the schedule. A failing seed is reported with the step and
//! the invariant, and [`Sim::run_seed`] replays it exactly.
//!
//! The nodes run the real [`SmcCore`] over real sst tables; only the byte moving is
//! simulated: a push is copied out of the sender's row when posted and applied to the
//! target's region when the schedule delivers it, between passes or, now and then,
//! in the middle of the target's pass (as tcp's fallback receiver does while the
//! predicate thread is held up).
//!
//! Senders act as several application threads would on the lock-free send path: a
//! sender may hold up to `open_max` reservations at once, and publishes or gives back
//! (`abandon_percent`) any of them at a later turn, in any order.

pub mod invariants;
mod rng;

pub use rng::Rng;

use crate::core::{Reservation, SmcCore};
use crate::spec::{Mode, SmcLayout, SubgroupSpec};
use invariants::Checks;
use spindle_sst::sync::Arc;
use spindle_sst::transport::{NodeId, RegionId};
use spindle_sst::Pushes;
use spindle_sst::{Region, Table};
use std::collections::VecDeque;

/// How a sender sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Whenever it gets a turn and a slot.
    Continuous,
    /// `burst` messages, then `pause` of its turns idle.
    Bursty {
        /// Messages per burst.
        burst: u32,
        /// Idle turns between bursts.
        pause: u32,
    },
    /// Never (a declared sender that stays silent).
    Silent,
    /// Each turn with this probability in percent (random delays).
    Random(u8),
}

/// One simulated subgroup.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The seed everything derives from.
    pub seed: u64,
    /// The subgroup.
    pub spec: SubgroupSpec,
    /// Pattern per sender rank.
    pub patterns: Vec<Pattern>,
    /// Messages each non-silent sender sends.
    pub msgs_per_sender: u64,
    /// Relative speed of each link (from * n + to): higher is delivered more often.
    pub link_speed: Vec<u64>,
    /// Steps before the run is declared stalled.
    pub max_steps: u64,
    /// Reservations a sender may hold open at once (1 = reserve, write, publish).
    pub open_max: usize,
    /// Chance in percent that an open reservation is given back instead of published.
    pub abandon_percent: u64,
    /// Large payload bytes after which a send stage stops, scaled to the simulated
    /// arenas (`None`: the core's 4 MiB, more than any simulated burst).
    pub large_push: Option<usize>,
}

impl SimConfig {
    /// A configuration drawn from `seed`.
    pub fn from_seed(seed: u64) -> SimConfig {
        let mut rng = Rng::new(seed);
        let n = 2 + rng.below(4) as usize; // 2..=5 nodes
        let members: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
        let senders: Vec<NodeId> = match rng.below(3) {
            0 => members.clone(),
            1 => members[..(n / 2).max(1)].to_vec(),
            _ => vec![members[rng.below(n as u64) as usize]],
        };
        let patterns = (0..senders.len())
            .map(|_| match rng.below(6) {
                0 | 1 => Pattern::Continuous,
                2 => Pattern::Bursty { burst: 1 + rng.below(8) as u32, pause: 1 + rng.below(20) as u32 },
                3 => Pattern::Silent,
                _ => Pattern::Random(5 + rng.below(90) as u8),
            })
            .collect();
        let mode = if rng.chance(80) { Mode::Ordered } else { Mode::Unordered };
        let mut spec = SubgroupSpec {
            members,
            senders,
            window: 1 + rng.below(6) as usize,
            max_msg: [1, 8, 13, 64, 200][rng.below(5) as usize],
            // Half the seeds also send large messages through an arena that holds a
            // few of them, so its room is reused again and again.
            arena: [0, 0, 64, 256][rng.below(4) as usize],
            mode,
            relay: false,
        };
        let link_speed = (0..n * n).map(|_| 1 + rng.below(10)).collect();
        let msgs_per_sender = 5 + rng.below(40);
        let open_max = 1 + rng.below(3) as usize;
        let abandon_percent = if rng.chance(25) { 10 } else { 0 };
        // Drawn last, so each seed's other choices stay what they were before relays.
        spec.relay = spec.arena > 0 && rng.chance(50);
        // Then, for half the seeds with an arena, send stages cut after a few payloads.
        let large_push = (spec.arena > 0 && rng.chance(50)).then(|| 1 + rng.below(48) as usize);
        SimConfig {
            seed,
            spec,
            patterns,
            msgs_per_sender,
            link_speed,
            max_steps: 400_000,
            open_max,
            abandon_percent,
            large_push,
        }
    }
}

/// An invariant broken at some step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The seed (replay with [`Sim::run_seed`]).
    pub seed: u64,
    /// The step at which it was found.
    pub step: u64,
    /// Which invariant.
    pub invariant: &'static str,
    /// What was seen.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "seed {} step {}: {} violated: {}", self.seed, self.step, self.invariant, self.detail)
    }
}

/// What a finished run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Steps taken.
    pub steps: u64,
    /// Application messages sent.
    pub sent: u64,
    /// Deliveries over all nodes.
    pub delivered: u64,
    /// Null indices sent over all nodes.
    pub nulls: u64,
    /// Deliveries of large messages (payload in the sender's arena).
    pub large: u64,
}

#[derive(Debug)]
struct PendingWrite {
    offset: usize,
    words: Vec<u64>,
}

/// One simulated node.
#[derive(Debug)]
pub struct SimNode {
    /// Its multicast core.
    pub core: SmcCore,
    region: Arc<Region>,
    /// Messages published or given back.
    sent: u64,
    /// Messages reserved so far (the next payload number).
    claimed: u64,
    /// Open reservations with their payload numbers.
    open: Vec<(Reservation, u64)>,
    turn: u64,
}

/// A delivered message as the checks see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// Delivering node (member rank).
    pub node: usize,
    /// Sequence number.
    pub seq: u64,
    /// Sender rank.
    pub sender: usize,
    /// Sender's index.
    pub index: u64,
    /// FNV-1a of the payload as read in place.
    pub digest: u64,
}

/// The simulator (see the module docs).
#[derive(Debug)]
pub struct Sim {
    /// Its configuration.
    pub cfg: SimConfig,
    /// The nodes, by member rank.
    pub nodes: Vec<SimNode>,
    links: Vec<VecDeque<PendingWrite>>,
    rng: Rng,
    step: u64,
    checks: Checks,
    large: u64,
}

const REGION: RegionId = RegionId(0);

/// Chance in percent that writes on links to a node land during its pass.
const MID_PASS_PERCENT: u64 = 20;

pub use spindle_sst::hash::digest;

/// The payload sender `r` sends as its `k`-th message: up to `largest` bytes (the
/// spec's [`SubgroupSpec::largest`], so large ones too where there is an arena).
pub fn payload(seed: u64, r: usize, k: u64, largest: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ ((r as u64) << 48) ^ k.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let len = rng.below(largest as u64 + 1) as usize;
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

impl Sim {
    /// A hand-driven subgroup of `spec` (for unit tests: nothing happens unless the
    /// test calls [`Sim::send`], [`Sim::pass`], [`Sim::post`] and [`Sim::flush`]).
    pub fn manual(spec: SubgroupSpec) -> Sim {
        let n = spec.members.len();
        let patterns = vec![Pattern::Silent; spec.senders.len()];
        Sim::new(SimConfig {
            seed: 0,
            spec,
            patterns,
            msgs_per_sender: 0,
            link_speed: vec![1; n * n],
            max_steps: 0,
            open_max: 1,
            abandon_percent: 0,
            large_push: None,
        })
    }

    /// Builds the subgroup of `cfg`.
    pub fn new(cfg: SimConfig) -> Sim {
        let lay = SmcLayout::new(&cfg.spec);
        let nodes = cfg
            .spec
            .members
            .iter()
            .map(|&me| {
                let region = Arc::new(Region::new(lay.table_bytes()));
                let row = Table::create(lay.table_layout().clone(), &cfg.spec.members, me, REGION, region.clone())
                    .expect("table");
                let mut core = SmcCore::new(cfg.spec.clone(), row);
                if let Some(bytes) = cfg.large_push {
                    core.set_large_push(bytes);
                }
                SimNode { core, region, sent: 0, claimed: 0, open: Vec::new(), turn: 0 }
            })
            .collect::<Vec<_>>();
        let n = nodes.len();
        let checks = Checks::new(&cfg);
        Sim {
            rng: Rng::new(cfg.seed.rotate_left(17)),
            links: (0..n * n).map(|_| VecDeque::new()).collect(),
            nodes,
            cfg,
            step: 0,
            checks,
            large: 0,
        }
    }

    /// Sets deliberate bugs on every node (tests of the checks themselves).
    #[cfg(test)]
    pub(crate) fn with_faults(mut self, f: crate::core::Faults) -> Sim {
        for n in &mut self.nodes {
            n.core.set_faults(f);
        }
        self
    }

    /// Runs the configuration drawn from `seed` to the end.
    pub fn run_seed(seed: u64) -> Result<Report, Violation> {
        Sim::new(SimConfig::from_seed(seed)).run()
    }

    fn violation(&self, invariant: &'static str, detail: String) -> Violation {
        Violation { seed: self.cfg.seed, step: self.step, invariant, detail }
    }

    /// Copies each push out of `from`'s region onto the links to its targets (what a
    /// transport does at post time); [`Sim::flush`] or the schedule applies them.
    pub fn post(&mut self, from: usize, pushes: &mut Pushes) {
        let n = self.nodes.len();
        for p in pushes.drain() {
            let mut words = vec![0u64; p.len / 8];
            self.nodes[from].region.read_words(p.offset, &mut words);
            for t in p.targets() {
                let to = self.cfg.spec.member_rank(t).expect("push to a member");
                self.links[from * n + to].push_back(PendingWrite { offset: p.offset, words: words.clone() });
            }
        }
    }

    /// Application turn at node `i`: send one message if its pattern says so.
    pub fn app_turn(&mut self, i: usize) -> Result<(), Violation> {
        let Some(r) = self.nodes[i].core.sender_rank() else { return Ok(()) };
        let node = &mut self.nodes[i];
        node.turn += 1;
        if node.sent >= self.cfg.msgs_per_sender {
            return Ok(());
        }
        let go = match self.cfg.patterns[r] {
            Pattern::Continuous => true,
            Pattern::Silent => false,
            Pattern::Bursty { burst, pause } => (node.turn % (burst + pause) as u64) < u64::from(burst),
            Pattern::Random(p) => self.rng.chance(p as u64),
        };
        if !go {
            return Ok(());
        }
        if self.cfg.open_max == 1 {
            let k = node.sent;
            self.send(i, &payload(self.cfg.seed, r, k, self.cfg.spec.largest()))?;
            return Ok(());
        }
        // Several application threads: claim another slot, or finish an open one.
        let can_claim = node.claimed < self.cfg.msgs_per_sender && node.open.len() < self.cfg.open_max;
        if can_claim && (node.open.is_empty() || self.rng.chance(50)) {
            let data = payload(self.cfg.seed, r, node.claimed, self.cfg.spec.largest());
            if let Ok(res) = node.core.reserve(data.len()) {
                res.write(0, &data);
                node.open.push((res, node.claimed));
                node.claimed += 1;
                return Ok(());
            }
        }
        if node.open.is_empty() {
            return Ok(());
        }
        let pick = self.rng.below(node.open.len() as u64) as usize;
        let (res, k) = node.open.swap_remove(pick);
        let before = node.core.committed_entries();
        if self.rng.chance(self.cfg.abandon_percent) {
            node.core.abandon(res);
        } else {
            let data = payload(self.cfg.seed, r, k, self.cfg.spec.largest());
            let index = res.index();
            node.core.commit(res);
            self.checks.on_commit(r, index, digest(&data));
        }
        self.nodes[i].sent += 1;
        self.check_entries(i, before)
    }

    /// Sends `data` from node `i` if a slot is free; returns whether it was sent.
    pub fn send(&mut self, i: usize, data: &[u8]) -> Result<bool, Violation> {
        let before = self.nodes[i].core.committed_entries();
        let node = &mut self.nodes[i];
        let Ok(res) = node.core.reserve(data.len()) else { return Ok(false) };
        let index = res.index();
        res.write(0, data);
        node.core.commit(res);
        node.sent += 1;
        let r = node.core.sender_rank().expect("sender");
        self.checks.on_commit(r, index, digest(data));
        self.check_entries(i, before)?;
        Ok(true)
    }

    fn check_entries(&mut self, i: usize, before: u64) -> Result<(), Violation> {
        let Some(r) = self.nodes[i].core.sender_rank() else { return Ok(()) };
        let after = self.nodes[i].core.committed_entries();
        for e in before..after {
            let end = self.nodes[i].core.entry_end(e);
            let delivered: Vec<u64> = self.nodes.iter().map(|n| n.core.delivered()[r]).collect();
            if let Err(d) = self.checks.slot_reuse.on_entry(r, e, end, &delivered) {
                return Err(self.violation(invariants::slot_reuse::NAME, d));
            }
        }
        Ok(())
    }

    /// One predicate pass at node `i`: receive, nulls, send, deliver.
    pub fn pass(&mut self, i: usize) -> Result<bool, Violation> {
        let mut pushes = Pushes::default();
        let before = self.nodes[i].core.committed_entries();
        // Now and then peers' writes land while the pass runs, as a transport's
        // receiving thread may apply them (the pass must not count on a still table).
        let landing = if self.rng.chance(MID_PASS_PERCENT) { 1 + self.rng.below(4) } else { 0 };
        let n = self.nodes.len();
        let Sim { nodes, links, rng, .. } = self;
        let SimNode { core, region, .. } = &mut nodes[i];
        let mut worked = core.poll_with(&mut pushes, || {
            for _ in 0..landing {
                let from = rng.below(n as u64) as usize;
                if let Some(w) = links[from * n + i].pop_front() {
                    region.apply_write(w.offset, &w.words);
                }
            }
        });
        self.check_entries(i, before)?;
        if let Some(d) = self.nodes[i].core.take_deliverable() {
            worked = true;
            let received: Vec<Vec<u64>> = self.nodes.iter().map(|n| n.core.received().to_vec()).collect();
            for m in d.batch.iter() {
                let dl = Delivery {
                    node: i,
                    seq: m.seq(),
                    sender: m.sender(),
                    index: m.index(),
                    digest: digest(&m.to_vec()),
                };
                self.large += m.is_large() as u64;
                if let Err((name, detail)) = self.checks.on_deliver(&dl, &received) {
                    return Err(self.violation(name, detail));
                }
            }
            self.nodes[i].core.finish(d, &mut pushes);
        }
        self.post(i, &mut pushes);
        Ok(worked)
    }

    /// Writes `words` at byte `offset` of node `to`'s region, as a hostile peer's
    /// transport would deliver them (for tests of bad input).
    pub fn forge(&mut self, to: usize, offset: usize, words: &[u64]) {
        self.nodes[to].region.apply_write(offset, words);
    }

    /// Applies the oldest write on link `from -> to`; false if the link is empty.
    pub fn deliver_one(&mut self, from: usize, to: usize) -> bool {
        let n = self.nodes.len();
        match self.links[from * n + to].pop_front() {
            Some(w) => {
                self.nodes[to].region.apply_write(w.offset, &w.words);
                true
            }
            None => false,
        }
    }

    /// Applies every queued write, link by link.
    pub fn flush(&mut self) {
        let n = self.nodes.len();
        for l in 0..n * n {
            while self.deliver_one(l / n, l % n) {}
        }
    }

    fn pending_links(&self) -> Vec<usize> {
        (0..self.links.len()).filter(|l| !self.links[*l].is_empty()).collect()
    }

    /// One random step: an application turn, a pass, or a write delivery.
    pub fn step(&mut self) -> Result<(), Violation> {
        self.step += 1;
        let n = self.nodes.len();
        match self.rng.below(3) {
            0 => {
                let i = self.rng.below(n as u64) as usize;
                self.app_turn(i)
            }
            1 => {
                let i = self.rng.below(n as u64) as usize;
                self.pass(i).map(|_| ())
            }
            _ => {
                let pending = self.pending_links();
                if pending.is_empty() {
                    return Ok(());
                }
                // Weighted by link speed: slow links lag behind fast ones.
                let total: u64 = pending.iter().map(|l| self.cfg.link_speed[*l]).sum();
                let mut pick = self.rng.below(total);
                let l = *pending
                    .iter()
                    .find(|l| {
                        let s = self.cfg.link_speed[**l];
                        if pick < s {
                            true
                        } else {
                            pick -= s;
                            false
                        }
                    })
                    .expect("a weighted pick");
                self.deliver_one(l / n, l % n);
                Ok(())
            }
        }
    }

    fn all_sent(&self) -> bool {
        self.nodes.iter().all(|node| match node.core.sender_rank() {
            Some(r) => {
                self.cfg.patterns[r] == Pattern::Silent
                    || (node.sent >= self.cfg.msgs_per_sender && node.open.is_empty())
            }
            None => true,
        })
    }

    /// Runs until every message is sent and the group is quiet, then checks
    /// completeness and quiescence.
    pub fn run(&mut self) -> Result<Report, Violation> {
        while !self.all_sent() {
            if self.step >= self.cfg.max_steps {
                return Err(
                    self.violation(invariants::progress::NAME, "senders could not send all their messages".into())
                );
            }
            self.step()?;
        }
        // Traffic stopped: let the group settle (random passes and deliveries only).
        loop {
            let busy = !self.pending_links().is_empty() || self.nodes.iter().any(|n| n.core.has_work());
            if !busy {
                break;
            }
            if self.step >= self.cfg.max_steps {
                return Err(self.violation(invariants::progress::NAME, "the group never went quiet".into()));
            }
            self.step += 1;
            let n = self.nodes.len();
            if self.rng.chance(50) {
                let i = self.rng.below(n as u64) as usize;
                self.pass(i)?;
            } else if let Some(&l) = self.pending_links().first() {
                self.deliver_one(l / n, l % n);
            }
        }
        if let Err(d) = self.checks.progress.complete(self.nodes.iter().map(|n| &n.core)) {
            return Err(self.violation(invariants::progress::NAME, d));
        }
        // Quiescence: more passes find nothing to do and send no nulls.
        let nulls: u64 = self.nodes.iter().map(|n| n.core.stats().nulls).sum();
        for _ in 0..3 {
            for i in 0..self.nodes.len() {
                if self.pass(i)? {
                    return Err(self.violation(
                        invariants::quiescence::NAME,
                        format!("node {i} still works after traffic stopped"),
                    ));
                }
            }
            self.flush();
        }
        let after: u64 = self.nodes.iter().map(|n| n.core.stats().nulls).sum();
        if after != nulls {
            return Err(self.violation(invariants::quiescence::NAME, format!("nulls went on: {nulls} -> {after}")));
        }
        Ok(Report {
            steps: self.step,
            sent: self.nodes.iter().map(|n| n.core.stats().messages_sent).sum(),
            delivered: self.nodes.iter().map(|n| n.core.stats().messages_delivered).sum(),
            nulls: after,
            large: self.large,
        })
    }
}

#[cfg(test)]
mod tests;
