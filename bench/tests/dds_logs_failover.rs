//! A domain with two topics and two replicated logs (`spindle_dds::ReplicatedLog`, one `LogAck::Disk`,
//! one `LogAck::Memory`) whose primaries are different participants; the primary of
//! the first log is `kill -9`'d while every
//! participant writes both topics' samples and appends to both logs. Topics and
//! logs must all go on, and the logs must keep every acknowledged append (over shm
//! and tcp).
//!
//! Four participant processes (copies of this test binary running the ignored
//! `member` test). The parent picks the logs' names so that log `a`'s primary is
//! the victim and log `b`'s is another participant (the replicas of a log follow
//! from its name, `spindle_dds::log_members`). Every participant writes topic `t1`
//! (0 and 1) or `t2` (2 and 3) and reads both, and appends to both logs, one
//! record at a time, noting the records acknowledged. After the kill they go on for
//! as long again; then each writes an end marker and, once the logs take appends
//! after the failover, every survivor reports what it delivered, the records it had
//! acknowledged, and, at a replica, the logs' contents. The test checks that:
//! - the survivors delivered the same topic samples, past the kill;
//! - every acknowledged record is in each log at every surviving replica, once;
//! - the replicas hold the same log;
//! - both logs took appends after the kill.
//!
//! Bounded: every wait has a deadline, the members die with the test, their shm
//! files and segment directories are removed.

use bench::mcast::Digest;
use bench::MemberArgs;
use serde::{Deserialize, Serialize};
use serde_json::json;
use spindle_dds::DdsConfig;
use spindle_dds::DomainParticipant;
use spindle_dds::{log_members, LogAck, LogQos};
use spindle_dds::{History, Qos};
use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use spindle_tailwind::service::Lsn;
use spindle_views::view::View;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Args {
    transport: String,
    seconds: f64,
    log_dir: std::path::PathBuf,
    /// The log whose primary is the victim, and the other one.
    a: String,
    b: String,
}

const N: usize = 4;
const VICTIM: usize = 1;
const END: u64 = u64::MAX;

/// Log `a` (the victim's) acknowledges once on a majority's disks, `b` in memory.
fn qos(ack: LogAck) -> LogQos {
    LogQos { replicas: 3, buffer_bytes: 256 << 10, buffers: 2, ack }
}

/// Log names for the four-member view: `a`'s primary is the victim, `b`'s not.
fn names() -> (String, String) {
    let view = View::initial((0..N as u32).map(NodeId).collect());
    let primary = |n: &String| log_members(n, 3, &view)[0].0 as usize;
    let candidates: Vec<String> = (0..64).map(|i| format!("orders-{i}")).collect();
    let a = candidates.iter().find(|n| primary(n) == VICTIM).expect("one of 64 names");
    let b = candidates.iter().find(|n| primary(n) != VICTIM).expect("one of 64 names");
    (a.clone(), b.clone())
}

#[test]
fn killing_a_log_primary_keeps_topics_and_logs_going() {
    let (a, b) = names();
    for transport in ["shm", "tcp"] {
        let log_dir = std::env::temp_dir().join(format!("dds-logs-failover-{}-{transport}", std::process::id()));
        let args = Args { transport: transport.into(), seconds: 0.8, log_dir, a: a.clone(), b: b.clone() };
        let v = parent(&args).unwrap_or_else(|e| panic!("{transport}: {e}"));
        for check in
            ["primaries_apart", "topics_agree", "ended", "acked_kept", "replicas_agree", "appended_after", "exited_ok"]
        {
            assert_eq!(v[check], true, "{check}: {v}");
        }
    }
}

/// A participant process of the test above (started by it; by hand it does nothing).
#[test]
#[ignore = "a member process: killing_a_log_primary_keeps_topics_and_logs_going starts it"]
fn member() {
    bench::run_test_member(child);
}

/// What a participant delivered of one topic (each topic has its own order).
#[derive(Default)]
struct Seen {
    digest: Digest,
    count: u64,
    ends: u32,
}

