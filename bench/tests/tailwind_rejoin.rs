//! A Tailwind backup stalled past the failure timeout (SIGSTOP) is removed while
//! the primary appends; continued (SIGCONT), it rejoins by itself, is re-seeded,
//! and ends holding the same log as the others: every acknowledged record, in
//! order, nothing that was not appended, over shm and tcp.
//!
//! Three member processes (copies of this test binary running the ignored `member`
//! test), replication factor 3: member 0 (the primary) appends record 0, 1, 2, ...
//! and prints each acknowledgement; member 2 is stalled for 1.5 s (failure timeout
//! 0.4 s) mid-stream and continued; once it is back the primary appends on, then
//! stops, and every member reads its whole log. Bounded: every wait has a
//! deadline, the members die with the test, their shm files and log directories
//! are removed.

use bench::mcast::Digest;
use bench::MemberArgs;
use serde::{Deserialize, Serialize};
use serde_json::json;
use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_tailwind::service::{Lsn, TailwindConfig, TailwindLog};
use std::io::Write;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Args {
    transport: String,
}

const N: usize = 3;
const VICTIM: usize = 2;

fn record(i: u64) -> Vec<u8> {
    let len = 8 + (i.wrapping_mul(2654435761) % 200) as usize;
    let mut v = i.to_le_bytes().to_vec();
    v.extend((8..len).map(|j| (i as usize).wrapping_mul(131).wrapping_add(j) as u8));
    v
}

fn dir_of(group: &str, id: u32) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tw-rejoin-{group}-{id}"))
}

#[test]
fn a_stalled_backup_rejoins_and_holds_the_whole_log() {
    for transport in ["shm", "tcp"] {
        let v = run(&Args { transport: transport.into() }).unwrap_or_else(|e| panic!("{transport}: {e}"));
        eprintln!("{v}");
        assert_eq!(v["agree"], true, "{v}");
        assert_eq!(v["intact"], true, "{v}");
        assert_eq!(v["holds_every_ack"], true, "{v}");
        assert_eq!(v["victim_rejoined"], true, "{v}");
    }
}

#[test]
#[ignore = "a member process: a_stalled_backup_rejoins_and_holds_the_whole_log starts it"]
fn member() {
    bench::run_test_member(child);
}

