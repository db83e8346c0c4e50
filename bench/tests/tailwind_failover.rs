//! The primary of a Tailwind log is `kill -9`'d while it appends; the new primary's
//! log must hold every acknowledged record, in order, and nothing that was never
//! appended. Ten consecutive runs over shm and ten over tcp.
//!
//! Four member processes (copies of this test binary running the ignored `member`
//! test), replication factor 3 (the primary and two backups; the fourth member
//! replaces the killed one and is re-seeded). Member 0 appends record 0, 1, 2, ...
//! (each one's bytes a function of its number) and prints each acknowledgement;
//! after `acks` of them (plus an extra that moves from run to run, up to as many
//! again) it is killed with SIGKILL mid-stream. The new primary appends `after`
//! more records; then every survivor reads its whole log and checks that record
//! `i` is record `i`'s bytes for every `i`, and the test checks that:
//! - every acknowledgement seen is in the log (count > last ack seen);
//! - the survivors hold the same records (count and digest agree);
//! - no record differs from what was appended at its number;
//! - the fourth member was re-seeded.
//!
//! Bounded: every wait has a deadline, the members die with the test, their shm
//! files and log directories are removed.

use bench::mcast::Digest;
use bench::MemberArgs;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use spindle_sst::sync::lock;
use spindle_tailwind::service::{Lsn, Recovery, TailwindConfig, TailwindLog};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::ChildSet;

/// One run's settings, handed to the member processes.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Args {
    /// shm or tcp.
    transport: String,
    /// Acknowledgements seen before the kill (plus an extra up to as many).
    acks: u64,
    /// Records the new primary appends after the failover.
    after: u64,
    /// Largest record (records are 8 bytes up to this, varying).
    max_record: u64,
    /// Buffer (segment) bytes: small, so that segments rotate during the stream.
    buffer: usize,
}

const N: usize = 4;
const VICTIM: usize = 0;

/// Record `i`'s bytes: its number, then a pattern of a length that varies.
fn record(i: u64, max: u64) -> Vec<u8> {
    let len = 8 + (i.wrapping_mul(2654435761) % max.saturating_sub(8).max(1)) as usize;
    let mut v = i.to_le_bytes().to_vec();
    v.extend((8..len).map(|j| (i as usize).wrapping_mul(131).wrapping_add(j) as u8));
    v
}

#[test]
fn killing_the_primary_mid_stream_loses_no_acknowledged_append() {
    const RUNS: u32 = 10;
    for transport in ["shm", "tcp"] {
        let args = Args { transport: transport.into(), acks: 2000, after: 300, max_record: 300, buffer: 64 * 1024 };
        spindle_sst::transport::shm::remove_stale_files();
        let mut failovers = Vec::new();
        for run in 0..RUNS {
            let v = one_run(&args, run).unwrap_or_else(|e| panic!("{transport}: {e}"));
            eprintln!("{v}");
            assert_eq!(v["ok"], true, "{v}");
            assert_eq!(v["holds_every_ack"], true, "{v}");
            assert_eq!(v["records_intact"], true, "{v}");
            assert!(v["reseeded"].as_u64().is_some_and(|n| n > 0), "the fourth member was re-seeded: {v}");
            failovers.push(v["failover_secs"].as_f64().unwrap_or(0.0));
        }
        eprintln!("{transport}: {RUNS} clean runs, failover seconds {failovers:?}");
    }
}

/// A member process of the test above (started by it; by hand it does nothing).
#[test]
#[ignore = "a member process: killing_the_primary_mid_stream_loses_no_acknowledged_append starts it"]
fn member() {
    bench::run_test_member(child);
}

fn dir_of(group: &str, id: u32) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tw-failover-{group}-{id}"))
}

