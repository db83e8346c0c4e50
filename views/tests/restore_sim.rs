//! The restore simulator over many seeds.
//!
//! `RESTORE_SIM_SEEDS=N` runs seeds `0..N` (default 5000); `RESTORE_SIM_SEED=S`
//! replays one seed.

use spindle_views::restore::sim::{RestoreSim, RestoreSimConfig};
use testkit::env_u64;

#[test]
fn restores_keep_every_invariant() {
    if let Some(seed) = env_u64("RESTORE_SIM_SEED") {
        let cfg = RestoreSimConfig::from_seed(seed);
        eprintln!("{cfg:?}");
        match RestoreSim::new(cfg).run() {
            Ok(r) => eprintln!("seed {seed}: {r:?}"),
            Err(v) => panic!("{v}"),
        }
        return;
    }
    let n = env_u64("RESTORE_SIM_SEEDS").unwrap_or(5000);
    let (mut restarts, mut requests, mut failures) = (0, 0, Vec::new());
    for seed in 0..n {
        match RestoreSim::run_seed(seed) {
            Ok(r) => {
                restarts += r.restarts;
                requests += r.requests;
            }
            Err(v) => failures.push(v.to_string()),
        }
    }
    eprintln!("{n} restores: {restarts} restarted, {requests} requests");
    let shown: Vec<&String> = failures.iter().take(20).collect();
    assert!(failures.is_empty(), "{} of {n} seeds failed:\n{shown:#?}", failures.len());
    assert!(restarts > n / 2, "most seeds must restore the view");
}
