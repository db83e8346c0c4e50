//! dds_clients: DDS clients across a member's death, as processes.
//!
//! ```text
//! cargo run --release -p bench --bin dds_clients -- --runs 20
//! ```
//!
//! Each run starts a domain of three member processes over `--transport`. Member
//! 0 writes the Volatile topic `feed` at `--rate` samples/s; every member reads it
//! and serves clients. This process then connects two clients to member 1: a
//! reader (contacts 1, 2) and a writer (contacts 1, 0) that writes as fast as its
//! acknowledgements allow. After `--before` seconds member 1 is killed with
//! SIGKILL; both clients move. The writer goes on for as long again, then waits
//! until every sample it wrote is acknowledged.
//!
//! Checked per run: the client reader's samples are numbered without a gap or a
//! duplicate in the topic's order (`topic_seq`), its status reports nothing lost,
//! and its whole sequence is the one every surviving member delivered (a digest of
//! each sample's writer, number and `topic_seq`, once member 0 stopped writing); each surviving member delivered every sample of the client writer exactly
//! once. Measured: connect → first live sample at the reader, and the failover
//! time (the kill → the first live sample of a later view at the reader). One JSON
//! line per run, then a summary with p50 and max. Exit status 3 if a check failed.
//!
//! With `--stall` the run is another: a client reader in its own process is
//! stopped with SIGSTOP while member 0 writes as fast as it can (see `stall`).
#![forbid(unsafe_code)]

mod stall;

use bench::mcast::Digest;
use bench::{out, round};
use clap::Parser;
use serde_json::{json, Value};
use spindle_dds::DdsConfig;
use spindle_dds::{ClientConfig, DomainClient, DomainParticipant, Sample};
use spindle_dds::{History, Level, Qos};
use spindle_sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spindle_sst::sync::lock;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::TransportKind;

#[derive(Parser, Debug, Clone)]
#[command(about = "DDS clients across a member's kill -9: no gap, exactly once, and how long it takes")]
pub(crate) struct Args {
    /// Runs (each a new domain of three member processes).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Data-plane transport of the members: shm or tcp (clients always use tcp).
    #[arg(long, default_value = "tcp", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Samples per second member 0 writes.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// Seconds before the kill, and again after it.
    #[arg(long, default_value_t = 0.5)]
    before: f64,
    /// The members' failure timeout in milliseconds.
    #[arg(long, default_value_t = 1000)]
    failure_ms: u64,
    /// Print JSON lines only.
    #[arg(long)]
    json: bool,
    /// Stop a client reader (its own process) with SIGSTOP while member 0 writes
    /// flat out: the writer's rate stopped / before, the drop, and the client's
    /// resumption after SIGCONT.
    #[arg(long)]
    stall: bool,
    /// (internal) run as the stalled client process of `--stall`.
    #[arg(long, hide = true)]
    stall_client: bool,
    /// (internal) the stalled client's contacts.
    #[arg(long, hide = true, value_delimiter = ',')]
    contacts: Vec<SocketAddr>,
    #[command(flatten)]
    member: bench::MemberArgs,
}

const N: usize = 3;
pub(crate) const VICTIM: usize = 1;
/// Tags in the samples: member 0's feed and the client writer's.
const FEED: u64 = 0;
const CLIENT: u64 = 1;

fn main() {
    let args = Args::parse();
    if args.runs == 0 || args.rate == 0 || args.rate > 100_000 || args.before <= 0.0 {
        bench::usage("dds_clients", "--runs and --rate (up to 100000) and --before must be positive");
    }
    if args.stall_client {
        bench::finish("dds_clients", stall::client_process(&args).map(|_| true));
    }
    bench::run_parent_or_member("dds_clients", &args.member, |id| member(&args, id), || parent(&args))
}

fn qos(args: &Args) -> Qos {
    // A writer flat out (--stall) fills memory fast: less history there.
    let keep = if args.stall { 200_000 } else { 1 << 20 };
    Qos { level: Level::Volatile, history: History::KeepLast(keep), ..Qos::default() }.max_sample_bytes(32)
}

