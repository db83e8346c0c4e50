//! `kv_bench` across processes: every configuration it has, short runs
//! (behaviour, not speed). The program has its own deadlines; this test kills it
//! after 150 s, and its children die with it.

mod common;

use std::time::Duration;

#[test]
fn kv_bench_prints_a_row_per_configuration() {
    let lines = common::run_json(
        env!("CARGO_BIN_EXE_kv_bench"),
        &["--json", "--values", "100", "--seconds", "0.3", "--clients", "2"],
        Duration::from_secs(150),
    );
    let configs: Vec<(&str, &str)> =
        lines.iter().map(|l| (l["config"].as_str().unwrap(), l["transport"].as_str().unwrap())).collect();
    assert_eq!(
        configs,
        [
            ("store_fsync", "none"),
            ("store_batched", "none"),
            ("tailwind_memory", "shm"),
            ("tailwind_memory", "tcp"),
            ("tailwind_disk", "shm"),
            ("tailwind_disk", "tcp"),
            ("rpc", "shm"),
            ("rpc", "tcp")
        ],
        "{lines:?}"
    );
    for l in &lines {
        assert!(l["puts_per_s"].as_f64().is_some_and(|p| p > 0.0), "{l}");
        assert!(l["p50_us"].as_f64().is_some_and(|p| p > 0.0) && l["p99_us"].as_f64() >= l["p50_us"].as_f64(), "{l}");
        assert_eq!(l["value_bytes"], 100);
        assert_eq!(l["replicas"], if l["transport"] == "none" { 1 } else { 3 });
        if l["transport"] != "none" {
            // Every acknowledged put reached member 0's store before the row.
            assert!(l["apply_lag_at_end"].as_u64().is_some() && l["catch_up_ms"].as_f64().is_some(), "{l}");
        }
    }
}
