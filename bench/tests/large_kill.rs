//! A sender killed (SIGKILL) while it streams 1 MiB messages through its arena: three
//! member processes all send; one is killed. The two survivors must install a view
//! of themselves, deliver in it, agree on everything delivered, and every delivery
//! must be a whole message (`chaos` checks each one's length, both stamps and the
//! pattern between; `torn` counts failures). Over shm (readers read the dead sender's
//! arena in place) and tcp. Each member sends 100 messages a second (100 MiB/s) and
//! the failure timeout is 2 s: this is a test of what a kill leaves behind, not of
//! speed.
//!
//! The second does the same with large messages relayed (a relay killed mid-chain).
//!
//! The third test is of liveness beside bulk bytes: the same group over tcp, every
//! member sending 1 MiB messages as fast as it can for 4 s, with a 500 ms failure
//! timeout and no kill. Nobody may be suspected (no view change), so no heartbeat
//! waited out the timeout behind payload, a full socket or a long delivery upcall.
//! (A kill's view change at full rate is left out: the ragged trim delivers the
//! whole backlog, up to an arena per sender, in one upcall, which in the test
//! profile beside other tests can outlast a 500 ms timeout.)
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

/// The same with large messages relayed member to member (`--relay`): four members
/// over tcp, all sending, so whichever is killed is a relay in the middle of two
/// senders' chains. Its successors may hold descriptors whose payloads never came;
/// those messages must be delivered nowhere, and everything delivered whole.
#[test]
fn a_relay_killed_mid_transfer_leaves_no_partial_delivery() {
    let args = ["--transport", "tcp", "--nodes", "4", "--kill", "1", "--size", "1048576", "--rate", "100"];
    let args = [&args[..], &["--relay", "--seconds", "2", "--failure-ms", "2000", "--seed", "3", "--json"]].concat();
    let v = common::run_json(env!("CARGO_BIN_EXE_chaos"), &args, Duration::from_secs(150)).pop().expect("JSON");
    assert_eq!(v["relay"], true, "{v}");
    assert_eq!(v["torn"], 0, "{v}");
    assert_eq!(v["digest_agree"], true, "{v}");
    assert_eq!(v["final_view_is_survivors"], true, "{v}");
    assert!(v["delivered_after_last_view"].as_u64().is_some_and(|d| d > 0), "{v}");
}

#[test]
fn bulk_bytes_over_tcp_never_starve_liveness() {
    let args = ["--transport", "tcp", "--nodes", "3", "--kill", "0", "--size", "1048576", "--seconds", "4"];
    let args = [&args[..], &["--failure-ms", "500", "--seed", "5", "--json"]].concat();
    let v = common::run_json(env!("CARGO_BIN_EXE_chaos"), &args, Duration::from_secs(150)).pop().expect("JSON");
    assert_eq!(v["views_installed"], 0, "nobody was suspected: {v}");
    assert_eq!(v["torn"], 0, "{v}");
    assert_eq!(v["digest_agree"], true, "{v}");
    assert!(v["delivered"].as_u64().is_some_and(|d| d > 0), "{v}");
}