fn child(args: &Args, member: &MemberArgs, id: u32) -> Result<(), String> {
    let e = |e: spindle_dds::DdsError| e.to_string();
    let group = member.group_config(id, &args.transport, Duration::from_millis(100), Duration::from_millis(1000))?;
    let mut cfg = DdsConfig::new(group);
    cfg.log_dir = args.log_dir.clone();
    let p = DomainParticipant::new(cfg).map_err(e)?;
    if !p.group().wait_for_members(N, Duration::from_secs(60)) {
        return Err("the domain did not reach 4 participants".into());
    }
    let tq = Qos { history: History::KeepLast(64), ..Qos::ordered() }.max_sample_bytes(64);
    let seen: [Arc<Mutex<Seen>>; 2] = Default::default();
    let mut readers = Vec::new();
    let mut writer = None;
    for (k, name) in ["t1", "t2"].into_iter().enumerate() {
        let topic = p.topic::<(u32, u64)>(name, tq).map_err(e)?;
        let r = p.create_reader(&topic, topic.qos()).map_err(e)?;
        let s2 = seen[k].clone();
        r.on_data_available(move |s| {
            let mut g = lock(&s2);
            if s.data.1 == END {
                g.ends += 1;
                return;
            }
            g.digest.add(s.data.0 as u64);
            g.digest.add(s.data.1);
            g.count += 1;
        });
        readers.push(r);
        if (name == "t1") == (id <= 1) {
            writer = Some(p.create_writer(&topic, topic.qos()).map_err(e)?);
        }
    }
    let logs =
        [p.create_log(&args.a, qos(LogAck::Disk)).map_err(e)?, p.create_log(&args.b, qos(LogAck::Memory)).map_err(e)?];
    let matched = ["t1", "t2"].iter().all(|t| p.wait_for_matched(t, 2, N, Duration::from_secs(60)).is_ok());
    if !matched || logs.iter().any(|l| l.ready(Duration::from_secs(60)).is_none()) {
        return Err("the topics or logs did not get ready".into());
    }
    let before: Vec<Option<u32>> = logs.iter().map(|l| l.primary().map(|n| n.0)).collect();
    println!("JOINED");
    if testkit::wait_for_parent() != "GO" {
        return Err("expected GO".into());
    }
    let stop = AtomicBool::new(false);
    let acked: [Mutex<Vec<String>>; 2] = Default::default();
    std::thread::scope(|s| -> Result<(), String> {
        let w = s.spawn(|| -> Result<(), String> {
            let w = writer.as_ref().ok_or("no writer")?;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                w.write(&(id, i)).map_err(|e| e.to_string())?;
                i += 1;
                std::thread::sleep(Duration::from_micros(500));
            }
            Ok(())
        });
        let appenders: Vec<_> = (0..2)
            .map(|k| {
                let (log, acked, stop) = (&logs[k], &acked[k], &stop);
                s.spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let rec = format!("{id}-{i}");
                        // A failed append (a failover under way) may or may not be
                        // in the log; only acknowledged ones are checked.
                        if log.append(rec.as_bytes()).is_ok() {
                            lock(acked).push(rec);
                        }
                        i += 1;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        let line = testkit::wait_for_parent(); // STOP
        stop.store(true, Ordering::Relaxed);
        for a in appenders {
            a.join().map_err(|_| "an appender panicked".to_string())?;
        }
        w.join().map_err(|_| "the writer panicked".to_string())??;
        if line != "STOP" {
            return Err(format!("expected STOP, got {line:?}"));
        }
        Ok(())
    })?;
    let w = writer.as_ref().ok_or("no writer")?;
    w.write(&(id, END)).map_err(e)?;
    // The end markers of the topics' surviving writers: one in t1, two in t2.
    let ended = testkit::poll_until(Duration::from_secs(60), Duration::from_millis(5), || {
        lock(&seen[0]).ends >= 1 && lock(&seen[1]).ends >= 2
    });
    // A last append of each log, once it takes them: the log goes on after the kill.
    let last: Vec<bool> = logs.iter().map(|l| l.append(format!("last-{id}").as_bytes()).is_ok()).collect();
    let contents = |k: usize| -> serde_json::Value {
        if !logs[k].is_replica() {
            return serde_json::Value::Null;
        }
        let recs: Result<Vec<String>, _> =
            logs[k].read_from(Lsn(0)).map(|r| r.map(|(_, b)| String::from_utf8_lossy(&b).into_owned())).collect();
        match recs {
            Ok(r) => json!(r),
            Err(err) => json!(format!("unreadable: {err}")),
        }
    };
    let (g1, g2) = (lock(&seen[0]), lock(&seen[1]));
    let v = json!({
        "node": id, "ended": ended, "count": [g1.count, g2.count],
        "digest": [format!("{:016x}", g1.digest.0), format!("{:016x}", g2.digest.0)],
        "acked_a": *lock(&acked[0]), "acked_b": *lock(&acked[1]), "last": last,
        "before": before, "after": logs.iter().map(|l| l.primary().map(|n| n.0)).collect::<Vec<_>>(),
    });
    drop((g1, g2));
    // Every survivor's last appends are in before the contents are read.
    println!("RESULT {v}");
    if testkit::wait_for_parent() != "READ" {
        return Err("expected READ".into());
    }
    println!("LOGS {}", json!({"node": id, "log_a": contents(0), "log_b": contents(1)}));
    testkit::wait_for_parent();
    Ok(())
}

/// Runs the four participants, kills the primary of log `a`, and returns the
/// run's summary.
fn parent(args: &Args) -> Result<serde_json::Value, String> {
    spindle_sst::transport::shm::remove_stale_files();
    let mut kids = bench::start_test_members(N, "member", args, Duration::from_secs(240), &[])?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    kids.kill(VICTIM);
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let survivors: Vec<usize> = (0..N).filter(|i| *i != VICTIM).collect();
    for &i in &survivors {
        kids.tell(i, "STOP").map_err(|e| e.to_string())?;
    }
    let results = bench::parse_results(&kids.expect_lines("RESULT ", &survivors).map_err(|e| e.to_string())?)?;
    for &i in &survivors {
        kids.tell(i, "READ").map_err(|e| e.to_string())?;
    }
    let logs = bench::parse_results(&kids.expect_lines("LOGS ", &survivors).map_err(|e| e.to_string())?)?;
    for &i in &survivors {
        kids.tell(i, "EXIT").map_err(|e| e.to_string())?;
    }
    let exited_ok = kids.wait_all_but(&[VICTIM]).map_err(|e| e.to_string())?;
    drop(kids);
    spindle_sst::transport::shm::remove_stale_files();
    let _ = std::fs::remove_dir_all(&args.log_dir);
    let topics_agree = results.windows(2).all(|w| w[0]["digest"] == w[1]["digest"] && w[0]["count"] == w[1]["count"]);
    let ended = results.iter().all(|r| r["ended"] == true);
    let appended_after = results.iter().all(|r| r["last"] == json!([true, true]));
    let mut replicas_agree = true;
    // Each record a replica holds twice, or an acknowledged one it lacks, by
    // log and replica (at most a few of each, so a failure names them).
    let mut faults = Vec::new();
    let mut sizes = Vec::new();
    for (log, acked) in [("log_a", "acked_a"), ("log_b", "acked_b")] {
        let held: Vec<(&serde_json::Value, &Vec<serde_json::Value>)> =
            logs.iter().filter_map(|l| Some((&l["node"], l[log].as_array()?))).collect();
        replicas_agree &= held.len() >= 2 && held.windows(2).all(|w| w[0].1 == w[1].1);
        sizes.push(held.first().map_or(0, |h| h.1.len()));
        for (node, h) in &held {
            let mut once = std::collections::HashMap::<&str, usize>::new();
            for r in h.iter().filter_map(|r| r.as_str()) {
                *once.entry(r).or_default() += 1;
            }
            let doubled = once.iter().filter(|(_, n)| **n != 1).map(|(r, n)| format!("{r} x{n}"));
            faults.extend(doubled.take(4).map(|d| format!("{log} at {node}: {d}")));
            for r in &results {
                let Some(mine) = r[acked].as_array() else {
                    faults.push(format!("{acked} of {} unreadable", r["node"]));
                    continue;
                };
                let lost = mine.iter().filter_map(|x| x.as_str()).filter(|x| !once.contains_key(x));
                let lost: Vec<&str> = lost.collect();
                if !lost.is_empty() {
                    let first = &lost[..lost.len().min(4)];
                    faults.push(format!("{log} at {node} lacks {} acked by {}: {first:?}", lost.len(), r["node"]));
                }
            }
        }
    }
    let acked_kept = faults.is_empty();
    let line = json!({
        "transport": args.transport, "topics_agree": topics_agree, "ended": ended, "acked_kept": acked_kept,
        "replicas_agree": replicas_agree, "appended_after": appended_after, "exited_ok": exited_ok,
        "samples": results[0]["count"], "log_records": sizes, "faults": faults, "secs": started.elapsed().as_secs_f64(),
        "primaries_before": results[0]["before"], "primaries_after": results[0]["after"],
        "primaries_apart": results.iter().all(|r| r["before"][0] == json!(VICTIM) && r["before"][1] != json!(VICTIM)),
    });
    eprintln!("{line}");
    Ok(line)
}
