//! The deterministic simulator over many seeds. Each seed draws a subgroup (2-5 nodes,
//! all/half/one senders, window 1-6, ordered or unordered), sender patterns
//! (continuous, bursty, silent, random delays), how many reservations a sender holds
//! open at once (published or given back in any order, as several application threads
//! would on the lock-free send path), half of them an arena for large messages (whose
//! room is reused many times over a run) and link speeds, runs it to quiescence
//! and checks every invariant after every step (see `spindle_smc::sim::invariants`).
//!
//! ```text
//! cargo test -p spindle-smc --test sim                                  # 1,000 seeds
//! SMC_SIM_SEEDS=100000 cargo test --release -p spindle-smc --test sim   # a longer run
//! SMC_SIM_SEED=1234 cargo test -p spindle-smc --test sim replay -- --ignored --nocapture
//! ```

use spindle_smc::sim::Sim;

use testkit::env_u64;

#[test]
fn simulated_seeds_have_no_violations() {
    let start = env_u64("SMC_SIM_START").unwrap_or(0);
    let count = env_u64("SMC_SIM_SEEDS").unwrap_or(1000);
    let (mut sent, mut nulls, mut delivered, mut large) = (0, 0, 0, 0);
    for seed in start..start + count {
        match Sim::run_seed(seed) {
            Ok(r) => {
                sent += r.sent;
                nulls += r.nulls;
                delivered += r.delivered;
                large += r.large;
            }
            Err(v) => {
                panic!("{v}\nreplay: SMC_SIM_SEED={seed} cargo test -p spindle-smc --test sim replay -- --ignored --nocapture")
            }
        }
    }
    eprintln!("{count} seeds: {sent} messages sent, {delivered} deliveries ({large} large), {nulls} nulls");
    assert!(sent > 0 && delivered >= sent, "the seeds exercised traffic");
    assert!(large > 0, "the seeds exercised large messages");
    assert!(nulls > 0, "the seeds exercised null-sends");
}

/// Replays one seed (`SMC_SIM_SEED`) and prints its configuration and outcome.
#[test]
#[ignore = "replay tool: set SMC_SIM_SEED"]
fn replay() {
    let seed = env_u64("SMC_SIM_SEED").expect("set SMC_SIM_SEED");
    let cfg = spindle_smc::sim::SimConfig::from_seed(seed);
    eprintln!("{cfg:#?}");
    match Sim::new(cfg).run() {
        Ok(r) => eprintln!("ok: {r:?}"),
        Err(v) => panic!("{v}"),
    }
}
