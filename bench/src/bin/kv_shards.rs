//! kv_shards: the sharded key-value store (`spindle_kv::shard`) on this machine:
//! three members as threads of this process over shm, clients that route each
//! operation to its key's shard primary over the members' client sessions
//! (loopback tcp).
//!
//! ```text
//! cargo run --release -p bench --bin kv_shards                       # both experiments
//! cargo run --release -p bench --bin kv_shards -- --json --shards 1,2,4 --seconds 3
//! cargo run --release -p bench --bin kv_shards -- --no-scale --keys 20000 --value 1000
//! ```
//!
//! - **scale**: `--clients` closed-loop clients put `--value`-byte values on
//!   random keys for `--seconds`, once per shard count in `--shards` (each shard
//!   a log on `--replicas` of the three members). Row: `puts_per_s`, `p50_us`,
//!   `p99_us`, the members each shard's primary is on, and `cpu_us_per_put`: the
//!   CPU time of the whole process (members and clients) per put.
//! - **migrate**: two shards; `--keys` keys of `--value` bytes are put, then the
//!   clients run half puts, half gets, and after `--seconds` shard 0's whole part
//!   moves to shard 1 while they go on, and for `--seconds` after it ended. Row:
//!   the migration's keys and bytes pulled, its duration and MB/s, for the
//!   phases before, during and after it operations/s and p50/p99/p999 latency
//!   (of all operations, and of puts and gets apart), and the operations/s of
//!   every 100 ms through the three phases (`plots --kv-migration` draws them).
//!
//! All members share this process and its two cores with the clients: the
//! figures are the store's on one small host, not a model of a larger one.
#![forbid(unsafe_code)]

use bench::{out, round, Latency};
use clap::Parser;
use serde_json::json;
use spindle_kv::shard::client::ShardClient;
use spindle_kv::shard::host::{HostConfig, ShardHost};
use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_views::config::{Config, Transport};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "The sharded key-value store: throughput by shard count, and a live migration under load")]
struct Args {
    /// Shard counts for the scale experiment.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    shards: Vec<u16>,
    /// Closed-loop client threads.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Seconds per measurement (and per phase of the migration).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Value bytes.
    #[arg(long, default_value_t = 100)]
    value: usize,
    /// Copies of each shard's log.
    #[arg(long, default_value_t = 2)]
    replicas: usize,
    /// Keys put before the migration.
    #[arg(long, default_value_t = 20_000)]
    keys: u64,
    /// The share of the time a migration's puller works (`HostConfig::pull_share`).
    #[arg(long, default_value_t = 0.25)]
    pull_share: f64,
    /// Records a migration pulls per batch (`HostConfig::pull_batch`).
    #[arg(long, default_value_t = spindle_kv::shard::puller::BATCH_KEYS)]
    pull_batch: u32,
    /// Bytes of each shard log's buffers (`HostConfig::buffer`; default: its default).
    #[arg(long)]
    log_buffer: Option<usize>,
    /// A migration asks for one batch at a time instead of asking for the next
    /// while the last is logged (`HostConfig::pull_ahead`).
    #[arg(long)]
    no_pull_ahead: bool,
    /// Skip the scale experiment.
    #[arg(long)]
    no_scale: bool,
    /// Skip the migration experiment.
    #[arg(long)]
    no_migrate: bool,
    /// One JSON line per row (else readable lines).
    #[arg(long)]
    json: bool,
}

const WAIT: Duration = Duration::from_secs(60);
/// The width of a bucket of the migration's timeline.
const TIMELINE_STEP: Duration = Duration::from_millis(100);

fn members(name: &str, dir: &std::path::Path, shards: u16, args: &Args) -> Result<Vec<ShardHost>, String> {
    let mut hosts: Vec<ShardHost> = Vec::new();
    for id in 0..3u32 {
        let mut b = Config::builder(id, testkit::free_control_addr())
            .name(name)
            .transport(Transport::Shm)
            .timeouts(Duration::from_millis(100), Duration::from_secs(2));
        if let Some(h) = hosts.first() {
            b = b.contact(h.group().listen_addr());
        }
        let base = HostConfig::new(dir.join(format!("m{id}")), shards);
        let cfg = HostConfig {
            replicas: args.replicas,
            pull_share: args.pull_share,
            pull_batch: args.pull_batch,
            pull_ahead: !args.no_pull_ahead,
            buffer: args.log_buffer.unwrap_or(base.buffer),
            ..base
        };
        hosts.push(ShardHost::start(b.build().map_err(|e| e.to_string())?, cfg).map_err(|e| e.to_string())?);
    }
    if !hosts[0].group().wait_for_members(3, WAIT) {
        return Err("the members did not form one group".into());
    }
    Ok(hosts)
}