/// A member: reads `feed` (counting the client writer's samples by number),
/// serves clients, and member 0 writes.
fn member(args: &Args, id: u32) -> Result<(), String> {
    let heartbeat = Duration::from_millis(50);
    let cfg = args.member.group_config(id, &args.transport, heartbeat, Duration::from_millis(args.failure_ms))?;
    let p = DomainParticipant::new(DdsConfig::new(cfg)).map_err(|e| e.to_string())?;
    if !p.group().wait_for_members(N, Duration::from_secs(60)) {
        return Err("the domain did not reach 3 members".into());
    }
    let topic = p.topic::<(u64, u64)>("feed", qos(args)).map_err(|e| e.to_string())?;
    let reader = p.create_reader(&topic, topic.qos()).map_err(|e| e.to_string())?;
    // Client writer (by its key) → how many times each number was delivered; and
    // the digest of the whole order.
    let seen: Arc<Mutex<HashMap<String, HashMap<u64, u32>>>> = Arc::default();
    let order: Arc<Mutex<(Digest, u64)>> = Arc::default();
    let (s2, o2) = (seen.clone(), order.clone());
    reader.on_data_available(move |s: Sample<(u64, u64)>| {
        if s.data.0 == CLIENT {
            *lock(&s2).entry(s.info.writer.to_string()).or_default().entry(s.data.1).or_default() += 1;
        }
        let mut o = lock(&o2);
        fold(&mut o.0, s.info.writer.key(), s.info.seq, s.info.topic_seq);
        o.1 += 1;
    });
    p.serve_clients(&topic, true).map_err(|e| e.to_string())?;
    let writer = if id == 0 { Some(p.create_writer(&topic, topic.qos()).map_err(|e| e.to_string())?) } else { None };
    if p.wait_for_matched("feed", 1, N, Duration::from_secs(60)).is_err() {
        return Err("the topic did not get its endpoints".into());
    }
    println!("JOINED");
    if testkit::wait_for_parent() != "GO" {
        return Err("expected GO".into());
    }
    println!("LISTEN {}", p.group().listen_addr());
    let stop = AtomicBool::new(false);
    let finished = AtomicBool::new(false);
    let count: stall::Written = Arc::default();
    std::thread::scope(|s| -> Result<(), String> {
        let w = s.spawn(|| -> Result<(), String> {
            let Some(w) = &writer else { return Ok(()) };
            let period = Duration::from_secs_f64(1.0 / args.rate as f64);
            let mut next = Instant::now();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                w.write(&(FEED, n)).map_err(|e| e.to_string())?;
                n += 1;
                count.store(n, Ordering::Relaxed);
                if args.stall {
                    continue; // flat out
                }
                next += period;
                if let Some(d) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
            }
            finished.store(true, Ordering::Release);
            Ok(())
        });
        let mut line = stall::answer_rates(&count);
        if line == "HALT" {
            // Stop writing, say how much was written, and wait for STOP.
            stop.store(true, Ordering::Relaxed);
            testkit::poll_until(Duration::from_secs(30), Duration::from_millis(1), || finished.load(Ordering::Acquire));
            println!("HALTED {}", count.load(Ordering::Relaxed));
            line = stall::answer_rates(&count);
        }
        stop.store(true, Ordering::Relaxed);
        w.join().map_err(|_| "the writer panicked".to_string())??;
        // `STOP n`: report once n samples are delivered here (bounded).
        if let Some(n) = line.strip_prefix("STOP ").and_then(|n| n.parse::<u64>().ok()) {
            testkit::poll_until(Duration::from_secs(30), Duration::from_millis(5), || lock(&order).1 >= n);
            line = "STOP".into();
        }
        if line != "STOP" {
            return Err(format!("expected STOP, got {line:?}"));
        }
        Ok(())
    })?;
    let by_writer: Vec<Value> = lock(&seen)
        .iter()
        .map(|(w, counts)| {
            let max = counts.keys().copied().max().unwrap_or(0);
            let twice = counts.values().filter(|c| **c > 1).count();
            json!({"writer": w, "distinct": counts.len(), "max": max, "repeated": twice})
        })
        .collect();
    let dropped = p.group().metrics().clients_dropped;
    let (digest, samples) = *lock(&order);
    let v = json!({
        "node": id, "client_writers": by_writer, "clients_dropped": dropped,
        "digest": format!("{:016x}", digest.0), "samples": samples,
    });
    println!("RESULT {v}");
    testkit::wait_for_parent();
    Ok(())
}

/// Folds one sample's place in the order into a digest: its writer, its number and
/// its `topic_seq`.
fn fold(d: &mut Digest, key: (u64, u32, bool), seq: u64, topic_seq: u64) {
    for x in [key.0, key.1 as u64, key.2 as u64, seq, topic_seq] {
        d.add(x);
    }
}

