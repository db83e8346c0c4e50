//! `tailwind_bench` across processes: both designs over shm and tcp, short runs
//! (behaviour, not speed). The program has its own deadlines; this test kills it
//! after 150 s, and its children die with it. (The failover check is
//! `tailwind_failover.rs`.)

mod common;

use std::time::Duration;

#[test]
fn tailwind_bench_runs_both_designs_over_shm_and_tcp() {
    for transport in ["shm", "tcp"] {
        let lines = common::run_json(
            env!("CARGO_BIN_EXE_tailwind_bench"),
            &["--transport", transport, "--sizes", "100,4000", "--seconds", "0.3", "--baseline", "rpc"],
            Duration::from_secs(150),
        );
        let rows: Vec<_> = lines.iter().filter(|l| l["summary"].is_null()).collect();
        assert_eq!(rows.len(), 4, "two sizes, two designs: {lines:?}");
        for r in &rows {
            assert!(r["appends"].as_u64().is_some_and(|n| n > 0), "{r}");
            assert_eq!(r["backup_cpu_pct"].as_array().map(Vec::len), Some(2), "{r}");
        }
        assert_eq!(lines.last().unwrap()["ratios"].as_array().map(Vec::len), Some(2));
    }
}
