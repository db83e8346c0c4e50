//! The simulator catches each planted protocol bug, and replays a seed exactly.

use super::*;
use crate::core::Faults;

/// Runs seeds with `faults` until one fails; returns the invariant it broke.
fn first_violation(faults: Faults, seeds: u64) -> Option<&'static str> {
    (0..seeds)
        .find_map(|seed| Sim::new(SimConfig::from_seed(seed)).with_faults(faults).run().err().map(|v| v.invariant))
}

#[test]
fn catches_slot_reuse_before_delivery() {
    let v = first_violation(Faults { reuse_early: true, ..Faults::default() }, 300);
    assert!(
        v == Some(invariants::slot_reuse::NAME) || v == Some(invariants::no_gaps::NAME),
        "early slot reuse went unnoticed: {v:?}"
    );
}

#[test]
fn catches_arena_reuse_before_delivery() {
    let v = first_violation(Faults { arena_early: true, ..Faults::default() }, 300);
    assert_eq!(v, Some(invariants::no_gaps::NAME), "a large payload overwritten before delivery went unnoticed");
}

#[test]
fn catches_a_relayed_payload_taken_before_it_came() {
    let v = first_violation(Faults { relay_early: true, ..Faults::default() }, 300);
    assert_eq!(v, Some(invariants::no_gaps::NAME), "a descriptor taken before its relayed payload went unnoticed");
}

#[test]
fn catches_a_relayed_count_queued_ahead_of_its_payload() {
    let v = first_violation(Faults { relay_count_first: true, ..Faults::default() }, 1000);
    assert_eq!(v, Some(invariants::no_gaps::NAME), "a relayed count ahead of its payloads went unnoticed");
}

#[test]
fn relays_run_in_many_seeds() {
    let relayed = (0..300).filter(|s| SimConfig::from_seed(*s).spec.relay).count();
    assert!(relayed > 50, "only {relayed} of 300 seeds relay large payloads");
}

#[test]
fn catches_delivery_before_stability() {
    let v = first_violation(Faults { deliver_unstable: true, ..Faults::default() }, 300);
    assert_eq!(v, Some(invariants::stability::NAME));
}

#[test]
fn catches_a_stall_without_nulls() {
    let v = first_violation(Faults { no_nulls: true, ..Faults::default() }, 300);
    assert_eq!(v, Some(invariants::progress::NAME));
}

#[test]
fn catches_nulls_that_never_stop() {
    let v = first_violation(Faults { endless_nulls: true, ..Faults::default() }, 300);
    assert!(
        v == Some(invariants::quiescence::NAME) || v == Some(invariants::progress::NAME),
        "endless nulls went unnoticed: {v:?}"
    );
}

#[test]
fn catches_nulls_over_claimed_entries() {
    let v = first_violation(Faults { nulls_over_claims: true, ..Faults::default() }, 300);
    assert_eq!(v, Some(invariants::no_gaps::NAME), "nulls over entries held by senders went unnoticed");
}

#[test]
fn same_seed_same_run() {
    for seed in [3, 17, 99] {
        assert_eq!(Sim::run_seed(seed), Sim::run_seed(seed));
    }
}

#[test]
fn cut_send_stages_run_in_many_seeds() {
    let cut = (0..300).filter(|s| SimConfig::from_seed(*s).large_push.is_some()).count();
    assert!(cut > 30, "only {cut} of 300 seeds cut their send stages after a few payloads");
}
