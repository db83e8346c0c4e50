//! What a seed draws: the topic, the members, the clients and the faults.

use crate::engine::Mutation;
use crate::qos::{History, Level, Qos};
use spindle_smc::sim::Rng;

/// One simulated topic and its participants.
#[derive(Debug, Clone)]
pub(crate) struct SimConfig {
    pub(crate) seed: u64,
    pub(crate) qos: Qos,
    /// `KeepLast(keep)` of the topic's history.
    pub(crate) keep: u32,
    /// Keyed, with this many instances (0: unkeyed).
    pub(crate) instances: u64,
    /// Members at the start, and nodes that join later.
    pub(crate) first: usize,
    pub(crate) later: usize,
    /// Samples each member's writer writes.
    pub(crate) writes: u64,
    /// Clients, and samples each one's writer writes.
    pub(crate) clients: usize,
    pub(crate) client_writes: u64,
    /// Percent chance per step of a kill, a restart, a client failover.
    pub(crate) kill: u64,
    pub(crate) restart: u64,
    pub(crate) failover: u64,
    /// Most kills in a run.
    pub(crate) max_kills: u64,
    /// Most removals of a running member from the view (it is taken back later,
    /// its engine kept: a participant the group suspected wrongly, or one cut off
    /// for a while, that rejoins).
    pub(crate) max_removals: u64,
    /// Bytes of history per catch-up page.
    pub(crate) page: usize,
    /// The topic's lifespan in steps (milliseconds), for topics that keep history.
    pub(crate) lifespan: Option<u64>,
    /// A fault planted in joiners' engines (the simulator's own tests).
    pub(crate) mutation: Option<Mutation>,
    /// Member 0 makes no reader (a topic it only writes: its engine numbers the
    /// samples and acknowledges its own without offering them to anyone).
    pub(crate) unread: bool,
}

impl SimConfig {
    /// Everything from `seed`.
    pub(crate) fn from_seed(seed: u64) -> SimConfig {
        let mut r = Rng::new(seed);
        let keep = 1 + r.below(4) as u32;
        let history = History::KeepLast(keep);
        let qos = match r.below(3) {
            0 => Qos::ordered(),
            1 => Qos::volatile(history),
            _ => Qos::logged(history),
        };
        let instances = if r.chance(50) { 1 + r.below(4) } else { 0 };
        let later = r.below(3) as usize;
        let mut cfg = SimConfig {
            seed,
            qos,
            keep,
            instances,
            first: 1 + r.below(3) as usize,
            later,
            writes: 3 + r.below(25),
            clients: r.below(3) as usize,
            client_writes: 2 + r.below(20),
            kill: r.below(3),
            restart: r.below(4),
            failover: r.below(3),
            max_kills: r.below(3),
            page: 1 + r.below(160) as usize,
            max_removals: r.below(3),
            lifespan: None,
            mutation: None,
            unread: false,
        };
        if cfg.qos.level == Level::Ordered && r.chance(40) {
            cfg.qos.level = Level::Unordered;
        }
        if cfg.keeps_history() && r.chance(30) {
            let life = 5 + r.below(300);
            cfg.lifespan = Some(life);
            cfg.qos = cfg.qos.lifespan(std::time::Duration::from_millis(life));
        }
        // Drawn last, so each seed's other choices stay what they were before.
        cfg.unread = !cfg.keeps_history() && r.chance(40);
        cfg
    }

    /// True for a topic that keeps history (Volatile, Logged).
    pub(crate) fn keeps_history(&self) -> bool {
        self.qos.level >= Level::Volatile
    }
}
