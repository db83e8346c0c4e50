//! `dds_perf` across processes: pub/sub and ping/pong runs with one and three
//! subscribers. Short runs: behaviour, not speed. The program has its own
//! deadlines; this test kills it after 150 s, and its children die with it. (The
//! failover check is `dds_failover.rs`.)

mod common;

use std::time::Duration;

/// The program's last JSON line (its summary).
fn run(bin: &str, args: &[&str]) -> serde_json::Value {
    common::run_json(bin, args, Duration::from_secs(150)).pop().expect("a JSON line")
}

#[test]
fn dds_perf_runs_pub_sub_and_ping_pong() {
    let perf = env!("CARGO_BIN_EXE_dds_perf");
    for (transport, qos, subs) in [("shm", "ordered", "1"), ("tcp", "unordered", "1"), ("shm", "volatile", "3")] {
        let v = run(
            perf,
            &[
                "--transport",
                transport,
                "--qos",
                qos,
                "--subscribers",
                subs,
                "--size",
                "128",
                "--seconds",
                "0.3",
                "--json",
            ],
        );
        assert_eq!(v["all_received_in_order"], true, "{v}");
        assert!(v["samples_per_s_per_sub"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    }
    // Subscriber clients outside the group: every one gets every sample, in order,
    // and no view change happens while they read.
    let v = run(
        perf,
        &["--transport", "tcp", "--subscribers", "2", "--clients", "3", "--size", "256", "--seconds", "0.3", "--json"],
    );
    assert_eq!(v["all_received_in_order"], true, "{v}");
    assert_eq!(v["view_changes_during_run"], 0, "{v}");
    assert_eq!(v["clients_dropped"], 0, "{v}");
    assert!(v["min_client_samples_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    let v = run(perf, &["--latency", "--size", "64", "--count", "200", "--json"]);
    assert_eq!(v["round_trips"], 200, "{v}");
    assert!(v["rtt_p50_us"].as_f64().is_some_and(|p| p > 0.0), "{v}");
}
