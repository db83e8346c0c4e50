//! The sharded store's simulator over many seeds: clients, shards, view changes,
//! migrations and failed primaries, with the invariants of
//! `spindle_kv::shard::sim::invariants` checked after every event and at the end.
//!
//! ```text
//! cargo test -p spindle-kv --test shard_sim                                  # 2,000 seeds
//! KV_SIM_SEEDS=20000 cargo test --release -p spindle-kv --test shard_sim     # a longer run
//! KV_SIM_SEED=1234 cargo test -p spindle-kv --test shard_sim replay -- --ignored --nocapture
//! ```
//!
//! A replay prints the seed's configuration, every request (key, client, what it
//! asked and got, when, and who served it), every version's map and every
//! shard's log; `KV_SIM_TRACE=1` prints every event as well.

use spindle_kv::shard::sim::{Sim, SimConfig};
use testkit::env_u64;

#[test]
fn simulated_seeds_have_no_violations() {
    let start = env_u64("KV_SIM_START").unwrap_or(0);
    let count = env_u64("KV_SIM_SEEDS").unwrap_or(2000);
    let mut total = spindle_kv::shard::sim::Report::default();
    for seed in start..start + count {
        match Sim::run_seed(seed) {
            Ok(r) => {
                total.ops += r.ops;
                total.moved += r.moved;
                total.migrations += r.migrations;
                total.pulled += r.pulled;
                total.ahead += r.ahead;
                total.failures += r.failures;
                total.views += r.views;
            }
            Err(v) => panic!(
                "{v}\nreplay: KV_SIM_SEED={seed} cargo test -p spindle-kv --test shard_sim replay -- --ignored --nocapture"
            ),
        }
    }
    eprintln!("{count} seeds: {total:?}");
    assert!(total.migrations > count / 2, "the seeds exercised migrations");
    assert!(total.moved > 0 && total.pulled > 0, "clients were moved and records pulled");
    assert!(total.ahead > 0, "batches were asked for while the last was logged");
    assert!(total.failures > 0, "the seeds exercised failed primaries");
}

/// Replays one seed (`KV_SIM_SEED`) and prints its configuration and outcome.
#[test]
#[ignore = "replay tool: set KV_SIM_SEED"]
fn replay() {
    let seed = env_u64("KV_SIM_SEED").expect("set KV_SIM_SEED");
    let cfg = SimConfig::from_seed(seed);
    eprintln!("{cfg:#?}");
    let mut sim = Sim::new(cfg);
    sim.trace(std::env::var_os("KV_SIM_TRACE").is_some());
    let outcome = sim.run();
    sim.dump();
    for (i, h) in sim.history().iter().enumerate() {
        eprintln!(
            "{i:4} key {} client {} {:?} -> {:?} [{}, {:?}] by {:?}",
            h.key, h.client, h.kind, h.result, h.invoke, h.response, h.served
        );
    }
    match outcome {
        Ok(r) => eprintln!("ok: {r:?}"),
        Err(v) => panic!("{v}"),
    }
}
