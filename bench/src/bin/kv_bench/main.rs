//! kv_bench: the seed paper's experiment on this machine: a persistent key-value
//! store made durable by its own synced write-ahead log, against the same store
//! with a replicated Tailwind log as its write-ahead log (`spindle_kv`).
//!
//! ```text
//! cargo run --release -p bench --bin kv_bench
//! cargo run --release -p bench --bin kv_bench -- --json --values 100 --seconds 3 --transports shm
//! ```
//!
//! Configurations (`config` in the JSON lines):
//! - `store_fsync`: fjall alone, one put per synced commit (`persist(SyncAll)`
//!   after each insert), `--clients` threads taking turns on one lock;
//! - `store_batched`: fjall alone with group commit, its best durable mode: the
//!   clients' waiting puts go in as one batch and one sync;
//! - `tailwind_memory`: three member processes (`--transports` shm, tcp), each a
//!   fjall store applying the committed log (its own journal never synced);
//!   member 0 runs the clients; a put returns once the primary and both backups
//!   hold its record in memory (a read at member 0 waits until its store applied
//!   it). The row adds `apply_lag_at_end` (records member 0's store had not
//!   applied when the load stopped) and `catch_up_ms` (how long it took);
//! - `tailwind_disk`: the same with `Ack::Disk`: a put returns once a majority
//!   of the three replicas also synced its record to disk;
//! - `rpc`: the same store on the conventional replicated log of
//!   `tailwind_bench --baseline rpc` ([`bench::rpclog`]): member 0 runs the
//!   clients and the store, group-commits the waiting puts as one record, sends
//!   it into both backups' inboxes, where a handler thread copies it into its
//!   log with its own CPU (segments written to files and synced as they fill),
//!   and a put returns once both acknowledged it. At every member a thread
//!   applies the acknowledged batches to its store (journal never synced), as
//!   every Tailwind member applies the committed log; at member 0 puts wait
//!   while it is more than 4096 behind.
//!
//! With `--backup-apply lazy` the backups' stores apply nothing while nobody
//! reads there ([`spindle_kv::Apply::Lazy`]; for `rpc`, the backups keep the
//! log only): the replicated rows then measure the primary's store on a
//! replicated log with passive backups, as Tailwind's paper has them.
//!
//! Each configuration runs `--clients` closed-loop client threads for
//! `--seconds` after a short warm-up, per value size (`--values`); keys are 16
//! bytes, spread over a million. Output: one JSON line per configuration and
//! value size with `config`, `transport`, `value_bytes`, `replicas`,
//! `puts_per_s`, `p50_us`, `p99_us`; without `--json`, a table.
#![forbid(unsafe_code)]

use bench::{err, out, round, Latency};
use clap::Parser;
use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use serde_json::{json, Value};
use spindle_kv::{Apply, Store};
use spindle_sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spindle_sst::sync::lock;
use spindle_tailwind::service::{Ack, TailwindConfig, TailwindLog};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use testkit::TransportKind;

#[derive(Parser, Debug, Clone)]
#[command(about = "A key-value store durable by its own synced log, against the same store on a Tailwind log")]
pub(crate) struct Args {
    /// Value sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    values: Vec<usize>,
    /// Seconds of puts per configuration and size (after a short warm-up).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Closed-loop client threads.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Transports for the replicated configurations.
    #[arg(long, value_delimiter = ',', default_value = "shm,tcp", value_parser = ["shm", "tcp"])]
    transports: Vec<String>,
    /// Skip the store-alone configurations.
    #[arg(long)]
    no_alone: bool,
    /// Replicated configurations: `memory` (tailwind_memory), `disk`
    /// (tailwind_disk), `rpc`.
    #[arg(long, value_delimiter = ',', default_value = "memory,disk,rpc", value_parser = ["memory", "disk", "rpc"])]
    replicated: Vec<String>,
    /// (internal) the configuration a member runs.
    #[arg(long, hide = true, default_value = "memory")]
    mode: String,
    /// The predicate thread's settings.
    #[command(flatten)]
    polling: bench::Polling,
    /// How the backups' stores apply the log in the replicated configurations:
    /// `eager` (as it commits, every member's store follows) or `lazy`
    /// (`kvstore::Apply::Lazy`: only when read there or once primary; for `rpc`,
    /// backups without a store).
    #[arg(long, default_value = "eager", value_parser = ["eager", "lazy"])]
    backup_apply: String,
    /// One JSON line per configuration (else a table).
    #[arg(long)]
    json: bool,
    /// (internal) the transport a member runs.
    #[arg(long, hide = true, default_value = "shm")]
    transport: String,
    #[command(flatten)]
    member: bench::MemberArgs,
}