/// What the client reader saw: (arrival, view, topic_seq, from history, writer,
/// writer's number).
type Seen = Arc<Mutex<Vec<(Instant, u64, u64, bool, (u64, u32, bool), u64)>>>;

fn seen_of(s: &Sample<(u64, u64)>) -> (Instant, u64, u64, bool, (u64, u32, bool), u64) {
    (Instant::now(), s.info.view.0, s.info.topic_seq, s.info.from_history, s.info.writer.key(), s.info.seq)
}

pub(crate) fn client(contacts: Vec<SocketAddr>) -> Result<DomainClient, String> {
    let mut cfg = ClientConfig::new(contacts);
    cfg.connect_timeout = Duration::from_secs(2);
    DomainClient::connect(cfg).map_err(|e| e.to_string())
}

/// One run: a domain, two clients, a kill.
fn run(args: &Args) -> Result<Value, String> {
    spindle_sst::transport::shm::remove_stale_files();
    let mut kids = bench::start_members(N, TransportKind::Shm, Duration::from_secs(120), &[], &[], &[])?;
    let all: Vec<usize> = (0..N).collect();
    let addrs = kids.expect_lines("LISTEN ", &all).map_err(|e| e.to_string())?;
    let addrs: Vec<SocketAddr> =
        addrs.iter().map(|a| a.parse().map_err(|_| format!("bad address {a:?}"))).collect::<Result<_, _>>()?;
    let t0 = Instant::now();
    let rc = client(vec![addrs[VICTIM], addrs[2]])?;
    let topic = rc.find_topic::<(u64, u64)>("feed").map_err(|e| e.to_string())?;
    let reader = rc.create_reader(&topic, topic.qos()).map_err(|e| e.to_string())?;
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    reader.on_data_available(move |s: Sample<(u64, u64)>| lock(&s2).push(seen_of(&s)));
    // What came before the listener waits in the queue (the history): it goes first.
    let early: Vec<_> = reader.take().iter().map(seen_of).collect();
    let wc = client(vec![addrs[VICTIM], addrs[0]])?;
    let writer = wc.create_writer(&wc.find_topic::<(u64, u64)>("feed").map_err(|e| e.to_string())?, topic.qos());
    let writer = writer.map_err(|e| e.to_string())?;
    let stop = AtomicBool::new(false);
    let written = AtomicU64::new(0);
    let killed = std::thread::scope(|s| -> Result<Instant, String> {
        let w = s.spawn(|| -> Result<(), String> {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                writer.write(&(CLIENT, n)).map_err(|e| e.to_string())?;
                written.store(n, Ordering::Relaxed);
            }
            Ok(())
        });
        std::thread::sleep(Duration::from_secs_f64(args.before));
        let killed = Instant::now();
        kids.kill(VICTIM);
        std::thread::sleep(Duration::from_secs_f64(args.before));
        stop.store(true, Ordering::Relaxed);
        w.join().map_err(|_| "the client writer panicked".to_string())??;
        Ok(killed)
    })?;
    let acked = writer.wait_for_delivery(Duration::from_secs(60));
    let written = written.load(Ordering::Relaxed);
    // Member 0 stops writing; every reader waits (bounded) for all that was written.
    kids.tell(0, "HALT").map_err(|e| e.to_string())?;
    let halted = kids.expect_lines("HALTED ", &[0]).map_err(|e| e.to_string())?;
    let feed: u64 = halted[0].trim().parse().map_err(|_| format!("bad HALTED line {:?}", halted[0]))?;
    let total = feed + written;
    testkit::poll_until(Duration::from_secs(30), Duration::from_millis(5), || {
        early.len() as u64 + lock(&seen).len() as u64 >= total
    });
    // The moves are counted before the members stop: a client whose member
    // stops moves again (to a member still running), which is not the kill's move.
    let (reader_moves, writer_moves) = (rc.failovers(), wc.failovers());
    let (results, exited_ok) = bench::stop_survivors(kids, N, VICTIM, &format!("STOP {total}"))?;
    spindle_sst::transport::shm::remove_stale_files();
    let me = spindle_dds::WriterId { node: spindle_sst::transport::NodeId(0), id: writer.id(), client: Some(wc.id()) }
        .to_string();
    let exactly_once = results.iter().all(|r| {
        r["client_writers"].as_array().is_some_and(|ws| {
            ws.iter().any(|w| {
                w["writer"] == me.as_str()
                    && w["distinct"].as_u64() == Some(written)
                    && w["max"].as_u64() == Some(written)
                    && w["repeated"] == 0
            })
        })
    });
    let seen: Vec<_> = early.into_iter().chain(lock(&seen).iter().copied()).collect();
    let mut digest = Digest::default();
    for x in &seen {
        fold(&mut digest, x.4, x.5, x.2);
    }
    let same_order = seen.first().is_some_and(|x| x.2 == 0)
        && results.iter().all(|r| {
            r["digest"] == format!("{:016x}", digest.0).as_str() && r["samples"].as_u64() == Some(seen.len() as u64)
        });
    let seqs: Vec<u64> = seen.iter().map(|x| x.2).collect();
    let gapless = !seqs.is_empty() && seqs.windows(2).all(|w| w[1] == w[0] + 1);
    let first_live = seen.iter().find(|x| !x.3).map(|x| (x.0 - t0).as_secs_f64() * 1e3);
    let view_at_kill = seen.iter().filter(|x| x.0 <= killed).map(|x| x.1).max().unwrap_or(0);
    let flowing = seen.iter().find(|x| x.0 > killed && !x.3 && x.1 > view_at_kill);
    let failover_ms = flowing.map(|x| (x.0 - killed).as_secs_f64() * 1e3);
    Ok(json!({
        "connect_to_first_ms": first_live.map(|m| round(m, 2)), "failover_ms": failover_ms.map(|m| round(m, 2)),
        "reader_samples": seqs.len(), "reader_gapless": gapless, "same_order_as_members": same_order, "reader_lost": reader.status().lost,
        "reader_moves": reader_moves, "written": written, "acked": acked, "resent": writer.resent(),
        "writer_moves": writer_moves, "writer_exactly_once": exactly_once, "exited_ok": exited_ok,
    }))
}

