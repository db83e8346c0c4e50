//! The sharded store's seeded, deterministic simulator.
//!
//! A seed draws a store (2-3 shards, 2-5 keys, 2-4 clients with 4-12 requests
//! each, 1-6 migrations asked for by an operator, up to 4 failures of a shard's
//! primary) and delays, some of them ten times the others. The simulator runs the members' rules ([`super::rules`])
//! and the pullers ([`super::puller`]) over models of what lies under them:
//!
//! - each shard is one member (its primary) over a log that keeps what was
//!   committed and a store that applies it at once (a read's "sync" is then
//!   immediate; the store's own apply lag is not modelled);
//! - the group changes views in two phases: every member wedges, then the new
//!   map (the old one with the edits asked for) is installed at each member;
//! - a primary that fails loses its requests in flight (each of its appends was
//!   committed or not, by a coin), its pullers, and its view; a new one takes the
//!   log and store and waits for the next view;
//! - clients route by the map they know, ask again on "moved", "wait" and errors
//!   (a write with the same request number), and record every request's start
//!   and answer.
//!
//! After every event and at the end, the invariants of [`invariants`] are
//! checked, one per file. A failing seed is replayed with
//! `KV_SIM_SEED=<seed> cargo test -p spindle-kv --test shard_sim replay -- --ignored --nocapture`
//! (with `KV_SIM_TRACE=1`, every event too).

use super::map::{MapEdit, Range, Shard, ShardMap};
use super::puller::Puller;
use super::rules::MemTable;
use crate::update::Writer;
use crate::Update;
use spindle_smc::sim::Rng;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

pub mod check;
mod group;
pub mod invariants;
mod member;

/// The most events one seed may take before it counts as stuck.
pub const MAX_STEPS: u64 = 400_000;

/// One seed's store, load and faults.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The seed everything derives from.
    pub seed: u64,
    /// Shards.
    pub shards: u16,
    /// Keys the clients use.
    pub keys: usize,
    /// Clients.
    pub clients: usize,
    /// Requests per client.
    pub ops: usize,
    /// Migrations the operator asks for.
    pub migrations: usize,
    /// Failures of a shard's primary.
    pub failures: usize,
    /// The longest delay of a message or a step, in ticks.
    pub max_delay: u64,
    /// The share of steps (percent) that take up to ten times longer.
    pub slow_percent: u64,
    /// Records a puller asks for per batch (a few, so that a range takes
    /// several batches and some are asked for while the last is logged).
    pub pull_batch: u32,
}

impl SimConfig {
    /// The configuration seed `seed` draws.
    pub fn from_seed(seed: u64) -> SimConfig {
        let mut r = Rng::new(seed);
        SimConfig {
            seed,
            shards: 2 + r.below(2) as u16,
            keys: 2 + r.below(4) as usize,
            clients: 2 + r.below(3) as usize,
            ops: 4 + r.below(9) as usize,
            migrations: 1 + r.below(6) as usize,
            failures: r.below(5) as usize,
            max_delay: 1 + r.below(20),
            slow_percent: [0, 5, 15, 30][r.below(4) as usize],
            pull_batch: 1 + r.below(3) as u32,
        }
    }
}

/// A client request as the history keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A put (`Some`) or a delete (`None`).
    Write(Option<Vec<u8>>),
    /// A get.
    Read,
}

/// One client request: what it asked, when it started and was answered (in
/// event steps), and who served it.
#[derive(Debug, Clone)]
pub struct OpRecord {
    /// The client.
    pub client: usize,
    /// The key's index.
    pub key: usize,
    /// What it asked.
    pub kind: Kind,
    /// A get's answer.
    pub result: Option<Option<Vec<u8>>>,
    /// The step it started at.
    pub invoke: u64,
    /// The step it was answered at (`None`: never).
    pub response: Option<u64>,
    /// The shard that answered it and the map version it admitted it under.
    pub served: Option<(Shard, u64)>,
}

/// A member's work that waits for an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    /// A client's write (attempt `attempt`).
    Write { c: usize, attempt: u64 },
    /// A puller's record.
    Puller { mig: u64 },
    /// A drop the puller of `target` asked of this (the old) shard.
    Drop { target: Shard, life: u32, mig: u64 },
    /// The end of a pull the member owed.
    Tidy,
}

/// What a puller's step brought back.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PullIn {
    Start,
    Batch(Vec<crate::Pair>, Option<Vec<Writer>>, bool),
    /// The answer to an ask made while a batch was logged (`None`: none came).
    Ahead(Option<(Vec<crate::Pair>, bool)>),
    Appended,
    Dropped,
    Edited,
    Retry,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Client { c: usize, attempt: u64 },
    Arrive { c: usize, attempt: u64 },
    SourceRead { c: usize, attempt: u64 },
    ReadStore { c: usize, attempt: u64 },
    Answer { c: usize, attempt: u64 },
    Commit { shard: Shard, life: u32, id: u64 },
    Pull { shard: Shard, life: u32, mig: u64, input: PullIn },
    Wedge(Shard),
    Install(Shard),
    Fail(Shard),
    Migrate,
    Tidy { shard: Shard, life: u32 },
}