fn child(args: &Args, member: &MemberArgs, id: u32) -> Result<(), String> {
    // RUST_LOG=spindle_tailwind=info shows the recoveries on stderr.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let group = member.group_config(id, &args.transport, Duration::from_millis(100), Duration::from_millis(800))?;
    let mut cfg = TailwindConfig::new(dir_of(&group.name, id));
    cfg.buffer = 64 * 1024; // small: segments rotate during the stream
    let log = TailwindLog::start(group, cfg).map_err(|e| e.to_string())?;
    if !log.group().wait_for_members(N, Duration::from_secs(60))
        || log.wait_for_primary(Duration::from_secs(60)).is_none()
    {
        return Err("no group of three with a primary".into());
    }
    println!("JOINED");
    if testkit::wait_for_parent() != "GO" {
        return Err("expected GO".into());
    }
    let stop = AtomicBool::new(false);
    let appended = std::thread::scope(|s| -> Result<u64, String> {
        let appender = s.spawn(|| -> Result<u64, String> {
            if id != 0 {
                return Ok(0);
            }
            let mut out = std::io::stdout().lock();
            let mut i = 0u64;
            // Errors are retried for this long from the first of a run of them.
            let mut failing_since = None::<Instant>;
            while !stop.load(Ordering::Relaxed) {
                let lsn = match log.append(&record(i)) {
                    Ok(lsn) => lsn,
                    // The view changed under the append (the backup was removed or
                    // is back): it may or may not be in the log. Look, once the log
                    // takes appends again, and append it again only if it is not.
                    Err(e) if failing_since.get_or_insert_with(Instant::now).elapsed() < Duration::from_secs(30) => {
                        eprintln!("append {i}: {e}; looking whether it is in the log");
                        std::thread::sleep(Duration::from_millis(10));
                        log.wait_for_primary(Duration::from_secs(30));
                        match log.read_from(Lsn(i)).next() {
                            Some(Ok((lsn, bytes))) if lsn == Lsn(i) && bytes == record(i) => lsn,
                            Some(Ok((lsn, _))) => return Err(format!("after append {i}: record {lsn:?} in its place")),
                            _ => continue,
                        }
                    }
                    Err(e) => return Err(format!("append {i}: {e}, still failing after 30 s")),
                };
                failing_since = None;
                if lsn != Lsn(i) {
                    return Err(format!("append {i} got number {lsn:?}"));
                }
                writeln!(out, "ACK {i}").map_err(|e| e.to_string())?;
                out.flush().map_err(|e| e.to_string())?;
                i += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            Ok(i)
        });
        // An appender that failed says so now (the parent waits for its acks).
        let appender = s.spawn(move || {
            let r = appender.join().map_err(|_| "appender panicked".to_string()).and_then(|r| r);
            if let Err(e) = &r {
                println!("FAILED {e}");
            }
            r
        });
        // The stalled member says when it is back.
        let watcher = s.spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(120);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                if log.group().metrics().rejoins > 0 {
                    println!("REJOINED");
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let line = testkit::wait_for_parent();
        stop.store(true, Ordering::Relaxed);
        let _ = watcher.join();
        let n = appender.join().map_err(|_| "appender panicked".to_string())??;
        (line == "STOP").then_some(n).ok_or(format!("expected STOP, got {line:?}"))
    })?;
    println!("END {appended}");
    let end: u64 = testkit::wait_for_parent()
        .strip_prefix("DIGEST ")
        .and_then(|n| n.parse().ok())
        .ok_or("expected DIGEST <end>")?;
    let read = || -> Result<(u64, Digest, Option<String>), String> {
        let (mut count, mut digest, mut bad) = (0u64, Digest::default(), None::<String>);
        for r in log.read_from(Lsn(0)) {
            let (lsn, bytes) = r.map_err(|e| e.to_string())?;
            if (lsn.0 != count || bytes != record(lsn.0)) && bad.is_none() {
                bad = Some(format!("record {} at position {count} is not what was appended", lsn.0));
            }
            digest.add_bytes(&bytes);
            count += 1;
        }
        Ok((count, digest, bad))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (count, digest, bad) = loop {
        let r = read()?;
        if r.0 >= end || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let v = json!({
        "node": id, "count": count, "digest": format!("{:016x}", digest.0), "bad": bad,
        "rejoins": log.group().metrics().rejoins, "primary": log.is_primary(),
    });
    println!("RESULT {v}");
    testkit::wait_for_parent();
    Ok(())
}

fn run(args: &Args) -> Result<serde_json::Value, String> {
    spindle_sst::transport::shm::remove_stale_files();
    let mut kids = bench::start_test_members(N, "member", args, Duration::from_secs(180), &[])?;
    let group = kids.group().to_string();
    let result = (|| -> Result<serde_json::Value, String> {
        let ack = |kids: &testkit::ChildSet| -> Result<u64, String> {
            // An appender that gave up says so (FAILED why) instead of acking.
            let l = kids.expect_any(&["ACK ", "FAILED "], &[0]).map_err(|e| e.to_string())?;
            l[0].parse().map_err(|_| format!("the appender failed: {}", l[0]))
        };
        while ack(&kids)? < 500 {}
        eprintln!("{}: 500 acks; stalling member {VICTIM}", args.transport);
        let pid = kids.pid(VICTIM);
        testkit::pause_process(pid, true)?;
        std::thread::sleep(Duration::from_millis(1500));
        testkit::pause_process(pid, false)?;
        kids.expect_lines("REJOINED", &[VICTIM]).map_err(|e| format!("the stalled member did not rejoin: {e}"))?;
        eprintln!("{}: member {VICTIM} is back", args.transport);
        let back = ack(&kids)?;
        while ack(&kids)? < back + 500 {}
        kids.tell_all("STOP").map_err(|e| e.to_string())?;
        let ends = kids.expect_lines("END ", &[0]).map_err(|e| e.to_string())?;
        let end: u64 = ends[0].parse().map_err(|_| format!("bad end {ends:?}"))?;
        kids.tell_all(&format!("DIGEST {end}")).map_err(|e| e.to_string())?;
        let lines = kids.expect_lines("RESULT ", &[0, 1, 2]).map_err(|e| e.to_string())?;
        kids.tell_all("EXIT").map_err(|e| e.to_string())?;
        let results = bench::parse_results(&lines)?;
        let agree = results.windows(2).all(|w| w[0]["digest"] == w[1]["digest"] && w[0]["count"] == w[1]["count"]);
        Ok(json!({
            "transport": args.transport, "end": end, "agree": agree,
            "intact": results.iter().all(|r| r["bad"].is_null()),
            "holds_every_ack": results.iter().all(|r| r["count"] == end),
            "victim_rejoined": results[VICTIM]["rejoins"] == 1,
            "members": results,
        }))
    })();
    drop(kids);
    for i in 0..N as u32 {
        let _ = std::fs::remove_dir_all(dir_of(&group, i));
    }
    spindle_sst::transport::shm::remove_stale_files();
    result
}
