//! latency: send-to-own-delivery latency, shaped like Derecho's latency_test.
//!
//! ```text
//! cargo run --release -p bench --bin latency -- --transport mem|shm|tcp --nodes N \
//!     --senders all|half|one --size BYTES --count MSGS_PER_SENDER [--window W] \
//!     [--mode ordered|unordered] [--lend] [--json]
//! ```
//!
//! Each sender keeps one message in flight: it sends, and the delivery upcall at the
//! sender itself stamps the time its own message comes back in delivery order (stable
//! at every member, in ordered mode). The latency is upcall time minus send time, both
//! taken in the sender's process; the application thread's wake-up before the next
//! send is not counted. Percentiles are per sender; the report gives the worst sender.
#![forbid(unsafe_code)]

use bench::mcast::{self, Common, ModeArg};
use bench::{out, round, Latency};
use clap::Parser;
use serde_json::{json, Value};
use spindle_sst::sync::{Arc, Condvar, Mutex};
use spindle_sst::transport::Transport;
use std::time::{Duration, Instant};

#[derive(Parser, Debug, Clone)]
#[command(about = "Multicast send-to-own-delivery latency (Derecho latency_test shape)")]
struct Args {
    #[command(flatten)]
    c: Common,
    /// Pause between a delivery and the next send (µs), so every thread parks first:
    /// each message is then a lone message waking an idle group.
    #[arg(long, default_value_t = 0)]
    gap_us: u64,
    /// After the run, let the group sit idle this long and report each node's CPU use
    /// (with `--lend`, the sender spends it in a wait that runs its node's passes).
    #[arg(long, default_value_t = 0.0)]
    idle_seconds: f64,
    /// The sender waits for its delivery by running its node's predicate passes
    /// itself (`spindle_sst::predicate::Lender`) instead of sleeping on a condvar.
    #[arg(long)]
    lend: bool,
}

#[derive(Default)]
struct InFlight {
    /// (index, sent at) of the message in flight.
    pending: Option<(u64, Instant)>,
    lat: Latency,
}

fn node(a: &Args, t: Arc<dyn Transport>) -> Result<Value, String> {
    let c = &a.c;
    let me = t.local_id();
    let sender_rank = c.sender_ids().iter().position(|s| *s == me);
    let state = Arc::new((Mutex::new(InFlight::default()), Condvar::new()));
    let total_msgs = c.count * c.sender_ids().len() as u64;
    let delivered = Arc::new(spindle_sst::sync::atomic::AtomicU64::new(0));
    let upcalls: Vec<spindle_smc::runtime::Upcall> = (0..c.subgroups)
        .map(|k| {
            let (st, d) = (state.clone(), delivered.clone());
            Box::new(move |b: &spindle_smc::Batch| {
                d.fetch_add(b.len() as u64, spindle_sst::sync::atomic::Ordering::Relaxed);
                if k != 0 {
                    return;
                }
                let now = Instant::now();
                let (lock, cv) = &*st;
                let mut f = lock.lock().unwrap();
                if let Some((index, at)) = f.pending {
                    if b.iter().any(|m| Some(m.sender()) == sender_rank && m.index() == index) {
                        f.lat.record(now - at);
                        f.pending = None;
                        cv.notify_all();
                    }
                }
            }) as spindle_smc::runtime::Upcall
        })
        .collect();
    let rt = c.start(t, upcalls)?;
    if sender_rank.is_some() {
        let sg = &rt.subgroups()[0];
        let (lock, cv) = &*state;
        let lender = rt.predicates().lender();
        for i in 0..c.count {
            let mut slot = sg.reserve(c.size).map_err(|e| e.to_string())?;
            slot.write_word(0, i);
            let mut f = lock.lock().unwrap();
            let at = Instant::now();
            let index = slot.commit();
            f.pending = Some((index, at));
            let deadline = Instant::now() + Duration::from_secs(30);
            if a.lend {
                drop(f);
                lender.run_until(deadline, || lock.lock().unwrap().pending.is_none());
                f = lock.lock().unwrap();
            }
            while f.pending.is_some() {
                if Instant::now() > deadline {
                    return Err(format!("message {i} was not delivered within 30 s"));
                }
                f = cv.wait_timeout(f, Duration::from_millis(100)).unwrap().0;
            }
            drop(f);
            if a.gap_us > 0 {
                std::thread::sleep(Duration::from_micros(a.gap_us));
            }
        }
    }
    // Everyone stays until every sender's messages are delivered here.
    let all = testkit::poll_until(Duration::from_secs(600), Duration::from_millis(1), || {
        delivered.load(spindle_sst::sync::atomic::Ordering::Relaxed) >= total_msgs
    });
    if !all {
        return Err("not every message was delivered".into());
    }
    // Idle: no traffic; heartbeat-free smc groups should cost (nearly) nothing. A node
    // process measures itself; mem nodes share one process, so mem reports the
    // process's CPU divided by the number of nodes.
    let idle_cpu_pct = (a.idle_seconds > 0.0).then(|| {
        let (cpu0, t0) = (testkit::cpu_time(testkit::CpuClock::Process), Instant::now());
        let idle = Duration::from_secs_f64(a.idle_seconds);
        if a.lend && sender_rank.is_some() {
            // Idle while waiting: the sender's thread runs the passes for nothing.
            rt.predicates().lender().run_until(t0 + idle, || false);
        } else {
            std::thread::sleep(idle);
        }
        let cpu = testkit::cpu_time(testkit::CpuClock::Process).saturating_sub(cpu0);
        let share = if c.transport == testkit::TransportKind::Mem { c.nodes as f64 } else { 1.0 };
        100.0 * cpu.as_secs_f64() / t0.elapsed().as_secs_f64() / share
    });
    let poll = rt.stop();
    let f = state.0.lock().unwrap();
    Ok(json!({
        "node": me.0,
        "sender": sender_rank.is_some(),
        "samples": f.lat.len(),
        "p50": f.lat.quantile_us(0.5),
        "p99": f.lat.quantile_us(0.99),
        "p999": f.lat.quantile_us(0.999),
        "idle_cpu_pct": idle_cpu_pct,
        "busy_yields": poll.busy_yields,
    }))
}