/// One shard's primary.
#[derive(Debug)]
struct Member {
    life: u32,
    installed: u64,
    wedged: bool,
    log: Vec<Update>,
    table: MemTable,
    /// Requests admitted and not answered: (client, the version admitted under).
    inflight: Vec<(usize, u64)>,
    /// Appends not yet committed: (id, record, job).
    appends: Vec<(u64, Update, Job)>,
    pullers: BTreeMap<u64, Puller>,
    /// Pullers whose edit waits for a view.
    awaiting_edit: BTreeSet<u64>,
}

/// A client's request in flight.
#[derive(Debug, Clone)]
struct Op {
    hist: usize,
    key: usize,
    by: Option<Writer>,
    /// Where the current attempt went, and the version it was admitted under.
    shard: Shard,
    life: u32,
    admitted: u64,
    read: Option<Option<Vec<u8>>>,
}

#[derive(Debug)]
struct ClientSim {
    seq: u64,
    version: u64,
    left: usize,
    attempt: u64,
    op: Option<Op>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Wedging,
    Installing,
}

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// Requests answered.
    pub ops: u64,
    /// "Moved" answers clients got.
    pub moved: u64,
    /// Migrations that finished.
    pub migrations: u64,
    /// Records the old owners gave pullers (in batches; those asked ahead
    /// counted as given, taken or not).
    pub pulled: u64,
    /// Batches asked for while the last was logged, and taken.
    pub ahead: u64,
    /// Primaries that failed.
    pub failures: u64,
    /// Views installed.
    pub views: u64,
}

/// The simulator (see the module docs).
#[derive(Debug)]
pub struct Sim {
    cfg: SimConfig,
    rng: Rng,
    step: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    events: Vec<Option<Ev>>,
    now: u64,
    keys: Vec<Vec<u8>>,
    members: Vec<Member>,
    clients: Vec<ClientSim>,
    /// The map of every version (a view's number is its index).
    maps: Vec<ShardMap>,
    edits: Vec<MapEdit>,
    phase: Phase,
    want_view: bool,
    asked: usize,
    failed: usize,
    next_append: u64,
    history: Vec<OpRecord>,
    report: Report,
    trace: bool,
}

impl Sim {
    /// A simulator for `cfg`.
    pub fn new(cfg: SimConfig) -> Sim {
        let map = ShardMap::new(cfg.shards).expect("2-3 shards");
        let members = (0..cfg.shards)
            .map(|_| Member {
                life: 0,
                installed: 0,
                wedged: false,
                log: Vec::new(),
                table: MemTable::default(),
                inflight: Vec::new(),
                appends: Vec::new(),
                pullers: BTreeMap::new(),
                awaiting_edit: BTreeSet::new(),
            })
            .collect();
        // Clients plus one that reads every key at the end.
        let clients = (0..=cfg.clients)
            .map(|c| ClientSim {
                seq: 0,
                version: 0,
                left: if c < cfg.clients { cfg.ops } else { 0 },
                attempt: 0,
                op: None,
            })
            .collect();
        let mut s = Sim {
            rng: Rng::new(cfg.seed.rotate_left(17) ^ 0x6b76),
            keys: (0..cfg.keys).map(|i| format!("key-{i}").into_bytes()).collect(),
            cfg,
            step: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            now: 0,
            members,
            clients,
            maps: vec![map],
            edits: Vec::new(),
            phase: Phase::Idle,
            want_view: false,
            asked: 0,
            failed: 0,
            next_append: 0,
            history: Vec::new(),
            report: Report::default(),
            trace: false,
        };
        for c in 0..s.cfg.clients {
            s.later(Ev::Client { c, attempt: 0 });
        }
        s.later(Ev::Migrate);
        if s.cfg.failures > 0 {
            let at = 1 + s.rng.below(40 * s.cfg.max_delay);
            let shard = s.rng.below(u64::from(s.cfg.shards)) as Shard;
            s.at(at, Ev::Fail(shard));
        }
        s
    }

    /// Prints every event as it runs (for a replay).
    pub fn trace(&mut self, on: bool) {
        self.trace = on;
    }

    /// Runs seed `seed`'s configuration.
    pub fn run_seed(seed: u64) -> Result<Report, invariants::Violation> {
        Sim::new(SimConfig::from_seed(seed)).run()
    }

