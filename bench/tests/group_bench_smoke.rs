//! group_bench over shm and tcp: the Group runtime delivers every message to every
//! member in one order, in both delivery modes, answers requests on kept connections,
//! and runs raw smc for comparison; clients subscribed at the members receive every
//! message and change no view. Short runs: behaviour, not speed.

use std::process::Command;

fn run(transport: &str, deliver: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_group_bench"))
        .args(["--transport", transport, "--nodes", "3", "--senders", "all", "--size", "64"])
        .args(["--count", "2000", "--window", "16", "--requests", "50", "--deliver", deliver, "--json"])
        .output()
        .expect("run group_bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{transport} {deliver} failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.trim()).expect("one JSON line")
}

fn check(transport: &str) {
    for deliver in ["in-place", "copy"] {
        let v = run(transport, deliver);
        assert_eq!(v["digest_agree"], true, "{v}");
        assert!(v["views_installed"].as_u64().is_some_and(|n| n >= 1), "{v}");
        assert!(v["request_p50_us"].as_f64().is_some_and(|p| p > 0.0), "{v}");
        assert!(v["raw_smc_msgs_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    }
}

#[test]
fn shm() {
    check("shm");
}

#[test]
fn tcp() {
    check("tcp");
}

#[test]
fn clients_receive_every_message_and_change_no_view() {
    let out = Command::new(env!("CARGO_BIN_EXE_group_bench"))
        .args(["--transport", "tcp", "--nodes", "3", "--size", "256", "--count", "3000"])
        .args(["--clients", "4", "--no-raw", "--requests", "10", "--json"])
        .output()
        .expect("run group_bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "group_bench --clients failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(v["digest_agree"], true, "{v}");
    assert_eq!(v["clients_all_received"], true, "{v}");
    assert_eq!(v["view_changes_during_run"], 0, "{v}");
    assert_eq!(v["clients_dropped"], 0, "{v}");
    assert_eq!(v["client_msgs_per_s"].as_array().map(Vec::len), Some(4), "{v}");
}
