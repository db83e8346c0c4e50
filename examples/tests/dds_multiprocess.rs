//! The DDS layer across processes: a writer process `kill -9`'d mid-stream over shm
//! and tcp (every surviving reader holds the same samples: `dds_failover` checks the
//! digests and exits non-zero otherwise), and `dds_perf` pub/sub and ping/pong runs
//! with one and three subscribers. Short runs: behaviour, not speed. Each program has
//! its own deadlines; this test kills it after 150 s, and its children die with it.

mod common;

use std::time::Duration;

/// The program's last JSON line (its summary).
fn run(bin: &str, args: &[&str]) -> serde_json::Value {
    common::run_json(bin, args, Duration::from_secs(150)).pop().expect("a JSON line")
}

#[test]
fn killing_a_writer_leaves_the_surviving_readers_in_agreement() {
    for (transport, qos) in [("shm", "ordered"), ("tcp", "volatile"), ("shm", "logged")] {
        let v = run(env!("CARGO_BIN_EXE_dds_failover"), &["--transport", transport, "--qos", qos, "--seconds", "0.7"]);
        assert_eq!(v["digest_agree"], true, "{v}");
        assert_eq!(v["ended"], true, "{v}");
        assert_eq!(v["victim_removed"], true, "{v}");
        assert!(v["samples"].as_u64().is_some_and(|n| n > 0), "{v}");
    }
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
    let v = run(perf, &["--latency", "--size", "64", "--count", "200", "--json"]);
    assert_eq!(v["round_trips"], 200, "{v}");
    assert!(v["rtt_p50_us"].as_f64().is_some_and(|p| p > 0.0), "{v}");
}
