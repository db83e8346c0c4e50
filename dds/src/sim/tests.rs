//! The simulator over many seeds, the replay of one, and proof that the
//! invariants catch planted faults.

use super::{run_seed, SimConfig, Stats, World};
use crate::engine::Mutation;

use testkit::env_u64;

#[test]
fn seeds() {
    let start = env_u64("DDS_SIM_START").unwrap_or(0);
    let count = env_u64("DDS_SIM_SEEDS").unwrap_or(2000);
    let mut total = Stats::default();
    for seed in start..start + count {
        match run_seed(seed) {
            Ok(s) => total.add(s),
            Err(v) => panic!(
                "{v}\nreplay: DDS_SIM_SEED={seed} cargo test -p spindle-dds --lib sim::tests::replay -- --ignored --nocapture"
            ),
        }
        if count >= 10_000 && (seed - start + 1) % 10_000 == 0 {
            eprintln!("{} seeds ok", seed - start + 1);
        }
    }
    eprintln!("{count} seeds: {total:?}");
    // The seeds exercised every path the invariants speak of.
    assert!(total.samples > 0 && total.client_samples > 0, "{total:?}");
    assert!(total.joins > 0 && total.restarts > 0 && total.kills > 0 && total.failovers > 0, "{total:?}");
    assert!(total.pages > 0 && total.views > 0 && total.history_offers > 0, "{total:?}");
    assert!(total.disposals > 0, "{total:?}");
    assert!(total.removals > 0 && total.rejoins >= total.removals, "{total:?}");
    assert!(total.lifespans > 0 && total.unordered > 0 && total.unordered_sent > 0, "{total:?}");
    assert!(total.packs > 0, "{total:?}");
}

/// Replays one seed (`DDS_SIM_SEED`) and prints its configuration and outcome.
#[test]
#[ignore = "replay tool: set DDS_SIM_SEED"]
fn replay() {
    let seed = env_u64("DDS_SIM_SEED").expect("set DDS_SIM_SEED");
    let cfg = SimConfig::from_seed(seed);
    eprintln!("{cfg:#?}");
    match World::new(cfg).run() {
        Ok(s) => eprintln!("ok: {s:?}"),
        Err(v) => panic!("{v}"),
    }
}

/// Runs seeds with `m` planted in every member's engine until one fails.
fn first_caught(m: Mutation) -> Option<super::Violation> {
    (0..2000).find_map(|seed| {
        let mut cfg = SimConfig::from_seed(seed);
        cfg.mutation = Some(m);
        World::new(cfg).run().err()
    })
}

#[test]
fn a_seam_off_by_one_is_caught() {
    let v = first_caught(Mutation::SeamOffByOne).expect("some seed catches the planted fault");
    eprintln!("caught: {v}");
}

#[test]
fn an_acknowledgement_before_the_log_holds_the_write_is_caught() {
    let v = first_caught(Mutation::AckEarly).expect("some seed catches the planted fault");
    assert_eq!(v.invariant, "logged", "{v}");
}

#[test]
fn a_history_not_pinned_for_the_joiner_is_caught() {
    let v = first_caught(Mutation::NoPin).expect("some seed catches the planted fault");
    assert!(["history at the seam", "no hole in live samples"].contains(&v.invariant), "{v}");
}

#[test]
fn a_rejoined_member_that_does_not_tell_what_it_missed_is_caught() {
    let v = first_caught(Mutation::RejoinUntold).expect("some seed catches the planted fault");
    eprintln!("caught: {v}");
    assert!(["no hole in live samples", "quiescence"].contains(&v.invariant), "{v}");
}

#[test]
fn a_pack_that_loses_its_last_sample_is_caught() {
    let v = first_caught(Mutation::PackShort).expect("some seed catches the planted fault");
    eprintln!("caught: {v}");
}

#[test]
fn an_unread_sample_that_leaves_its_writer_behind_is_caught() {
    let v = first_caught(Mutation::UnreadWriterBehind).expect("some seed catches the planted fault");
    assert_eq!(v.invariant, "quiescence", "{v}");
}
