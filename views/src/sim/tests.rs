//! Deliberate protocol bugs, each of which the simulator must catch.

use super::*;
use crate::engine::Faults;

/// Runs seeds `0..n` with `faults` (and the rule on or off); returns the
/// invariants broken, with how often.
fn broken(n: u64, faults: Faults, majority: bool) -> Vec<(&'static str, usize)> {
    let mut out: Vec<(&'static str, usize)> = Vec::new();
    for seed in 0..n {
        let mut cfg = GroupSimConfig::from_seed(seed);
        cfg.majority = majority;
        cfg.max_steps = 60_000;
        let sim = GroupSim::new(cfg);
        let sim = GroupSim { faults, ..sim };
        // The first view's engines were made before the faults were set.
        let mut sim = sim;
        for node in &mut sim.nodes {
            node.engine.faults = faults;
        }
        if let Err(v) = sim.run() {
            match out.iter_mut().find(|(n, _)| *n == v.invariant) {
                Some((_, c)) => *c += 1,
                None => out.push((v.invariant, 1)),
            }
        }
    }
    out
}

#[test]
fn the_correct_protocol_passes_these_seeds() {
    assert_eq!(broken(150, Faults::default(), true), vec![]);
}

#[test]
fn dropping_discarded_messages_is_caught() {
    let b = broken(150, Faults { no_resend: true, ..Faults::default() }, true);
    assert!(b.iter().any(|(n, _)| *n == invariants::exactly_once::NAME), "{b:?}");
}

#[test]
fn cuts_that_are_not_agreed_are_caught() {
    let b = broken(300, Faults { local_cut: true, ..Faults::default() }, true);
    assert!(b.iter().any(|(n, _)| *n == invariants::delivery_agreement::NAME), "{b:?}");
}

#[test]
fn no_majority_rule_lets_a_minority_install() {
    let b = broken(300, Faults::default(), false);
    assert!(b.iter().any(|(n, _)| *n == invariants::majority::NAME), "{b:?}");
}

#[test]
fn a_leader_that_does_not_wait_for_its_predecessor_is_caught() {
    let b = broken(1500, Faults { no_takeover_wait: true, ..Faults::default() }, true);
    eprintln!("{b:?}");
    assert!(!b.is_empty(), "{b:?}");
}
