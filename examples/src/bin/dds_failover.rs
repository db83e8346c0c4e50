//! dds_failover: a writer process of a DDS topic is `kill -9`'d mid-stream; every
//! surviving reader must hold the same sequence of samples.
//!
//! ```text
//! cargo run --release -p examples --bin dds_failover -- --transport shm|tcp --qos ordered|volatile|logged
//! ```
//!
//! Four participant processes: 0 and 1 write the topic (and read it), 2 and 3 read
//! it. All write or read for `--seconds`; then participant 1 is killed with SIGKILL
//! while it writes; the others go on for as long again, then participant 0 writes a
//! last sample that marks the end. Each survivor digests the samples it delivered
//! up to that marker (writer, writer's number, payload), and the run checks that the
//! digests agree and that the survivors' final view no longer has participant 1.
//! One JSON line; exit status 0 only if everything holds. Bounded: every wait has a
//! deadline, the children die with this process, their shm files are swept.
#![forbid(unsafe_code)]

use clap::Parser;
use dds::config::DdsConfig;
use dds::qos::{History, Level, Qos};
use dds::DomainParticipant;
use examples::mcast::Digest;
use examples::{err, out};
use serde_json::json;
use testkit::{TransportKind};
use sst::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser, Debug, Clone)]
#[command(about = "Kill -9 a DDS writer mid-stream; the surviving readers must agree")]
struct Args {
    /// Transport: shm or tcp.
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// QoS level of the topic (ordered, volatile, logged).
    #[arg(long, default_value = "ordered")]
    qos: Level,
    /// Seconds of writing before the kill, and again after it.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// (internal) this process is participant `ID`.
    #[arg(long, hide = true)]
    child: Option<u32>,
    /// (internal) every participant's control port.
    #[arg(long, hide = true, value_delimiter = ',')]
    ports: Vec<u16>,
}

const N: usize = 4;
const VICTIM: usize = 1;
const END: u64 = u64::MAX;

fn main() {
    let args = Args::parse();
    if args.qos == Level::Unordered {
        err("dds_failover: agreement is promised for ordered levels only");
        std::process::exit(2);
    }
    examples::run_parent_or_member("dds_failover", args.child, |id| child(&args, id), || parent(&args))
}

fn log_dir() -> std::path::PathBuf {
    std::env::var_os("DDS_FAILOVER_LOG_DIR")
        .map(Into::into)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("dds-failover-{}", std::process::id())))
}

#[derive(Default)]
struct Seen {
    digest: Digest,
    count: u64,
    end: bool,
}

fn child(args: &Args, id: u32) -> Result<(), String> {
    let group = examples::child_member_config(
        &args.ports,
        id,
        &args.transport,
        Duration::from_millis(100),
        Duration::from_millis(1000),
    )?;
    let mut cfg = DdsConfig::new(group);
    cfg.log_dir = log_dir();
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
        let mut g = s2.lock().unwrap_or_else(|p| p.into_inner());
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
    let ready = p.wait_for_matched("stream", 2, N, Duration::from_secs(60));
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
    let ended = testkit::poll_until(Duration::from_secs(60), Duration::from_millis(5), || {
        seen.lock().unwrap_or_else(|p| p.into_inner()).end
    });
    let g = seen.lock().unwrap_or_else(|p| p.into_inner());
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

fn parent(args: &Args) -> Result<bool, String> {
    testkit::catch_interrupts();
    sst::transport::shm::remove_stale_files();
    let dir = log_dir();
    let mut kids = examples::start_members(
        N,
        TransportKind::Shm,
        Duration::from_secs(240),
        &[],
        &[],
        &[("DDS_FAILOVER_LOG_DIR", &dir)],
    )?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    kids.kill(VICTIM);
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let survivors: Vec<usize> = (0..N).filter(|i| *i != VICTIM).collect();
    for &i in &survivors {
        kids.tell(i, "STOP").map_err(|e| e.to_string())?;
    }
    let lines = kids.expect_lines("RESULT ", &survivors).map_err(|e| e.to_string())?;
    for &i in &survivors {
        kids.tell(i, "EXIT").map_err(|e| e.to_string())?;
    }
    let exited_ok = kids.wait_all_but(&[VICTIM]).map_err(|e| e.to_string())?;
    drop(kids);
    sst::transport::shm::remove_stale_files();
    let _ = std::fs::remove_dir_all(&dir);
    let results = examples::parse_results(&lines)?;
    let agree = results.windows(2).all(|w| w[0]["digest"] == w[1]["digest"] && w[0]["count"] == w[1]["count"]);
    let ended = results.iter().all(|r| r["ended"] == true);
    let victim_gone = results.iter().all(|r| r["members"].as_array().is_some_and(|m| !m.contains(&json!(VICTIM))));
    let line = json!({
        "bench": "dds_failover", "transport": args.transport, "qos": args.qos.name(),
        "digest_agree": agree, "ended": ended, "victim_removed": victim_gone,
        "samples": results[0]["count"], "secs": started.elapsed().as_secs_f64(), "survivors": results,
    });
    out(&line.to_string());
    Ok(agree && ended && victim_gone && exited_ok)
}
