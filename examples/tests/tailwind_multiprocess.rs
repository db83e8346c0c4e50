//! Tailwind across processes: the primary is `kill -9`'d while it appends, ten
//! consecutive runs over shm and ten over tcp; `tailwind_failover` checks that the
//! new primary's log holds every acknowledgement seen, that the survivors hold the
//! same records and that every record is what was appended at its number, and
//! exits non-zero otherwise. Each program has its own deadlines; this test kills it
//! after 200 s, and its children die with it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn run(bin: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let mut child = Command::new(bin).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(200);
    let finished = loop {
        if child.try_wait().expect("wait").is_some() {
            break true;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("output");
    sst::transport::shm::remove_stale_files();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(finished, "{bin} {args:?} did not finish within 200 s: {stderr}");
    assert!(out.status.success(), "{bin} {args:?} failed: {stdout}\n{stderr}");
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a JSON line ({e}): {l}"))).collect()
}

#[test]
fn killing_the_primary_mid_stream_loses_no_acknowledged_append() {
    for transport in ["shm", "tcp"] {
        let lines = run(env!("CARGO_BIN_EXE_tailwind_failover"), &["--transport", transport, "--runs", "10"]);
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
