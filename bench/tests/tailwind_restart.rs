//! `Ack::Disk` against `kill -9` of the whole group: three member processes
//! append to a log (every member appends; the backups' appends are forwarded)
//! for a while, then all three are killed with SIGKILL at once, mid-stream. Three
//! new processes start on the same directories; the log they recover must hold
//! every append that had been acknowledged, once each, and take new ones (over
//! shm and tcp).
//!
//! Each member notes an append as acknowledged by writing its record to a file of
//! its own right after `append` returns (a write(2): it survives the process's
//! kill), so the parent knows what was acknowledged before the kill. Bounded:
//! every wait has a deadline, the members die with the test, their shm files and
//! directories are removed.

use bench::MemberArgs;
use serde::{Deserialize, Serialize};
use serde_json::json;
use spindle_tailwind::service::{Ack, Lsn, TailwindConfig, TailwindLog};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Args {
    transport: String,
    /// "append" (the first run, killed) or "read" (the second).
    phase: String,
    dir: PathBuf,
}

const N: usize = 3;

#[test]
fn kill_9_of_every_member_loses_no_acknowledged_append() {
    for transport in ["shm", "tcp"] {
        let dir = std::env::temp_dir().join(format!("tw-restart-{}-{transport}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = run(&Args { transport: transport.into(), phase: "append".into(), dir: dir.clone() });
        let _ = std::fs::remove_dir_all(&dir);
        spindle_sst::transport::shm::remove_stale_files();
        let v = r.unwrap_or_else(|e| panic!("{transport}: {e}"));
        for check in ["all_acked_there", "each_once", "appended_after"] {
            assert_eq!(v[check], true, "{check}: {v}");
        }
        assert!(v["acked"].as_u64().is_some_and(|n| n > 50), "{v}");
    }
}

/// A member process of the test above (started by it; by hand it does nothing).
#[test]
#[ignore = "a member process: kill_9_of_every_member_loses_no_acknowledged_append starts it"]
fn member() {
    bench::run_test_member(child);
}

fn child(args: &Args, member: &MemberArgs, id: u32) -> Result<(), String> {
    let dir = args.dir.join(format!("m{id}"));
    let group = member.group_config(id, &args.transport, Duration::from_millis(100), Duration::from_millis(2000))?;
    let mut cfg = TailwindConfig::new(dir.join("log"));
    cfg.buffer = 64 * 1024; // segments close during the run, and one is open at the kill
    cfg.ack = Ack::Disk;
    let log = TailwindLog::start(group, cfg).map_err(|e| e.to_string())?;
    if !log.group().wait_for_members(N, Duration::from_secs(60))
        || log.wait_for_primary(Duration::from_secs(60)).is_none()
    {
        return Err("the log did not get its three members and a primary".into());
    }
    println!("JOINED");
    if testkit::wait_for_parent() != "GO" {
        return Err("expected GO".into());
    }
    if args.phase == "append" {
        // Append until killed, noting each acknowledged record.
        let mut acked = std::fs::File::create(dir.join("acked.txt")).map_err(|e| e.to_string())?;
        println!("APPENDING");
        for i in 0u64.. {
            let rec = format!("{id}-{i}");
            if log.append(rec.as_bytes()).is_ok() {
                acked.write_all(format!("{rec}\n").as_bytes()).map_err(|e| e.to_string())?;
            }
        }
        unreachable!("the loop ends with the process");
    }
    // Read back: every member reads its copy once the log takes appends again.
    let after = log.append(format!("after-{id}").as_bytes()).is_ok();
    std::thread::sleep(Duration::from_millis(300));
    let recs: Result<Vec<String>, _> =
        log.read_from(Lsn(0)).map(|r| r.map(|(_, b)| String::from_utf8_lossy(&b).into_owned())).collect();
    let recs = recs.map_err(|e| e.to_string())?;
    println!("RESULT {}", json!({"node": id, "records": recs, "after": after}));
    testkit::wait_for_parent();
    drop(log);
    Ok(())
}

fn acked_of(dir: &Path) -> Vec<String> {
    (0..N)
        .flat_map(|i| {
            std::fs::read_to_string(dir.join(format!("m{i}/acked.txt")))
                .unwrap_or_default()
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn run(args: &Args) -> Result<serde_json::Value, String> {
    spindle_sst::transport::shm::remove_stale_files();
    let mut kids = bench::start_test_members(N, "member", args, Duration::from_secs(120), &[])?;
    kids.expect_lines("APPENDING", &[0, 1, 2]).map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(800));
    for i in 0..N {
        kids.kill(i);
    }
    drop(kids);
    let acked = acked_of(&args.dir);
    spindle_sst::transport::shm::remove_stale_files();
    let read = Args { phase: "read".into(), ..args.clone() };
    let mut kids = bench::start_test_members(N, "member", &read, Duration::from_secs(120), &[])?;
    let results = bench::parse_results(&kids.expect_lines("RESULT ", &[0, 1, 2]).map_err(|e| e.to_string())?)?;
    kids.tell_all("EXIT").map_err(|e| e.to_string())?;
    let _ = kids.wait_all_but(&[]);
    drop(kids);
    // The longest copy (a member's read may predate the others' last appends).
    let records: Vec<String> = results
        .iter()
        .filter_map(|r| r["records"].as_array())
        .max_by_key(|a| a.len())
        .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let mut count = std::collections::HashMap::<&str, usize>::new();
    for r in &records {
        *count.entry(r.as_str()).or_default() += 1;
    }
    let v = json!({
        "transport": args.transport, "acked": acked.len(), "records": records.len(),
        "all_acked_there": acked.iter().all(|a| count.contains_key(a.as_str())),
        "each_once": count.values().all(|n| *n == 1),
        "appended_after": results.iter().all(|r| r["after"] == true),
        "missing": acked.iter().filter(|a| !count.contains_key(a.as_str())).take(5).collect::<Vec<_>>(),
    });
    eprintln!("{v}");
    Ok(v)
}