    /// Runs until every request is answered, every migration finished and the
    /// final reads are done, checking the invariants after every event.
    pub fn run(&mut self) -> Result<Report, invariants::Violation> {
        while let Some(Reverse((t, _, i))) = self.queue.pop() {
            self.now = t;
            self.step += 1;
            if self.step > MAX_STEPS {
                let state = self.state();
                return Err(invariants::violation(self, "progress", format!("the run did not settle: {state}")));
            }
            let ev = self.events[i].take().expect("each event runs once");
            if self.trace {
                eprintln!("{} t{}: {ev:?}", self.step, self.now);
            }
            self.handle(ev);
            invariants::after_step(self)?;
            if self.settled() && !self.final_reads_started() {
                self.start_final_reads();
            }
        }
        invariants::at_end(self)?;
        Ok(self.report)
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Client { c, attempt } => self.client_next(c, attempt),
            Ev::Arrive { c, attempt } => self.arrive(c, attempt),
            Ev::SourceRead { c, attempt } => self.source_read(c, attempt),
            Ev::ReadStore { c, attempt } => self.read_store(c, attempt),
            Ev::Answer { c, attempt } => self.answer(c, attempt),
            Ev::Commit { shard, life, id } => self.commit(shard, life, id),
            Ev::Pull { shard, life, mig, input } => self.pull(shard, life, mig, input),
            Ev::Wedge(s) => self.wedge(s),
            Ev::Install(s) => self.install(s),
            Ev::Fail(s) => self.fail(s),
            Ev::Migrate => self.migrate(),
            Ev::Tidy { shard, life } => self.tidy(shard, life),
        }
    }

    /// Schedules `ev` after a random delay.
    fn later(&mut self, ev: Ev) {
        // Now and then a step is slow (a busy disk, a long pause): ten times the
        // usual delays, so that steps overtake each other.
        let slow = if self.rng.chance(self.cfg.slow_percent) { 10 } else { 1 };
        let d = 1 + self.rng.below(self.cfg.max_delay * slow);
        self.at(self.now + d, ev);
    }

    fn at(&mut self, t: u64, ev: Ev) {
        self.events.push(Some(ev));
        self.seq += 1;
        self.queue.push(Reverse((t, self.seq, self.events.len() - 1)));
    }

    /// The newest map.
    fn map(&self) -> &ShardMap {
        self.maps.last().expect("one map at least")
    }

    /// Whether the load is over and no migration or view change is left.
    fn settled(&self) -> bool {
        self.clients[..self.cfg.clients].iter().all(|c| c.left == 0 && c.op.is_none())
            && self.asked >= self.cfg.migrations
            && self.phase == Phase::Idle
            && self.edits.is_empty()
            && self.map().migrations().is_empty()
            && self.members.iter().all(|m| !m.wedged && m.installed + 1 == self.maps.len() as u64)
    }

    fn final_reads_started(&self) -> bool {
        let last = &self.clients[self.cfg.clients];
        last.left > 0 || last.op.is_some() || self.history.iter().any(|h| h.client == self.cfg.clients)
    }

    fn start_final_reads(&mut self) {
        let c = self.cfg.clients;
        self.clients[c].left = self.cfg.keys;
        self.clients[c].version = self.maps.len() as u64 - 1;
        let attempt = self.clients[c].attempt;
        self.later(Ev::Client { c, attempt });
    }

    /// What is left to do, for a run that did not settle.
    fn state(&self) -> String {
        let clients: Vec<String> = self
            .clients
            .iter()
            .enumerate()
            .filter_map(|(c, cl)| {
                cl.op.as_ref().map(|o| format!("client {c} at shard {} (attempt {})", o.shard, cl.attempt))
            })
            .collect();
        let members: Vec<String> = self
            .members
            .iter()
            .enumerate()
            .map(|(s, m)| {
                format!(
                    "shard {s}: view {} wedged {} inflight {:?} appends {} pullers {:?} awaiting {:?} pulls {:?}",
                    m.installed,
                    m.wedged,
                    m.inflight,
                    m.appends.len(),
                    m.pullers.keys().collect::<Vec<_>>(),
                    m.awaiting_edit,
                    m.table.pulls
                )
            })
            .collect();
        format!(
            "phase {:?}, view {}, edits {:?}, migrations {:?}; {}; {}",
            self.phase,
            self.maps.len() - 1,
            self.edits,
            self.map().migrations(),
            clients.join(", "),
            members.join("; ")
        )
    }

    /// The history of client requests.
    pub fn history(&self) -> &[OpRecord] {
        &self.history
    }

    /// The keys.
    pub fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }
}

/// A range the operator moves: one key's hash, a part of its span around it, or
/// the whole span.
fn pick_range(rng: &mut Rng, span: Range, h: u64) -> Range {
    match rng.below(3) {
        0 => Range::one(h),
        1 => {
            let d = 1u64 << rng.below(63);
            Range { first: h.saturating_sub(d).max(span.first), last: h.saturating_add(d).min(span.last) }
        }
        _ => span,
    }
}
impl Sim {
    /// Prints every version's map and every shard's log (for a replay).
    pub fn dump(&self) {
        for (v, m) in self.maps.iter().enumerate() {
            eprintln!("map v{v}: spans {:?} migrations {:?}", m.spans(), m.migrations());
        }
        for (s, m) in self.members.iter().enumerate() {
            eprintln!("shard {s} log:");
            for u in &m.log {
                eprintln!("   {u:?}");
            }
        }
    }
}