mod rpc;

const REPLICAS: usize = 3;
const WARMUP: Duration = Duration::from_millis(300);
const MAX_VALUE: usize = 64 << 10;

fn main() {
    let args = Args::parse();
    if let Some(v) = args.values.iter().find(|v| **v == 0 || **v > MAX_VALUE) {
        bench::usage("kv_bench", &format!("value size {v} is out of range (1..={MAX_VALUE})"));
    }
    if args.clients == 0 || args.clients > 256 || !(args.seconds > 0.0 && args.seconds <= 600.0) {
        bench::usage("kv_bench", "--clients must be 1..=256 and --seconds in (0, 600]");
    }
    bench::run_parent_or_member("kv_bench", &args.member, |id| member(&args, id), || parent(&args))
}

pub(crate) fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(b"user0000");
    k[8..].copy_from_slice(&(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % 1_000_000).to_be_bytes());
    k
}

/// Runs `clients` closed-loop threads of `put` for `seconds` after a warm-up;
/// returns puts/s and the latency histogram.
pub(crate) fn load(
    clients: usize,
    seconds: f64,
    put: &(dyn Fn(u64) -> Result<(), String> + Sync),
) -> Result<(f64, Latency), String> {
    let stop = AtomicBool::new(false);
    let measuring = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let lat = Mutex::new(Latency::default());
    let window = std::thread::scope(|s| -> Result<Duration, String> {
        let workers: Vec<_> = (0..clients as u64)
            .map(|c| {
                let (stop, measuring, done, lat) = (&stop, &measuring, &done, &lat);
                s.spawn(move || -> Result<(), String> {
                    let mut mine = Latency::default();
                    let mut i = c << 40;
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        put(i)?;
                        if measuring.load(Ordering::Relaxed) {
                            mine.record(t.elapsed());
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        i += 1;
                    }
                    lock(lat).merge(&mine);
                    Ok(())
                })
            })
            .collect();
        std::thread::sleep(WARMUP);
        measuring.store(true, Ordering::Relaxed);
        let began = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(seconds));
        measuring.store(false, Ordering::Relaxed);
        let window = began.elapsed();
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().map_err(|_| "a client panicked".to_string())??;
        }
        Ok(window)
    })?;
    Ok((done.load(Ordering::Relaxed) as f64 / window.as_secs_f64(), lat.into_inner().unwrap_or_default()))
}

pub(crate) fn row(config: &str, transport: &str, value: usize, replicas: usize, r: (f64, Latency)) -> Value {
    json!({
        "bench": "kv_bench", "config": config, "transport": transport, "value_bytes": value, "replicas": replicas,
        "puts_per_s": round(r.0, 0), "p50_us": round(r.1.quantile_us(0.5), 1), "p99_us": round(r.1.quantile_us(0.99), 1),
    })
}

