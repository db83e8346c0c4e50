//! A writer process of a DDS topic is `kill -9`'d mid-stream; every surviving
//! reader must hold the same sequence of samples (over shm and tcp, at the
//! ordered, volatile and logged levels).
//!
//! Four participant processes (copies of this test binary running the ignored
//! `member` test): 0 and 1 write the topic (and read it), 2 and 3 read it. All
//! write or read for `seconds`; then participant 1 is killed with SIGKILL while it
//! writes; the others go on for as long again, then participant 0 writes a last
//! sample that marks the end. Each survivor digests the samples it delivered up to
//! that marker (writer, writer's number, payload), and the test checks that the
//! digests agree and that the survivors' final view no longer has participant 1.
//! Bounded: every wait has a deadline, the members die with the test, their shm
//! files and logs are removed.

use bench::mcast::Digest;
use bench::MemberArgs;
use serde::{Deserialize, Serialize};
use serde_json::json;
use spindle_dds::DdsConfig;
use spindle_dds::DomainParticipant;
use spindle_dds::{History, Level, Qos};
use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_sst::sync::lock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One run's settings, handed to the member processes.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Args {
    /// shm or tcp.
    transport: String,
    /// The topic's QoS level (an ordered one: agreement is promised for those only).
    qos: Level,
    /// Seconds of writing before the kill, and again after it.
    seconds: f64,
    /// Where the logged level keeps its logs.
    log_dir: std::path::PathBuf,
}

const N: usize = 4;
const VICTIM: usize = 1;
const END: u64 = u64::MAX;

#[test]
fn killing_a_writer_leaves_the_surviving_readers_in_agreement() {
    for (transport, qos) in [("shm", Level::Ordered), ("tcp", Level::Volatile), ("shm", Level::Logged)] {
        let log_dir = std::env::temp_dir().join(format!("dds-failover-{}-{transport}", std::process::id()));
        let args = Args { transport: transport.into(), qos, seconds: 0.7, log_dir };
        let v = parent(&args).unwrap_or_else(|e| panic!("{transport} {qos:?}: {e}"));
        assert_eq!(v["digest_agree"], true, "{v}");
        assert_eq!(v["ended"], true, "{v}");
        assert_eq!(v["victim_removed"], true, "{v}");
        assert_eq!(v["exited_ok"], true, "{v}");
        assert!(v["samples"].as_u64().is_some_and(|n| n > 0), "{v}");
    }
}

/// A participant process of the test above (started by it; by hand it does nothing).
#[test]
#[ignore = "a member process: killing_a_writer_leaves_the_surviving_readers_in_agreement starts it"]
fn member() {
    bench::run_test_member(child);
}

#[derive(Default)]
struct Seen {
    digest: Digest,
    count: u64,
    end: bool,
}

fn child(args: &Args, member: &MemberArgs, id: u32) -> Result<(), String> {
    let group = member.group_config(id, &args.transport, Duration::from_millis(100), Duration::from_millis(1000))?;
    let mut cfg = DdsConfig::new(group);
    cfg.log_dir = args.log_dir.clone();
    let p = DomainParticipant::new(cfg).map_err(|e| e.to_string())?;
    if !p.group().wait_for_members(N, Duration::from_secs(60)) {
        return Err("the domain did not reach 4 participants".into());
    }
    let qos = Qos { level: args.qos, history: History::KeepLast(64), ..Qos::default() }.max_sample_bytes(64);
    let topic = p.topic::<(u32, u64, String)>("stream", qos).map_err(|e| e.to_string())?;
    let reader = p.create_reader(&topic, topic.qos()).map_err(|e| e.to_string())?;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s2 = seen.clone();
    reader.on_data_available(move |s| {
        let mut g = lock(&s2);
        if g.end {
            return;
        }
        if s.data.1 == END {
            g.end = true;
            return;
        }
        g.digest.add(s.info.writer.node.0 as u64);
        g.digest.add(s.info.seq);
        g.digest.add_bytes(s.data.2.as_bytes());
        g.count += 1;
    });
    let writer = if id <= 1 { Some(p.create_writer(&topic, topic.qos()).map_err(|e| e.to_string())?) } else { None };
    // Everyone's endpoints in the view before the parent starts the clock.
    let ready = p.wait_for_matched("stream", 2, N, Duration::from_secs(60)).is_ok();
    if !ready {
        return Err("the topic did not get its endpoints".into());
    }
    println!("JOINED");
    if testkit::wait_for_parent() != "GO" {
        return Err("expected GO".into());
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<(), String> {
        let w = s.spawn(|| -> Result<(), String> {
            let Some(w) = &writer else { return Ok(()) };
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                w.write(&(id, i, format!("sample {i} of {id}"))).map_err(|e| e.to_string())?;
                i += 1;
                if i % 64 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            Ok(())
        });
        let line = testkit::wait_for_parent(); // STOP
        stop.store(true, Ordering::Relaxed);
        w.join().map_err(|_| "writer panicked".to_string())??;
        if line != "STOP" {
            return Err(format!("expected STOP, got {line:?}"));
        }
        Ok(())
    })?;
    if id == 0 {
        let w = writer.as_ref().ok_or("no writer")?;
        w.write(&(id, END, String::new())).map_err(|e| e.to_string())?;
    }
    let ended = testkit::poll_until(Duration::from_secs(60), Duration::from_millis(5), || lock(&seen).end);
    let g = lock(&seen);
    let members: Vec<u32> = p.group().members().iter().map(|m| m.0).collect();
    let v = json!({
        "node": id, "ended": ended, "count": g.count, "digest": format!("{:016x}", g.digest.0),
        "members": members, "views": p.group().metrics().views_installed, "status": format!("{:?}", reader.status()),
    });
    drop(g);
    println!("RESULT {v}");
    testkit::wait_for_parent();
    Ok(())
}

/// Runs the four participants, kills one, and returns the run's summary.
fn parent(args: &Args) -> Result<serde_json::Value, String> {
    spindle_sst::transport::shm::remove_stale_files();
    let mut kids = bench::start_test_members(N, "member", args, Duration::from_secs(240), &[])?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    kids.kill(VICTIM);
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let (results, exited_ok) = bench::stop_survivors(kids, N, VICTIM, "STOP")?;
    spindle_sst::transport::shm::remove_stale_files();
    let _ = std::fs::remove_dir_all(&args.log_dir);
    let agree = results.windows(2).all(|w| w[0]["digest"] == w[1]["digest"] && w[0]["count"] == w[1]["count"]);
    let ended = results.iter().all(|r| r["ended"] == true);
    let victim_gone = results.iter().all(|r| r["members"].as_array().is_some_and(|m| !m.contains(&json!(VICTIM))));
    let line = json!({
        "transport": args.transport, "qos": args.qos.name(), "digest_agree": agree, "ended": ended,
        "victim_removed": victim_gone, "exited_ok": exited_ok, "samples": results[0]["count"],
        "secs": started.elapsed().as_secs_f64(), "survivors": results,
    });
    eprintln!("{line}");
    Ok(line)
}