fn main() {
    let args = Args::parse();
    let c = &args.c;
    if let Err(e) = c.validate() {
        bench::usage("latency", &e);
    }
    if mcast::child_main(c, |t| node(&args, t)) {
        return;
    }
    let results = match mcast::run_nodes(c, |t| node(&args, t)) {
        Ok(r) => r,
        Err(e) => bench::finish("latency", Err(e)),
    };
    let senders: Vec<&Value> = results.iter().filter(|r| r["sender"] == true).collect();
    let worst = |k: &str| senders.iter().map(|r| r[k].as_f64().unwrap_or(f64::NAN)).fold(0.0, f64::max);
    let samples: u64 = senders.iter().map(|r| r["samples"].as_u64().unwrap_or(0)).sum();
    let line = json!({
        "bench": "latency",
        "transport": c.transport.name(),
        "nodes": c.nodes,
        "senders": format!("{:?}", c.senders).to_lowercase(),
        "size": c.size,
        "window": c.window(),
        "mode": if c.mode == ModeArg::Ordered { "ordered" } else { "unordered" },
        "lat_us_p50": round(worst("p50"), 2),
        "lat_us_p99": round(worst("p99"), 2),
        "lat_us_p999": round(worst("p999"), 2),
        "samples": samples,
                "spin_us": c.spin(),
        "gap_us": args.gap_us,
        "lend": args.lend,
        "busy_yield_us": c.polling.busy_yield_us,
        // Yields after a working pass (`PollConfig::busy_yield`), all nodes.
        "busy_yields": results.iter().map(|r| r["busy_yields"].as_u64().unwrap_or(0)).sum::<u64>(),
    });
    let mut line = line;
    if args.idle_seconds > 0.0 {
        let idle: Vec<f64> = results.iter().map(|r| r["idle_cpu_pct"].as_f64().unwrap_or(f64::NAN)).collect();
        line["idle_cpu_pct"] = json!(round(idle.iter().copied().fold(0.0, f64::max), 3));
        line["idle_cpu_pct_nodes"] = json!(idle.iter().map(|x| round(*x, 3)).collect::<Vec<_>>());
    }
    if c.json {
        out(&line.to_string());
    } else {
        out(&format!(
            "latency: {} nodes over {}, senders {:?}, {} B, {:?}: p50 {} µs, p99 {} µs, p99.9 {} µs ({} samples, worst sender)",
            c.nodes, c.transport, c.senders, c.size, c.mode, line["lat_us_p50"], line["lat_us_p99"], line["lat_us_p999"], samples
        ));
    }
}