/// This process's CPU time so far (user and system), from `/proc/self/stat`;
/// `None` where it cannot be read.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which may hold spaces) end its parentheses.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // In clock ticks of USER_HZ, which Linux exposes as 100 per second.
    Some(Duration::from_millis(ticks * 10))
}

fn key(i: u64) -> Vec<u8> {
    format!("user{:012}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % 1_000_000_000).into_bytes()
}

/// Each completed operation: when it ended, how long it took, and whether it
/// was a put (else a get).
type Samples = Vec<(Instant, Duration, bool)>;

/// Runs `clients` closed-loop threads of `op(client, i)` until `stop`; returns
/// every operation's end and latency.
fn run_clients(
    clients: &[ShardClient],
    stop: &AtomicBool,
    op: &(dyn Fn(&ShardClient, u64) -> Result<bool, String> + Sync),
    during: impl FnOnce(),
) -> Result<Samples, String> {
    let all = Mutex::new(Vec::new());
    std::thread::scope(|s| -> Result<(), String> {
        let workers: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(c, client)| {
                let all = &all;
                s.spawn(move || -> Result<(), String> {
                    let mut mine = Vec::new();
                    let mut i = (c as u64) << 40;
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        let put = op(client, i)?;
                        mine.push((Instant::now(), t.elapsed(), put));
                        i += 1;
                    }
                    all.lock().map_err(|_| "poisoned")?.extend(mine);
                    Ok(())
                })
            })
            .collect();
        during();
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().map_err(|_| "a client panicked".to_string())??;
        }
        Ok(())
    })?;
    all.into_inner().map_err(|_| "poisoned".to_string())
}

/// Operations/s and latency of the samples that ended in `[from, to)`: of all,
/// and of the puts and the gets apart.
fn phase(samples: &Samples, from: Instant, to: Instant) -> serde_json::Value {
    let (mut all, mut puts, mut gets) = (Latency::default(), Latency::default(), Latency::default());
    for (_, d, put) in samples.iter().filter(|(e, _, _)| *e >= from && *e < to) {
        all.record(*d);
        if *put { &mut puts } else { &mut gets }.record(*d);
    }
    let secs = to.duration_since(from).as_secs_f64().max(1e-9);
    let pcts = |l: &Latency| {
        json!({
            "p50_us": round(l.quantile_us(0.5), 1),
            "p99_us": round(l.quantile_us(0.99), 1),
            "p999_us": round(l.quantile_us(0.999), 1),
        })
    };
    let mut v = pcts(&all);
    v["ops_per_s"] = json!(round(all.len() as f64 / secs, 0));
    v["put"] = pcts(&puts);
    v["get"] = pcts(&gets);
    v
}

/// The longest time in `[from, to)` in which no operation completed, in ms
/// (a move's stalls: its view changes and the wait for its pull to begin).
fn longest_gap(samples: &Samples, from: Instant, to: Instant) -> f64 {
    let mut ends: Vec<Instant> = samples.iter().map(|(e, _, _)| *e).filter(|e| *e >= from && *e < to).collect();
    ends.sort();
    ends.push(to);
    let mut last = from;
    let mut gap = Duration::ZERO;
    for e in ends {
        gap = gap.max(e.duration_since(last));
        last = e;
    }
    round(gap.as_secs_f64() * 1e3, 1)
}

