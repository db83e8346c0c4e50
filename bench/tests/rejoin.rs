//! A member stalled past the failure timeout (SIGSTOP) is removed by the others;
//! continued (SIGCONT), it joins the group again by itself, twice in a row, over
//! shm and tcp, while every member sends. `chaos --stop-rounds` checks that the
//! members that stayed delivered one sequence and that the stalled one delivered
//! contiguous pieces of it, in order, with gaps only where it rejoined, and that it
//! counted each rejoin.
//!
//! Bounded: `chaos` has its own deadlines (60 s per phase), and this test kills it
//! after 120 s; its members die with it (parent-death signal) and their /dev/shm
//! files are swept.

mod common;

use std::time::Duration;

#[test]
fn a_stalled_member_rejoins_by_itself_over_shm_and_tcp() {
    for transport in ["shm", "tcp"] {
        let args = ["--transport", transport, "--nodes", "3", "--stop-rounds", "2", "--rate", "200"];
        let args = [&args[..], &["--size", "32", "--json"]].concat();
        let v = common::run_json(env!("CARGO_BIN_EXE_chaos"), &args, Duration::from_secs(120)).pop().expect("JSON");
        assert_eq!(v["logs_agree"], true, "{v}");
        // Each stall at least (a loaded machine can remove it once more).
        assert!(v["rejoins"].as_u64().is_some_and(|n| n >= 2), "{v}");
        assert!(v["delivered"].as_u64().is_some_and(|d| d > 0), "{v}");
        let changes = v["view_changes_per_round_p50"].as_f64().unwrap_or(0.0);
        assert!(changes >= 2.0, "at least one change out and one back in: {v}");
    }
}
