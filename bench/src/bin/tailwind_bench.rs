//! tailwind_bench: replicated appends with Tailwind (one-sided writes into passive
//! backups) against the conventional design (`--baseline rpc`: backups receive each
//! record as a message and copy it into their log with their own CPU), in the same
//! run, with each backup's CPU time measured while the primary appends.
//!
//! ```text
//! cargo run --release -p bench --bin tailwind_bench -- --baseline rpc
//! cargo run --release -p bench --bin tailwind_bench -- --transport tcp --sizes 100,1000,10000 --seconds 3
//! ```
//!
//! Three processes, replication factor 3: member 0 is the primary and appends in a
//! closed loop (one append outstanding, as a client waiting for durability does);
//! members 1 and 2 are the backups. Per record size: appends/s, MB/s, append latency
//! p50/p99/p99.9 (µs), and each backup's CPU time over the run as a share of one
//! core (`backup_cpu_pct`, process CPU: every thread of the backup process counts,
//! the group's own heartbeats included).
//!
//! The RPC baseline runs over the same transport: the primary writes the record
//! and then a sequence word into each backup's inbox (two ordered one-sided writes,
//! the second rings the backup's doorbell), the backup's handler thread copies the
//! record into its log buffer and writes an acknowledgement word back; the append
//! completes when both acknowledgements are in (the primary spins briefly, then
//! sleeps: `--rpc-wait`). Full segments (`--buffer`) are
//! written to files and synced by a flusher thread, as Tailwind backups do with
//! closed buffers, so both designs pay for the disk. The handler spins for
//! `--rpc-spin-us` after each record before it sleeps on the doorbell (the group's
//! predicate threads use the same default budget).
//!
//! One JSON line per mode and size, then a summary line with the ratios; a markdown
//! table on stderr. Bounded: every wait has a deadline, the children die with this
//! process, their shm files and directories are removed.
#![forbid(unsafe_code)]

use bench::rpclog::{self, RpcPrimary, MAX_RECORD};
use bench::{err, out, round, Latency};
use clap::Parser;
use serde_json::{json, Value};
use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_sst::transport::NodeId;
use spindle_tailwind::service::{TailwindConfig, TailwindLog};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::{CpuClock, TransportKind};

#[derive(Parser, Debug, Clone)]
#[command(about = "Tailwind replicated appends against an RPC baseline, with the backups' CPU time")]
struct Args {
    /// Transport: shm or tcp.
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Record sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    sizes: Vec<usize>,
    /// Seconds of appending per size (after a short warm-up).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Also run the conventional design: backups copy each record with their CPU.
    #[arg(long, value_parser = ["rpc"])]
    baseline: Option<String>,
    /// The RPC handler's spin budget after each record, in µs (0, the default, was
    /// the baseline's best on this 2-core machine: spinning handlers compete with
    /// the primary for the cores).
    #[arg(long, default_value_t = 0)]
    rpc_spin_us: u64,
    /// How the RPC primary waits for acknowledgements: `sleep` (spin, then 20 µs
    /// sleeps), `doorbell` (spin, then sleep until the acknowledgement rings), or
    /// `auto`: what measured best for the baseline here, `sleep` on shm and
    /// `doorbell` on tcp.
    #[arg(long, default_value = "auto", value_parser = ["auto", "sleep", "doorbell"])]
    rpc_wait: String,
    /// Offered load in appends/s (0: a closed loop, as fast as acknowledgements
    /// come). Use the same rate for both designs to compare the backups' CPU at
    /// equal load.
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// The predicate thread's settings.
    #[command(flatten)]
    polling: bench::Polling,
    /// Tailwind buffer (segment) bytes.
    #[arg(long, default_value_t = spindle_tailwind::backup::DEFAULT_BUFFER)]
    buffer: usize,
    /// (internal) the mode a child runs.
    #[arg(long, hide = true, default_value = "tailwind")]
    mode: String,
    #[command(flatten)]
    member: bench::MemberArgs,
}

const N: usize = 3;
const WARMUP: Duration = Duration::from_millis(300);

fn main() {
    let args = Args::parse();
    if let Some(s) = args.sizes.iter().find(|s| **s == 0 || **s > MAX_RECORD) {
        bench::usage("tailwind_bench", &format!("record size {s} is out of range (1..={MAX_RECORD})"));
    }
    bench::run_parent_or_member("tailwind_bench", &args.member, |id| child(&args, id), || parent(&args))
}

fn dir_of(group: &str, id: u32) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tw-bench-{group}-{id}"))
}

/// How the primary appends one record in a mode.
trait Appender {
    fn append(&mut self, rec: &[u8]) -> Result<(), String>;
}

struct Tw(TailwindLog);

impl Appender for Tw {
    fn append(&mut self, rec: &[u8]) -> Result<(), String> {
        self.0.append(rec).map(|_| ()).map_err(|e| e.to_string())
    }
}

struct Rpc(RpcPrimary);

impl Appender for Rpc {
    fn append(&mut self, rec: &[u8]) -> Result<(), String> {
        self.0.append(rec)
    }
}