fn quantiles(xs: &mut [f64]) -> (f64, f64) {
    xs.sort_by(f64::total_cmp);
    if xs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    (xs[xs.len() / 2], xs[xs.len() - 1])
}

fn parent(args: &Args) -> Result<bool, String> {
    if args.stall {
        let v = stall::run()?;
        out(&v.to_string());
        // The writer must not wait for a stopped client: a generous bound for a
        // machine whose speed swings between windows (the run reports the ratio).
        let ok = v["ratio"].as_f64().is_some_and(|r| r >= 0.5)
            && v["clients_dropped"].as_u64().is_some_and(|d| d >= 1)
            && v["client_resumed"] == true
            && v["client_accounted"] == true
            && v["exited_ok"] == true;
        return Ok(ok);
    }
    let mut runs = Vec::new();
    for i in 0..args.runs {
        let v = run(args)?;
        if !args.json {
            bench::err(&format!("dds_clients: run {} of {}: {v}", i + 1, args.runs));
        }
        out(&v.to_string());
        runs.push(v);
    }
    let ok = |r: &Value| {
        r["reader_gapless"] == true
            && r["reader_lost"] == 0
            && r["acked"] == true
            && r["writer_exactly_once"] == true
            && r["exited_ok"] == true
            && r["reader_moves"] == 1
            && r["same_order_as_members"] == true
            && r["writer_moves"] == 1
    };
    let all_ok = runs.iter().all(ok);
    let mut connect: Vec<f64> = runs.iter().filter_map(|r| r["connect_to_first_ms"].as_f64()).collect();
    let mut failover: Vec<f64> = runs.iter().filter_map(|r| r["failover_ms"].as_f64()).collect();
    let measured = connect.len() == runs.len() && failover.len() == runs.len();
    let (c50, cmax) = quantiles(&mut connect);
    let (f50, fmax) = quantiles(&mut failover);
    out(&json!({
        "bench": "dds_clients", "transport": args.transport, "runs": args.runs, "rate": args.rate,
        "failure_ms": args.failure_ms, "connect_to_first_p50_ms": round(c50, 2), "connect_to_first_max_ms": round(cmax, 2),
        "failover_p50_ms": round(f50, 2), "failover_max_ms": round(fmax, 2), "all_ok": all_ok && measured,
    })
    .to_string());
    Ok(all_ok && measured)
}
