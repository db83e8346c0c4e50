//! `dds_clients --stall`: a client reader in its own process is stopped with
//! SIGSTOP while member 0 writes as fast as it can; its member drops it, the
//! writer's rate while it is stopped is compared with its rate before, and after
//! SIGCONT the client moves on and resumes. The client process is this program
//! with `--stall-client` (it reads for `--client-secs`, then prints one JSON line).

use super::{client, Args, VICTIM};
use bench::round;
use serde_json::{json, Value};
use spindle_dds::Sample;
use spindle_sst::sync::atomic::{AtomicU64, Ordering};
use spindle_sst::sync::lock;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::TransportKind;

/// Seconds of each measured window.
const WINDOW: f64 = 1.5;
/// How long the client process reads before it reports.
const CLIENT_SECS: f64 = 9.0;

/// What the stalled client saw: samples, the first and last `topic_seq`, and
/// whether every one came after the one before.
#[derive(Default)]
struct Seen {
    count: u64,
    first: Option<u64>,
    last: u64,
    in_order: bool,
}

/// The client process: reads `feed` through the members at `contacts`, says
/// READING once samples come, and after `CLIENT_SECS` prints what it saw: its
/// samples, the first and last `topic_seq`, what it was told it lost, its moves.
pub(super) fn client_process(args: &Args) -> Result<(), String> {
    testkit::die_with_parent();
    let start = Instant::now();
    let c = client(args.contacts.clone())?;
    let topic = c.find_topic::<(u64, u64)>("feed").map_err(|e| e.to_string())?;
    let reader = c.create_reader(&topic, topic.qos()).map_err(|e| e.to_string())?;
    let seen = Arc::new(Mutex::new(Seen { in_order: true, ..Seen::default() }));
    let s2 = seen.clone();
    reader.on_data_available(move |s: Sample<(u64, u64)>| {
        let mut g = lock(&s2);
        if g.first.is_some() && s.info.topic_seq <= g.last {
            g.in_order = false;
        }
        g.count += 1;
        g.first.get_or_insert(s.info.topic_seq);
        g.last = s.info.topic_seq;
    });
    let ready = testkit::poll_until(Duration::from_secs(30), Duration::from_millis(5), || lock(&seen).count > 0);
    if !ready {
        return Err("no sample within 30 s".into());
    }
    println!("READING");
    let left = Duration::from_secs_f64(CLIENT_SECS).saturating_sub(start.elapsed());
    std::thread::sleep(left);
    let g = lock(&seen);
    let v = json!({
        "samples": g.count, "first": g.first, "last": g.last, "in_order": g.in_order,
        "lost": reader.status().lost, "moves": c.failovers(), "ended": c.ended().map(|e| e.to_string()),
    });
    println!("{v}");
    Ok(())
}

/// Member 0's count of samples written so far (it answers RATE).
fn written(kids: &mut testkit::ChildSet) -> Result<(Instant, u64), String> {
    kids.tell(0, "RATE").map_err(|e| e.to_string())?;
    let line = kids.expect_lines("RATE ", &[0]).map_err(|e| e.to_string())?;
    let n = line[0].trim().parse().map_err(|_| format!("bad RATE line {:?}", line[0]))?;
    Ok((Instant::now(), n))
}

fn signal(pid: u32, sig: &str) -> Result<(), String> {
    let ok = Command::new("kill").args([sig, &pid.to_string()]).status().map_err(|e| e.to_string())?.success();
    if ok {
        Ok(())
    } else {
        Err(format!("kill {sig} {pid} failed"))
    }
}

/// The run: see the module docs.
pub(super) fn run() -> Result<Value, String> {
    spindle_sst::transport::shm::remove_stale_files();
    let mut kids = bench::start_members(3, TransportKind::Shm, Duration::from_secs(120), &[], &[], &[])?;
    let all: Vec<usize> = (0..3).collect();
    let addrs = kids.expect_lines("LISTEN ", &all).map_err(|e| e.to_string())?;
    let addrs: Vec<SocketAddr> =
        addrs.iter().map(|a| a.parse().map_err(|_| format!("bad address {a:?}"))).collect::<Result<_, _>>()?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let contacts = format!("{},{}", addrs[VICTIM], addrs[2]);
    let mut child = Command::new(exe)
        .args(["--stall-client", "--contacts", &contacts])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| e.to_string())?;
    let pid = child.id();
    let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    // The child exits by itself after CLIENT_SECS, so this read ends.
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    if first != "READING" {
        let _ = child.kill();
        return Err(format!("the client process said {first:?}"));
    }
    let a = written(&mut kids)?;
    std::thread::sleep(Duration::from_secs_f64(WINDOW));
    let b = written(&mut kids)?;
    signal(pid, "-STOP")?;
    std::thread::sleep(Duration::from_secs_f64(2.0 * WINDOW));
    let c = written(&mut kids)?;
    signal(pid, "-CONT")?;
    let report = lines.next().and_then(Result::ok).unwrap_or_default();
    let _ = child.wait();
    for i in 0..3 {
        kids.tell(i, "STOP").map_err(|e| e.to_string())?;
    }
    let results = bench::parse_results(&kids.expect_lines("RESULT ", &all).map_err(|e| e.to_string())?)?;
    kids.tell_all("EXIT").map_err(|e| e.to_string())?;
    let exited_ok = kids.wait_all_but(&[]).map_err(|e| e.to_string())?;
    drop(kids);
    spindle_sst::transport::shm::remove_stale_files();
    let rate = |x: (Instant, u64), y: (Instant, u64)| (y.1 - x.1) as f64 / (y.0 - x.0).as_secs_f64().max(1e-9);
    let (before, stopped) = (rate(a, b), rate(b, c));
    let client: Value = serde_json::from_str(&report).map_err(|e| format!("the client reported {report:?}: {e}"))?;
    let dropped = results.iter().map(|r| r["clients_dropped"].as_u64().unwrap_or(0)).sum::<u64>();
    let span = client["last"].as_u64().zip(client["first"].as_u64()).map(|(l, f)| l - f + 1);
    let accounted = span == client["samples"].as_u64().zip(client["lost"].as_u64()).map(|(s, l)| s + l);
    Ok(json!({
        "writer_per_s_before": round(before, 0), "writer_per_s_stopped": round(stopped, 0),
        "ratio": round(stopped / before.max(1e-9), 3), "clients_dropped": dropped, "client": client,
        "client_resumed": client["moves"].as_u64().is_some_and(|m| m >= 1) && client["in_order"] == true,
        "client_accounted": accounted, "exited_ok": exited_ok,
    }))
}

/// Member 0's count of samples written, shared with the thread that answers RATE.
pub(super) type Written = Arc<AtomicU64>;

/// Answers the parent's RATE lines with `written` until another line comes; returns it.
pub(super) fn answer_rates(written: &Written) -> String {
    loop {
        let line = testkit::wait_for_parent();
        if line != "RATE" {
            return line;
        }
        println!("RATE {}", written.load(Ordering::Relaxed));
    }
}