fn child(args: &Args, id: u32) -> Result<(), String> {
    let group = std::env::var("SPINDLE_CHILD_GROUP").unwrap_or_else(|_| "twbench".into());
    let stop = Arc::new(AtomicBool::new(false));
    let mut handler = None;
    let mut primary: Option<Box<dyn Appender>> = None;
    let mut keep: Option<TailwindLog> = None;
    if args.mode == "rpc" {
        let (_, _, t) =
            testkit::child_transport(&rpclog::regions(N), Duration::from_secs(30)).map_err(|e| e.to_string())?;
        if id == 0 {
            let doorbell = match args.rpc_wait.as_str() {
                "auto" => args.transport == "tcp",
                w => w == "doorbell",
            };
            primary = Some(Box::new(Rpc(RpcPrimary::new(t, N, doorbell))));
        } else {
            let (s, spin) = (stop.clone(), Duration::from_micros(args.rpc_spin_us));
            let (segment, dir) = (args.buffer, dir_of(&group, id));
            handler = Some(std::thread::spawn(move || rpclog::handler(t, id as usize, spin, segment, dir, s, |_| {})));
        }
    } else {
        let b = args.member.group_builder(id, &args.transport)?;
        let b = args.polling.apply(b.timeouts(Duration::from_millis(100), Duration::from_millis(1000)));
        let g = b.build().map_err(|e| e.to_string())?;
        let mut cfg = TailwindConfig::new(dir_of(&group, id));
        cfg.buffer = args.buffer;
        let log = TailwindLog::start(g, cfg).map_err(|e| e.to_string())?;
        if !log.group().wait_for_members(N, Duration::from_secs(60)) {
            return Err("the group did not reach 3 members".into());
        }
        if log.wait_for_primary(Duration::from_secs(60)) != Some(NodeId(0)) {
            return Err("member 0 did not become the primary".into());
        }
        println!("JOINED");
        if testkit::wait_for_parent() != "GO" {
            return Err("expected GO".into());
        }
        match id {
            0 => primary = Some(Box::new(Tw(log))),
            _ => keep = Some(log),
        }
    }
    // child_transport reads its setup lines through a buffer of its own: the
    // parent sends commands only after this line.
    println!("IDLE");
    // Commands: RUN <size> (the primary measures; a backup starts its CPU clock),
    // STOP (a backup reports its CPU time), EXIT.
    let mut started = (Instant::now(), Duration::ZERO);
    loop {
        let line = testkit::wait_for_parent();
        let mut words = line.split_whitespace();
        match (words.next(), words.next().and_then(|s| s.parse::<usize>().ok())) {
            (Some("RUN"), Some(size)) => match primary.as_mut() {
                Some(p) => println!("DONE {}", measure(p.as_mut(), size, args.seconds, args.rate)?),
                None => {
                    started = (Instant::now(), testkit::cpu_time(CpuClock::Process));
                    println!("STARTED");
                }
            },
            (Some("STOP"), _) => {
                let cpu = testkit::cpu_time(CpuClock::Process).saturating_sub(started.1);
                let wall = started.0.elapsed();
                println!("CPU {} {}", cpu.as_nanos(), wall.as_nanos());
            }
            (Some("EXIT"), _) | (None, _) => break,
            _ => return Err(format!("unexpected command {line:?}")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(h) = handler {
        h.join().map_err(|_| "the handler panicked")??;
    }
    drop(primary);
    drop(keep);
    Ok(())
}

fn measure(p: &mut dyn Appender, size: usize, seconds: f64, rate: u64) -> Result<Value, String> {
    let mut rec: Vec<u8> = (0..size).map(|i| (i * 7) as u8).collect();
    // One schedule for the warm-up and the run: the backups' CPU window covers both.
    let pace = |t0: Instant, k: u64| {
        if rate > 0 {
            // Never ahead of the schedule (sleeps are coarse: catch up in bursts).
            let due = Duration::from_secs_f64(k as f64 / rate as f64);
            let now = t0.elapsed();
            if due > now + Duration::from_micros(200) {
                std::thread::sleep(due - now);
            }
        }
    };
    let warm = Instant::now();
    let mut i = 0u64;
    while warm.elapsed() < WARMUP {
        pace(warm, i);
        p.append(&rec)?;
        i += 1;
    }
    let mut lat = Latency::default();
    let cpu0 = testkit::cpu_time(CpuClock::Process);
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        pace(start, n);
        rec[..8.min(size)].copy_from_slice(&i.to_le_bytes()[..8.min(size)]);
        let t0 = Instant::now();
        p.append(&rec)?;
        lat.record(t0.elapsed());
        n += 1;
        i += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = testkit::cpu_time(CpuClock::Process).saturating_sub(cpu0).as_secs_f64();
    Ok(json!({
        "appends": n, "appends_total": i, "appends_per_s": round(n as f64 / secs, 0), "mb_per_s": round(n as f64 * size as f64 / secs / 1e6, 1),
        "p50_us": round(lat.quantile_us(0.5), 2), "p99_us": round(lat.quantile_us(0.99), 2),
        "p999_us": round(lat.quantile_us(0.999), 2), "primary_cpu_pct": round(cpu / secs * 100.0, 1),
    }))
}

fn run_mode(args: &Args, mode: &str) -> Result<Vec<Value>, String> {
    let kind = if args.transport == "tcp" && mode == "rpc" { TransportKind::Tcp } else { TransportKind::Shm };
    let deadline = Duration::from_secs(120 + (args.seconds * 4.0 * args.sizes.len() as f64) as u64);
    let mut kids = bench::start_members(N, kind, deadline, &["--mode", mode], &[], &[])?;
    let group = kids.group().to_string();
    let backups: Vec<usize> = (1..N).collect();
    let mut rows = Vec::new();
    let r = (|| -> Result<(), String> {
        kids.expect_lines("IDLE", &(0..N).collect::<Vec<_>>()).map_err(|e| e.to_string())?;
        for &size in &args.sizes {
            err(&format!("tailwind_bench: {mode}, {size} B records, {} s ...", args.seconds));
            for &b in &backups {
                kids.tell(b, &format!("RUN {size}")).map_err(|e| e.to_string())?;
            }
            kids.expect_lines("STARTED", &backups).map_err(|e| e.to_string())?;
            kids.tell(0, &format!("RUN {size}")).map_err(|e| e.to_string())?;
            let done = kids.expect_lines("DONE ", &[0]).map_err(|e| e.to_string())?;
            for &b in &backups {
                kids.tell(b, "STOP").map_err(|e| e.to_string())?;
            }
            let cpus = kids.expect_lines("CPU ", &backups).map_err(|e| e.to_string())?;
            let mut row: Value = serde_json::from_str(&done[0]).map_err(|e| format!("bad result {done:?}: {e}"))?;
            let total = row["appends_total"].as_f64().unwrap_or(0.0).max(1.0);
            let (mut pct, mut per) = (Vec::new(), Vec::new());
            for c in &cpus {
                let mut w = c.split_whitespace().map(|x| x.parse::<f64>().unwrap_or(0.0));
                let (cpu, wall) = (w.next().unwrap_or(0.0), w.next().unwrap_or(1.0));
                pct.push(round(cpu / wall.max(1.0) * 100.0, 1));
                per.push(round(cpu / total, 1));
            }
            row["backup_cpu_ns_per_append"] = json!(per);
            row["rate"] = json!(args.rate);
            row["bench"] = json!("tailwind_bench");
            row["mode"] = json!(mode);
            row["transport"] = json!(args.transport);
            row["size"] = json!(size);
            row["replicas"] = json!(N);
            row["backup_cpu_pct"] = json!(pct);
            if mode == "tailwind" {
                row["spin_us"] = json!(args.polling.spin_us); // null: the group chose it from the host
            }
            if mode == "rpc" {
                row["rpc_spin_us"] = json!(args.rpc_spin_us);
                row["rpc_wait"] = json!(args.rpc_wait);
            }
            out(&row.to_string());
            rows.push(row);
        }
        kids.tell_all("EXIT").map_err(|e| e.to_string())?;
        if !kids.wait_all_but(&[]).map_err(|e| e.to_string())? {
            return Err("a member exited with an error".into());
        }
        Ok(())
    })();
    drop(kids);
    for i in 0..N as u32 {
        let _ = std::fs::remove_dir_all(dir_of(&group, i));
    }
    spindle_sst::transport::shm::remove_stale_files();
    r.map(|_| rows)
}

fn parent(args: &Args) -> Result<bool, String> {
    testkit::catch_interrupts();
    spindle_sst::transport::shm::remove_stale_files();
    let tw = run_mode(args, "tailwind")?;
    let rpc = match args.baseline {
        Some(_) => run_mode(args, "rpc")?,
        None => Vec::new(),
    };
    let mut table = String::from(
        "| size | Tailwind appends/s | p50 µs | p99 µs | backups' CPU % | RPC appends/s | p50 µs | p99 µs | backups' CPU % |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut ratios = Vec::new();
    for (i, t) in tw.iter().enumerate() {
        let r = rpc.get(i);
        let cell = |v: Option<&Value>, k: &str| v.map_or("".to_string(), |v| v[k].to_string());
        table.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            t["size"],
            t["appends_per_s"],
            t["p50_us"],
            t["p99_us"],
            t["backup_cpu_pct"],
            cell(r, "appends_per_s"),
            cell(r, "p50_us"),
            cell(r, "p99_us"),
            cell(r, "backup_cpu_pct"),
        ));
        if let Some(r) = r {
            let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
            ratios.push(json!({
                "size": t["size"],
                "appends_ratio": round(f(t, "appends_per_s") / f(r, "appends_per_s").max(1e-9), 2),
                "p50_ratio_rpc_over_tw": round(f(r, "p50_us") / f(t, "p50_us").max(1e-9), 2),
                "p99_ratio_rpc_over_tw": round(f(r, "p99_us") / f(t, "p99_us").max(1e-9), 2),
            }));
        }
    }
    err(&table);
    out(&json!({"bench": "tailwind_bench", "summary": true, "transport": args.transport, "ratios": ratios}).to_string());
    Ok(true)
}
