//! A sender killed (SIGKILL) while it streams 1 MiB messages through its arena: three
//! member processes all send; one is killed. The two survivors must install a view
//! of themselves, deliver in it, agree on everything delivered, and every delivery
//! must be a whole message (`chaos` checks each one's length, both stamps and the
//! pattern between; `torn` counts failures). Over shm (readers read the dead sender's
//! arena in place) and tcp. Each member sends 100 messages a second (100 MiB/s) and
//! the failure timeout is 2 s: this is a test of what a kill leaves behind, not of
//! speed, and in the test profile, with other tests sharing the two cores, a member's
//! upcall (a digest over every byte) or a heartbeat waiting behind payload on its
//! tcp stream can take longer than a short timeout (see docs/limits.md).
//!
//! Bounded: `chaos` has its own deadlines (60 s per phase), and this test kills it
//! after 150 s; its members die with it (parent-death signal) and their /dev/shm
//! files are swept.

mod common;

use std::time::Duration;

#[test]
fn a_sender_killed_mid_transfer_leaves_no_partial_delivery() {
    for transport in ["shm", "tcp"] {
        let args = ["--transport", transport, "--nodes", "3", "--kill", "1", "--size", "1048576", "--rate", "100"];
        let args = [&args[..], &["--seconds", "2", "--failure-ms", "2000", "--seed", "3", "--json"]].concat();
        let v = common::run_json(env!("CARGO_BIN_EXE_chaos"), &args, Duration::from_secs(150)).pop().expect("JSON");
        assert_eq!(v["torn"], 0, "{v}");
        assert_eq!(v["digest_agree"], true, "{v}");
        assert_eq!(v["final_view_is_survivors"], true, "{v}");
        assert!(v["delivered_after_last_view"].as_u64().is_some_and(|d| d > 0), "{v}");
        assert_eq!(v["size"], 1048576, "{v}");
    }
}
