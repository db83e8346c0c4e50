//! Tailwind across processes: the primary is `kill -9`'d while it appends, ten
//! consecutive runs over shm and ten over tcp; `tailwind_failover` checks that the
//! new primary's log holds every acknowledgement seen, that the survivors hold the
//! same records and that every record is what was appended at its number, and
//! exits non-zero otherwise. Each program has its own deadlines; this test kills it
//! after 200 s, and its children die with it.

mod common;

use std::time::Duration;

#[test]
fn killing_the_primary_mid_stream_loses_no_acknowledged_append() {
    for transport in ["shm", "tcp"] {
        let lines = common::run_json(
            env!("CARGO_BIN_EXE_tailwind_failover"),
            &["--transport", transport, "--runs", "10"],
            Duration::from_secs(200),
        );
        let summary = lines.last().unwrap();
        assert_eq!(summary["clean"], 10, "{transport}: {summary}");
        for run in &lines[..lines.len() - 1] {
            assert_eq!(run["ok"], true, "{run}");
            assert_eq!(run["holds_every_ack"], true, "{run}");
            assert_eq!(run["records_intact"], true, "{run}");
            assert!(run["reseeded"].as_u64().is_some_and(|n| n > 0), "the fourth member was re-seeded: {run}");
        }
    }
}

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