/// Operations/s in each `step` from `from` to `to` (for a chart of a run).
fn timeline(samples: &Samples, from: Instant, to: Instant, step: Duration) -> Vec<f64> {
    let n = (to.duration_since(from).as_secs_f64() / step.as_secs_f64()).ceil() as usize;
    let mut counts = vec![0u64; n];
    for (end, _, _) in samples.iter().filter(|(e, _, _)| *e >= from && *e < to) {
        let i = (end.duration_since(from).as_secs_f64() / step.as_secs_f64()) as usize;
        if let Some(c) = counts.get_mut(i) {
            *c += 1;
        }
    }
    counts.iter().map(|c| round(*c as f64 / step.as_secs_f64(), 0)).collect()
}

fn connect(hosts: &[ShardHost], n: usize) -> Result<Vec<ShardClient>, String> {
    let contacts: Vec<_> = hosts.iter().map(|h| h.group().listen_addr()).collect();
    (0..n).map(|_| ShardClient::connect(&contacts, None).map_err(|e| e.to_string())).collect()
}

fn scale(args: &Args, shards: u16) -> Result<serde_json::Value, String> {
    let dirs = testkit::TempDirs::new(&format!("kvsc{shards}"), 1);
    let hosts = members(&format!("kvsc{shards}-{}", std::process::id()), &dirs[0], shards, args)?;
    let clients = connect(&hosts, args.clients)?;
    let v = vec![b'v'; args.value];
    let stop = AtomicBool::new(false);
    let mut window = (Instant::now(), Instant::now());
    let mut cpu = (None, None);
    let samples =
        run_clients(&clients, &stop, &|c, i| c.put(&key(i), &v).map(|_| true).map_err(|e| e.to_string()), || {
            std::thread::sleep(Duration::from_millis(500));
            window.0 = Instant::now();
            cpu.0 = cpu_time();
            std::thread::sleep(Duration::from_secs_f64(args.seconds));
            window.1 = Instant::now();
            cpu.1 = cpu_time();
        })?;
    let route = clients[0].route().ok_or("no route")?;
    let p = phase(&samples, window.0, window.1);
    let puts = p["ops_per_s"].as_f64().unwrap_or(0.0) * window.1.duration_since(window.0).as_secs_f64();
    // CPU per put of everything in this process (members and clients): what
    // the model of a larger host divides its cores by.
    let cpu_us = match cpu {
        (Some(a), Some(b)) if puts > 0.0 => Some(round(b.saturating_sub(a).as_secs_f64() * 1e6 / puts, 1)),
        _ => None,
    };
    Ok(json!({
        "bench": "kv_shards", "experiment": "scale", "shards": shards, "replicas": args.replicas,
        "clients": args.clients, "value_bytes": args.value, "puts_per_s": p["ops_per_s"], "p50_us": p["p50_us"],
        "p99_us": p["p99_us"], "primaries": route.primaries.iter().map(|p| p.map(|x| x.0)).collect::<Vec<_>>(),
        "cpu_us_per_put": cpu_us,
    }))
}

/// The id of the view `h`'s group runs (0 without one).
fn view_id(h: &ShardHost) -> u64 {
    h.group().view().map_or(0, |v| v.id().0)
}

