//! A second failure inside a view change: five member processes send; a member is
//! killed and then member 0 (the leader) within 4 ms (shm and tcp), or the leader as
//! soon as a survivor installed the view without the first victim (tcp), so the second
//! kill lands inside the change the first one started. The three survivors must
//! install a view of just themselves, deliver in it, and agree on everything
//! delivered (`chaos` checks all three and exits non-zero otherwise). One run after
//! the other. The timing of a kill against a change varies from run to run; the
//! group simulator replays the failing pattern deterministically (`spindle_views::sim`).
//!
//! Bounded: `chaos` has its own deadlines (60 s per phase), and this test kills it
//! after 150 s; its members die with it (parent-death signal) and their /dev/shm files
//! are swept.

mod common;

use std::time::Duration;

/// One `chaos` run over `transport` with the kills `how` asks for: its JSON line.
fn run(transport: &str, how: &[&str]) -> serde_json::Value {
    let mut args = vec!["--transport", transport, "--nodes", "5", "--kill", "2", "--kill-leader"];
    args.extend_from_slice(how);
    args.extend_from_slice(&["--seconds", "2", "--seed", "12", "--json"]);
    common::run_json(env!("CARGO_BIN_EXE_chaos"), &args, Duration::from_secs(150)).pop().expect("a JSON line")
}

#[test]
fn survivors_of_a_member_and_then_the_leader_dying_go_on() {
    let burst: &[&str] = &["--burst-ms", "4"];
    let in_change: &[&str] = &["--kill-leader-in-change"];
    for (transport, how) in [("shm", burst), ("tcp", burst), ("tcp", in_change)] {
        let v = run(transport, how);
        assert_eq!(v["digest_agree"], true, "{v}");
        assert_eq!(v["final_view_is_survivors"], true, "{v}");
        assert!(v["delivered_after_last_view"].as_u64().is_some_and(|d| d > 0), "{v}");
        assert_eq!(v["survivors"], 3, "{v}");
    }
}