/// fjall alone in `dir`: synced per put, or group commit.
fn alone(dir: &Path, batched: bool, args: &Args, value: usize) -> Result<(f64, Latency), String> {
    let _ = std::fs::remove_dir_all(dir);
    let db = Database::builder(dir).open().map_err(|e| e.to_string())?;
    let kv = db.keyspace("kv", KeyspaceCreateOptions::default).map_err(|e| e.to_string())?;
    let v = vec![b'v'; value];
    let one = Mutex::new(());
    // Group commit: a put needs a sync that begins after its insert; one put at a
    // time runs the sync, the others wait for theirs.
    let group = Mutex::new(Syncs { running: false, started: 0, done: 0 });
    let synced = Condvar::new();
    let put = |i: u64| -> Result<(), String> {
        if !batched {
            let _g = lock(&one);
            kv.insert(key(i), v.clone()).map_err(|e| e.to_string())?;
            return db.persist(PersistMode::SyncAll).map_err(|e| e.to_string());
        }
        kv.insert(key(i), v.clone()).map_err(|e| e.to_string())?;
        let mut g = lock(&group);
        let need = g.started + 1;
        while g.done < need {
            if g.running {
                g = synced.wait(g).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            g.running = true;
            g.started += 1;
            let this = g.started;
            drop(g);
            let r = db.persist(PersistMode::SyncAll).map_err(|e| e.to_string());
            g = lock(&group);
            g.running = false;
            g.done = this;
            synced.notify_all();
            r?;
        }
        Ok(())
    };
    let r = load(args.clients, args.seconds, &put);
    drop(kv);
    drop(db);
    let _ = std::fs::remove_dir_all(dir);
    r
}

/// Group commit's state: whether a sync runs, syncs begun and done.
struct Syncs {
    running: bool,
    started: u64,
    done: u64,
}

fn dir_of(group: &str, id: u32) -> PathBuf {
    std::env::temp_dir().join(format!("kv-bench-{group}-{id}"))
}

/// A member process of a replicated run.
fn member(args: &Args, id: u32) -> Result<(), String> {
    let group = std::env::var("SPINDLE_CHILD_GROUP").unwrap_or_else(|_| "kvbench".into());
    let dir = dir_of(&group, id);
    let _ = std::fs::remove_dir_all(&dir);
    if args.mode == "rpc" {
        let r = rpc::member(args, id, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        return r;
    }
    let b = args.member.group_builder(id, &args.transport)?;
    let b = args.polling.apply(b.timeouts(Duration::from_millis(100), Duration::from_millis(1000)));
    let g = b.build().map_err(|e| e.to_string())?;
    let mut cfg = TailwindConfig::new(dir.join("log"));
    cfg.ack = if args.mode == "disk" { Ack::Disk } else { Ack::Memory };
    let log = Arc::new(TailwindLog::start(g, cfg).map_err(|e| e.to_string())?);
    if !log.group().wait_for_members(REPLICAS, Duration::from_secs(60)) {
        return Err("the group did not reach 3 members".into());
    }
    if log.wait_for_primary(Duration::from_secs(60)).is_none() {
        return Err("the log has no primary".into());
    }
    let apply = if args.backup_apply == "lazy" { Apply::Lazy } else { Apply::Eager };
    let store = Store::open_with(&dir.join("store"), log.clone(), apply).map_err(|e| e.to_string())?;
    println!("JOINED");
    if testkit::wait_for_parent() != "GO" {
        return Err("expected GO".into());
    }
    println!("IDLE");
    serve_runs(|value| {
        let v = vec![b'v'; value];
        let put = |i: u64| store.put(&key(i), &v).map(|_| ()).map_err(|e| e.to_string());
        let r = load(args.clients, args.seconds, &put)?;
        let total = r.0 * args.seconds;
        // Puts return once acknowledged; the stores apply behind them. How far
        // behind this member's store was when the load stopped, and how long it
        // took to catch up (the throughput counts only if that stays small).
        let committed = log.committed().map_or(0, |l| l.0);
        let lag = committed.saturating_sub(store.applied().0);
        let t = Instant::now();
        store.wait_applied(committed, Duration::from_secs(60)).map_err(|e| e.to_string())?;
        let mut row = member_row(args, &format!("tailwind_{}", args.mode), value, r, lag, t);
        row["puts_measured"] = json!(round(total, 0));
        row["spin_us"] = json!(log.group().spin_us());
        Ok(row)
    })?;
    drop(store);
    drop(log);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A member's commands from the parent: `RUN <value bytes>` (`run` measures and
/// gives the row, printed as `DONE <row>`) until `EXIT` or the parent goes.
fn serve_runs(mut run: impl FnMut(usize) -> Result<Value, String>) -> Result<(), String> {
    loop {
        let line = testkit::wait_for_parent();
        let mut words = line.split_whitespace();
        match (words.next(), words.next().and_then(|s| s.parse::<usize>().ok())) {
            (Some("RUN"), Some(value)) => println!("DONE {}", run(value)?),
            (Some("EXIT"), _) | (None, _) => return Ok(()),
            _ => return Err(format!("unexpected command {line:?}")),
        }
    }
}

/// A replicated configuration's row at member 0: the load's figures, how far
/// behind its store was when the load stopped (`lag`) and how long it took to
/// catch up since `caught`.
fn member_row(args: &Args, config: &str, value: usize, r: (f64, Latency), lag: u64, caught: Instant) -> Value {
    let mut row = row(config, &args.transport, value, REPLICAS, r);
    row["apply_lag_at_end"] = json!(lag);
    row["catch_up_ms"] = json!(round(caught.elapsed().as_secs_f64() * 1000.0, 1));
    row["backup_apply"] = json!(args.backup_apply);
    row
}

fn replicated(args: &Args, transport: &str, mode: &str) -> Result<Vec<Value>, String> {
    let kind = if transport == "tcp" { TransportKind::Tcp } else { TransportKind::Shm };
    let extra = ["--transport", transport, "--mode", mode];
    let mut kids =
        bench::start_members(REPLICAS, kind, Duration::from_secs(600), &extra, &["--transport", "--mode"], &[])?;
    let config = if mode == "rpc" { "rpc".to_string() } else { format!("tailwind_{mode}") };
    let group = kids.group().to_string();
    let mut rows = Vec::new();
    let r = (|| -> Result<(), String> {
        kids.expect_lines("IDLE", &(0..REPLICAS).collect::<Vec<_>>()).map_err(|e| e.to_string())?;
        for &value in &args.values {
            err(&format!("kv_bench: {config} over {transport}, {value} B values, {} s ...", args.seconds));
            kids.tell(0, &format!("RUN {value}")).map_err(|e| e.to_string())?;
            let done = kids.expect_lines("DONE ", &[0]).map_err(|e| e.to_string())?;
            rows.push(serde_json::from_str(&done[0]).map_err(|e| format!("bad result {done:?}: {e}"))?);
        }
        kids.tell_all("EXIT").map_err(|e| e.to_string())?;
        if !kids.wait_all_but(&[]).map_err(|e| e.to_string())? {
            return Err("a member exited with an error".into());
        }
        Ok(())
    })();
    drop(kids);
    for i in 0..REPLICAS as u32 {
        let _ = std::fs::remove_dir_all(dir_of(&group, i));
    }
    spindle_sst::transport::shm::remove_stale_files();
    r.map(|_| rows)
}

fn parent(args: &Args) -> Result<bool, String> {
    spindle_sst::transport::shm::remove_stale_files();
    let mut rows = Vec::new();
    if !args.no_alone {
        let dir = std::env::temp_dir().join(format!("kv-bench-alone-{}", std::process::id()));
        for &value in &args.values {
            for (batched, name) in [(false, "store_fsync"), (true, "store_batched")] {
                err(&format!("kv_bench: {name}, {value} B values, {} s ...", args.seconds));
                rows.push(row(name, "none", value, 1, alone(&dir, batched, args, value)?));
            }
        }
    }
    for mode in &args.replicated {
        for t in &args.transports {
            rows.extend(replicated(args, t, mode)?);
        }
    }
    if args.json {
        for r in &rows {
            out(&r.to_string());
        }
    } else {
        out("| config | transport | value B | replicas | puts/s | p50 µs | p99 µs |\n|---|---|---|---|---|---|---|");
        for r in &rows {
            out(&format!(
                "| {} | {} | {} | {} | {} | {} | {} |",
                r["config"].as_str().unwrap_or(""),
                r["transport"].as_str().unwrap_or(""),
                r["value_bytes"],
                r["replicas"],
                r["puts_per_s"],
                r["p50_us"],
                r["p99_us"]
            ));
        }
    }
    Ok(true)
}