fn migrate(args: &Args) -> Result<serde_json::Value, String> {
    let dirs = testkit::TempDirs::new("kvmig", 1);
    let hosts = members(&format!("kvmig-{}", std::process::id()), &dirs[0], 2, args)?;
    let clients = connect(&hosts, args.clients)?;
    let v = vec![b'v'; args.value];
    // The keys first, from every client at once.
    let per = args.keys.div_ceil(args.clients as u64);
    std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(c, client)| {
                let v = &v;
                s.spawn(move || -> Result<(), String> {
                    for i in (c as u64 * per)..((c as u64 + 1) * per).min(args.keys) {
                        client.put(&key(i), v).map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().map_err(|_| "a loader panicked".to_string())?)
    })?;
    let (map, _) = hosts[0].map();
    let range = map.spans().into_iter().find(|(_, o)| *o == 0).ok_or("shard 0 owns nothing")?.0;
    let stop = AtomicBool::new(false);
    let keys = args.keys;
    let mut marks = Vec::new();
    let mut moved = Ok(());
    let mut moved_at = None;
    let mut views = Vec::new();
    let samples = run_clients(
        &clients,
        &stop,
        &|c, i| {
            let k = key(i % keys);
            match i % 2 {
                0 => c.put(&k, &v).map(|_| true).map_err(|e| e.to_string()),
                _ => c.get(&k).map(|_| false).map_err(|e| e.to_string()),
            }
        },
        || {
            std::thread::sleep(Duration::from_millis(500));
            marks.push(Instant::now());
            std::thread::sleep(Duration::from_secs_f64(args.seconds));
            marks.push(Instant::now());
            views.push(view_id(&hosts[0]));
            moved = hosts[1].migrate(range, 1, WAIT).map_err(|e| e.to_string()).and_then(|_| {
                moved_at = Some(Instant::now());
                match hosts.iter().all(|h| h.wait_migrations(WAIT)) {
                    true => Ok(()),
                    false => Err("the migration did not end".to_string()),
                }
            });
            marks.push(Instant::now());
            views.push(view_id(&hosts[0]));
            std::thread::sleep(Duration::from_secs_f64(args.seconds));
            marks.push(Instant::now());
        },
    )?;
    moved?;
    let (keys_pulled, bytes) = hosts.iter().map(|h| h.pulled()).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let secs = marks[2].duration_since(marks[1]).as_secs_f64();
    Ok(json!({
        "bench": "kv_shards", "experiment": "migrate", "replicas": args.replicas, "clients": args.clients,
        "pull_share": args.pull_share, "pull_batch": args.pull_batch, "pull_ahead": !args.no_pull_ahead,
        "log_buffer": args.log_buffer.unwrap_or(HostConfig::new("", 1).buffer),
        "value_bytes": args.value, "keys": args.keys, "keys_pulled": keys_pulled, "bytes_pulled": bytes,
        "migration_s": round(secs, 3), "migration_mb_per_s": round(bytes as f64 / secs / 1e6, 2),
        "ownership_moved_s": moved_at.map(|t| round(t.duration_since(marks[1]).as_secs_f64(), 3)),
        "before": phase(&samples, marks[0], marks[1]), "during": phase(&samples, marks[1], marks[2]),
        "after": phase(&samples, marks[2], marks[3]),
        "longest_gap_ms_during": longest_gap(&samples, marks[1], marks[2]),
        // Views member 0 installed from the move's request to its end (two when
        // nothing else changed: the edits that start and end it).
        "views_during": views.get(1).zip(views.first()).map(|(b, a)| b.saturating_sub(*a)),
        // Operations/s every TIMELINE_STEP from the start of the phase before.
        "timeline_step_s": TIMELINE_STEP.as_secs_f64(),
        "timeline_ops_per_s": timeline(&samples, marks[0], marks[3], TIMELINE_STEP),
        "migration_from_s": round(marks[1].duration_since(marks[0]).as_secs_f64(), 3),
        "migration_to_s": round(marks[2].duration_since(marks[0]).as_secs_f64(), 3),
    }))
}

fn print(args: &Args, row: &serde_json::Value) {
    if args.json {
        out(&row.to_string());
    } else {
        out(&serde_json::to_string_pretty(row).unwrap_or_default());
    }
}

fn main() {
    let args = Args::parse();
    if args.clients == 0 || args.clients > 256 || !(args.seconds > 0.0 && args.seconds <= 600.0) {
        bench::usage("kv_shards", "--clients must be 1..=256 and --seconds in (0, 600]");
    }
    if args.shards.iter().any(|s| *s == 0 || *s > 16) || args.value == 0 || args.replicas == 0 || args.replicas > 3 {
        bench::usage("kv_shards", "--shards must be 1..=16, --value at least 1, --replicas 1..=3");
    }
    if !(args.pull_share > 0.0 && args.pull_share <= 1.0) || args.pull_batch == 0 {
        bench::usage("kv_shards", "--pull-share must be in (0, 1] and --pull-batch at least 1");
    }
    let run = || -> Result<bool, String> {
        if !args.no_scale {
            for s in &args.shards {
                bench::err(&format!("kv_shards: {s} shard(s), {} clients, {} s", args.clients, args.seconds));
                print(&args, &scale(&args, *s)?);
            }
        }
        if !args.no_migrate {
            bench::err(&format!("kv_shards: migration of shard 0's part under load ({} keys first)", args.keys));
            print(&args, &migrate(&args)?);
        }
        Ok(true)
    };
    bench::finish("kv_shards", run())
}