fn child(args: &Args, member: &MemberArgs, id: u32) -> Result<(), String> {
    // RUST_LOG=spindle_tailwind=debug shows a member's recovery steps on its stderr.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let group = member.group_config(id, &args.transport, Duration::from_millis(100), Duration::from_millis(800))?;
    let mut cfg = TailwindConfig::new(dir_of(&group.name, id));
    cfg.buffer = args.buffer;
    let log = TailwindLog::start(group, cfg).map_err(|e| e.to_string())?;
    let recovered: Arc<Mutex<Option<Recovery>>> = Arc::default();
    let r2 = recovered.clone();
    log.on_recovered(move |r| *lock(&r2) = Some(r.clone()));
    if !log.group().wait_for_members(N, Duration::from_secs(60)) {
        return Err("the group did not reach 4 members".into());
    }
    if log.wait_for_primary(Duration::from_secs(60)).is_none() {
        return Err("no primary".into());
    }
    println!("JOINED");
    if testkit::wait_for_parent() != "GO" {
        return Err("expected GO".into());
    }
    if id as usize == VICTIM {
        // Append until killed (bounded: the parent kills well before this ends).
        let mut stdout = std::io::stdout().lock();
        let until = Instant::now() + Duration::from_secs(120);
        let mut i = 0u64;
        while Instant::now() < until {
            let lsn = log.append(&record(i, args.max_record)).map_err(|e| format!("append {i}: {e}"))?;
            if lsn != Lsn(i) {
                return Err(format!("append {i} got number {lsn:?}"));
            }
            writeln!(stdout, "ACK {i}").map_err(|e| e.to_string())?;
            stdout.flush().map_err(|e| e.to_string())?;
            i += 1;
        }
        return Err("the victim was never killed".into());
    }
    if testkit::wait_for_parent() != "CHECK" {
        return Err("expected CHECK".into());
    }
    // Wait for the new primary (not the victim).
    let new_primary = testkit::poll_until(Duration::from_secs(60), Duration::from_millis(5), || {
        log.primary().is_some_and(|p| p.0 as usize != VICTIM)
    });
    if !new_primary {
        // What this member saw, for the run's report: its view and the log's.
        let g = log.group();
        let view = g.view().map(|v| format!("view {:?} of {:?}", v.id(), v.members()));
        return Err(format!(
            "no new primary within 60 s ({}; removal {:?}; rejoining {:?}; stopped {:?}; rejoins {}; the log's \
             members {:?}, its primary {:?})",
            view.unwrap_or_else(|| "no view".into()),
            g.removal().map(|r| r.to_string()),
            g.rejoining(),
            g.stopped(),
            g.metrics().rejoins,
            log.members(),
            log.primary()
        ));
    }
    if log.is_primary() {
        // The member is the primary before its recovery hook has run: wait for it.
        if !testkit::poll_until(Duration::from_secs(60), Duration::from_millis(1), || lock(&recovered).is_some()) {
            return Err("the primary's recovery hook did not run within 60 s".into());
        }
        let next = lock(&recovered).as_ref().map(|r| r.next.0).ok_or("no recovery")?;
        for i in next..next + args.after {
            let lsn =
                log.append(&record(i, args.max_record)).map_err(|e| format!("append {i} after the failover: {e}"))?;
            if lsn != Lsn(i) {
                return Err(format!("append {i} got number {lsn:?}"));
            }
        }
        println!("STAGE primary {}", next + args.after);
    } else {
        println!("STAGE backup 0");
    }
    let end: u64 = testkit::wait_for_parent()
        .strip_prefix("DIGEST ")
        .and_then(|n| n.parse().ok())
        .ok_or("expected DIGEST <end>")?;
    // Read the whole log (a backup's open buffer holds every acknowledged record).
    let read_log = || -> Result<(u64, Digest, Option<String>), String> {
        let (mut count, mut digest, mut bad) = (0u64, Digest::default(), None::<String>);
        for r in log.read_from(Lsn(0)) {
            let (lsn, bytes) = r.map_err(|e| e.to_string())?;
            if bytes != record(lsn.0, args.max_record) && bad.is_none() {
                bad = Some(format!("record {} is not what was appended at that number", lsn.0));
            }
            digest.add_bytes(&bytes);
            count += 1;
        }
        Ok((count, digest, bad))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (count, digest, bad) = loop {
        let r = read_log()?;
        if r.0 >= end || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let rec = lock(&recovered).clone();
    let v = json!({
        "node": id, "count": count, "digest": format!("{:016x}", digest.0), "bad": bad,
        "primary": log.is_primary(),
        "recovered_next": rec.as_ref().map(|r| r.next.0), "dropped": rec.as_ref().map(|r| r.dropped),
        "reseeded": rec.as_ref().map(|r| r.reseeded), "segments": log.segments().len(),
    });
    println!("RESULT {v}");
    testkit::wait_for_parent();
    Ok(())
}

fn one_run(args: &Args, run: u32) -> Result<Value, String> {
    let mut kids = bench::start_test_members(N, "member", args, Duration::from_secs(240), &[])?;
    let group = kids.group().to_string();
    let cleanup = |kids: ChildSet| {
        drop(kids);
        for i in 0..N as u32 {
            let _ = std::fs::remove_dir_all(dir_of(&group, i));
        }
    };
    let started = Instant::now();
    // A kill point that moves from run to run.
    let jitter =
        (started.elapsed().as_nanos() as u64 ^ std::process::id() as u64 ^ (run as u64 * 7919)) % args.acks.max(1);
    let kill_at = args.acks + jitter;
    let mut last_ack = 0u64;
    let stream = loop {
        match kids.expect_lines("ACK ", &[VICTIM]) {
            Ok(l) => {
                last_ack = l[0].parse().map_err(|_| format!("bad ack line {l:?}"))?;
                if last_ack >= kill_at {
                    break Ok(());
                }
            }
            Err(e) => break Err(e.to_string()),
        }
    };
    if let Err(e) = stream {
        cleanup(kids);
        return Err(format!("run {run}: the stream stopped before the kill: {e}"));
    }
    let stream_secs = started.elapsed().as_secs_f64();
    kids.kill(VICTIM);
    let killed = Instant::now();
    let survivors: Vec<usize> = (0..N).filter(|i| *i != VICTIM).collect();
    let result = (|| -> Result<Value, String> {
        for &i in &survivors {
            kids.tell(i, "CHECK").map_err(|e| e.to_string())?;
        }
        let stages = kids.expect_lines("STAGE ", &survivors).map_err(|e| e.to_string())?;
        let failover_secs = killed.elapsed().as_secs_f64();
        let end: u64 = stages
            .iter()
            .find_map(|s| s.strip_prefix("primary ").and_then(|n| n.parse().ok()))
            .ok_or("no survivor became the primary")?;
        for &i in &survivors {
            kids.tell(i, &format!("DIGEST {end}")).map_err(|e| e.to_string())?;
        }
        let lines = kids.expect_lines("RESULT ", &survivors).map_err(|e| e.to_string())?;
        for &i in &survivors {
            kids.tell(i, "EXIT").map_err(|e| e.to_string())?;
        }
        let exited_ok = kids.wait_all_but(&[VICTIM]).map_err(|e| e.to_string())?;
        let results = bench::parse_results(&lines)?;
        let agree = results.windows(2).all(|w| w[0]["digest"] == w[1]["digest"] && w[0]["count"] == w[1]["count"]);
        let none_bad = results.iter().all(|r| r["bad"].is_null());
        let count = results[0]["count"].as_u64().unwrap_or(0);
        let primary = results.iter().find(|r| r["primary"] == true).cloned().unwrap_or(Value::Null);
        let recovered_next = primary["recovered_next"].as_u64().unwrap_or(0);
        let holds_acked = recovered_next > last_ack && count == end;
        Ok(json!({
            "transport": args.transport, "run": run,
            "ok": agree && none_bad && holds_acked && exited_ok,
            "agree": agree, "records_intact": none_bad, "holds_every_ack": holds_acked,
            "last_ack_seen": last_ack, "recovered_next": recovered_next, "dropped": primary["dropped"],
            "reseeded": primary["reseeded"], "count": count, "stream_secs": bench::round(stream_secs, 2),
            "failover_secs": bench::round(failover_secs, 2), "survivors": results,
        }))
    })();
    cleanup(kids);
    spindle_sst::transport::shm::remove_stale_files();
    result
}
