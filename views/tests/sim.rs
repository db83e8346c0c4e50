//! The group simulator over many seeded fault schedules.
//!
//! `VIEWS_SIM_SEEDS=N` runs seeds `0..N` (default 1000); `VIEWS_SIM_SEED=S` replays
//! one seed.

use spindle_views::sim::{GroupSim, GroupSimConfig};

use testkit::env_u64;

#[test]
fn fault_schedules_keep_every_invariant() {
    if let Some(seed) = env_u64("VIEWS_SIM_SEED") {
        let cfg = GroupSimConfig::from_seed(seed);
        eprintln!("{cfg:?}");
        match GroupSim::new(cfg).run() {
            Ok(r) => eprintln!("seed {seed}: {r:?}"),
            Err(v) => panic!("{v}"),
        }
        return;
    }
    let n = env_u64("VIEWS_SIM_SEEDS").unwrap_or(1000);
    let (mut installs, mut stopped, mut delivered, mut failures) = (0, 0, 0, Vec::new());
    for seed in 0..n {
        match GroupSim::run_seed(seed) {
            Ok(r) => {
                installs += r.installs;
                stopped += r.stopped;
                delivered += r.delivered;
            }
            Err(v) => failures.push(v.to_string()),
        }
    }
    eprintln!("{n} schedules: {installs} installs, {stopped} stops, {delivered} deliveries");
    assert!(failures.is_empty(), "{} of {n} schedules failed:\n{}", failures.len(), failures.join("\n"));
    assert!(installs > n, "schedules must change views");
    assert!(stopped > 0, "some schedules must stop members (partitions, leaves)");
}
