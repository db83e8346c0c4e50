//! A deterministic simulator of the topic layer: member engines, clients and late
//! joiners in one thread, all drawn from one seed.
//!
//! The members run the real [`TopicEngine`]; the simulator plays the group and the
//! drivers around them. The group orders every message of a view once (the order
//! the messages were sent in) and each member delivers that order at its own pace,
//! in batches of random size. A view change is virtually synchronous: the messages
//! some member delivered (all of which were received by all) are delivered by every
//! survivor before the next view starts; a dead member's undelivered ones are gone,
//! the survivors' go out in the next view. Members write as one writer each;
//! clients write through a member, resend what was not acknowledged after moving
//! to another (a failover), and read through a member, resuming where they
//! stopped. Members are killed and restarted (a Logged one from its log), new
//! members join late and catch up in pages from the others, and running members
//! are removed from the view and taken back later with their engine (a rejoin:
//! they catch up on what was delivered while they were out). Some topics have a
//! lifespan (simulated time is a millisecond a step), so what a history holds
//! depends on when it is served. Unordered topics are delivered as they reach
//! each member (module `unordered`).
//!
//! What the engines emit is checked against invariants, one per file in
//! [`invariants`]; a failing seed is printed with the step and the invariant, and
//! replays exactly:
//!
//! ```text
//! cargo test -p spindle-dds --lib sim::                                             # 2,000 seeds
//! DDS_SIM_SEEDS=100000 cargo test --release -p spindle-dds --lib sim::tests::seeds  # a long run
//! DDS_SIM_SEED=1234 cargo test -p spindle-dds --lib sim::tests::replay -- --ignored --nocapture
//! ```
//!
//! With `DDS_SIM_TRACE` set, a run prints its views, catch-up requests and
//! client attachments as it goes.

mod catchup;
mod clients;
mod config;
mod invariants;
mod member;
mod run;
#[cfg(test)]
mod tests;
mod unordered;
mod view;
mod world;

pub(crate) use config::SimConfig;
pub(crate) use world::World;

use std::fmt;

/// A broken invariant: which, where, and what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    pub(crate) seed: u64,
    pub(crate) step: u64,
    pub(crate) invariant: &'static str,
    pub(crate) detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed {} step {}: {} broken: {}", self.seed, self.step, self.invariant, self.detail)
    }
}

/// What a run did (the suite checks the seeds exercised every path).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    pub(crate) samples: u64,
    pub(crate) views: u64,
    pub(crate) joins: u64,
    pub(crate) kills: u64,
    pub(crate) restarts: u64,
    /// Members removed from the view while running, and taken back.
    pub(crate) removals: u64,
    pub(crate) rejoins: u64,
    pub(crate) failovers: u64,
    pub(crate) client_samples: u64,
    pub(crate) pages: u64,
    pub(crate) history_offers: u64,
    /// Disposals and unregistrations in the order.
    pub(crate) disposals: u64,
    /// Runs whose topic had a lifespan.
    pub(crate) lifespans: u64,
    /// Runs of Unordered topics, and the messages sent in them.
    pub(crate) unordered: u64,
    pub(crate) unordered_sent: u64,
    /// Messages that packed several samples of a member writer (a batch).
    pub(crate) packs: u64,
}

impl Stats {
    pub(crate) fn add(&mut self, o: Stats) {
        self.samples += o.samples;
        self.views += o.views;
        self.joins += o.joins;
        self.kills += o.kills;
        self.restarts += o.restarts;
        self.removals += o.removals;
        self.rejoins += o.rejoins;
        self.failovers += o.failovers;
        self.client_samples += o.client_samples;
        self.pages += o.pages;
        self.history_offers += o.history_offers;
        self.disposals += o.disposals;
        self.lifespans += o.lifespans;
        self.unordered += o.unordered;
        self.unordered_sent += o.unordered_sent;
        self.packs += o.packs;
    }
}

/// True if `DDS_SIM_TRACE` is set (read once).
pub(crate) fn tracing_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("DDS_SIM_TRACE").is_some())
}

/// Runs seed `seed` to its end.
pub(crate) fn run_seed(seed: u64) -> Result<Stats, Violation> {
    World::new(SimConfig::from_seed(seed)).run()
}
