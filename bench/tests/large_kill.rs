//! A sender killed (SIGKILL) while it streams 1 MiB messages through its arena: three
//! member processes all send; one is killed. The two survivors must install a view
//! of themselves, deliver in it, agree on everything delivered, and every delivery
//! must be a whole message (`chaos` checks each one's length, both stamps and the
//! pattern between; `torn` counts failures). Over shm (readers read the dead sender's
//! arena in place) and tcp. On tcp the failure timeout is 2 s: a member's heartbeat
//! can wait behind megabytes of payload on its stream (see docs/limits.md).
//!
//! Bounded: `chaos` has its own deadlines (60 s per phase), and this test kills it
//! after 150 s; its members die with it (parent-death signal) and their /dev/shm
//! files are swept.

mod common;

use std::time::Duration;

#[test]
fn a_sender_killed_mid_transfer_leaves_no_partial_delivery() {
    for (transport, failure_ms) in [("shm", "500"), ("tcp", "2000")] {
        let args = ["--transport", transport, "--nodes", "3", "--kill", "1", "--size", "1048576"];
        let args = [&args[..], &["--seconds", "2", "--failure-ms", failure_ms, "--seed", "3", "--json"]].concat();
        let v = common::run_json(env!("CARGO_BIN_EXE_chaos"), &args, Duration::from_secs(150)).pop().expect("JSON");
        assert_eq!(v["torn"], 0, "{v}");
        assert_eq!(v["digest_agree"], true, "{v}");
        assert_eq!(v["final_view_is_survivors"], true, "{v}");
        assert!(v["delivered_after_last_view"].as_u64().is_some_and(|d| d > 0), "{v}");
        assert_eq!(v["size"], 1048576, "{v}");
    }
}
