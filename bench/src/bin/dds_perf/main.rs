//! dds_perf: DDS publish/subscribe throughput and latency, shaped like Cyclone DDS's
//! `ddsperf`.
//!
//! ```text
//! # one writer and N reader processes on this host, one JSON line per subscriber
//! # and a summary (the default mode, `local`):
//! cargo run --release -p bench --bin dds_perf -- --size 1024 --qos ordered --subscribers 1 --seconds 5
//! # round-trip latency (ping/pong through two topics), p50/p99:
//! cargo run --release -p bench --bin dds_perf -- --latency --size 128 --count 20000
//! # the same with readers that run their node's passes while they wait:
//! cargo run --release -p bench --bin dds_perf -- --latency --size 16 --latency-first
//! # or by hand in two terminals (the publisher waits for --subscribers readers):
//! dds_perf --role sub --id 1 --port 7110 --contact 127.0.0.1:7100
//! dds_perf --role pub --id 0 --port 7100 --subscribers 1
//! ```
//!
//! The writer fills each sample in a loan (a Pod array of `--size` bytes whose first
//! word is its number; no serialization) and writes as fast as the window allows
//! for `--seconds`, then a last sample that marks the end. Each reader reads every
//! sample in place (its first word, checked against the writer's order) and reports
//! samples/s and GB/s from its first to its last sample. With `--qos logged` the
//! run also times a plain sequential write of the same bytes to a file in the same
//! directory (the disk's baseline) and reports both.
//!
//! With `--clients K`, K subscriber clients (`spindle_dds::DomainClient`, over TCP) in
//! the parent process read the topic too, spread over the member readers; the
//! summary adds their rates (`client_samples_per_s`, `min_client_samples_per_s`),
//! the members' CPU and memory, and `view_changes_during_run` (which must be 0).
#![forbid(unsafe_code)]

mod clients;
mod latency;

use bench::{out, round};
use clap::Parser;
use serde_json::{json, Value};
use spindle_dds::DdsConfig;
use spindle_dds::{Batching, DataReader, DataWriter, DomainParticipant};
use spindle_dds::{History, Level, Qos};
use spindle_sst::sync::atomic::{AtomicU64, Ordering};
use spindle_sst::sync::lock;
use spindle_views::config::{Config, Transport};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::TransportKind;

#[derive(Parser, Debug, Clone)]
#[command(about = "DDS pub/sub throughput and latency over spindle, like ddsperf")]
struct Args {
    /// The group's secret file (see docs/security.md): every member (and the
    /// children this run starts, through `SPINDLE_SECRET_FILE`) authenticates.
    #[arg(long)]
    secret_file: Option<std::path::PathBuf>,
    /// `local` runs a writer and the readers as processes here; `pub` and `sub` run one
    /// role by hand.
    #[arg(long, default_value = "local", value_parser = ["local", "pub", "sub"])]
    role: String,
    /// Sample bytes: 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 10240, 16384,
    /// 32768, 65536 (a Pod type of that size, loaned), or 131072 up to 67108864 in
    /// powers of two (written in place into the writer's arena; throughput only).
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// QoS level: unordered, ordered, volatile, logged.
    #[arg(long, default_value = "ordered")]
    qos: Level,
    /// Reader processes.
    #[arg(long, default_value_t = 1)]
    subscribers: usize,
    /// Seconds of writing (throughput mode).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Round-trip latency instead of throughput.
    #[arg(long)]
    latency: bool,
    /// Round trips (latency mode).
    #[arg(long, default_value_t = 20_000)]
    count: u64,
    /// Transport: shm or tcp.
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Slots per writer ring; without it the ring is sized in bytes, as the QoS does.
    #[arg(long)]
    window: Option<u32>,
    /// How readers read each sample: `word` reads its first word in its slot (as
    /// Derecho's bandwidth test does), `full` copies the whole sample out.
    #[arg(long, default_value = "word", value_parser = ["word", "full"])]
    read: String,
    /// Throughput runs: the writer hands samples over N at a time with
    /// `DataWriter::write_batch`, which packs those that fit a slot into one
    /// message (0: one `write` of a loan per sample). Samples up to 64 KiB.
    #[arg(long, default_value_t = 0)]
    batch: usize,
    /// Throughput runs: the writer's batching on (`DataWriter::set_batching`,
    /// `Batching::UntilFlushed`): each single write joins an open pack, sent when
    /// full (the topic's slots are then 1 KB at least, as with `--batch`); the last
    /// is flushed at the end.
    #[arg(long)]
    batching: bool,
    /// As `--batching`, with `Batching::Within` this many microseconds.
    #[arg(long)]
    batching_within_us: Option<u64>,
    /// Payload bytes of a ring slot (at least the sample size). Without it: the
    /// sample size, or with `--batch` at least the default 1 KB so that packs fit.
    /// `--slot 1008` measures with the slots a topic has by default.
    #[arg(long)]
    slot: Option<u32>,
    /// Latency first: a reader's wait runs its node's predicate passes on the
    /// waiting thread (`spindle_views::config::Config::latency_first`).
    #[arg(long)]
    latency_first: bool,
    /// The predicate thread's settings.
    #[command(flatten)]
    polling: bench::Polling,
    /// Print JSON lines only.
    #[arg(long)]
    json: bool,
    /// Subscriber clients (outside the group, over TCP) besides the member readers
    /// (local mode, throughput only).
    #[arg(long, default_value_t = 0)]
    clients: usize,
    /// Manual roles: this participant's node id.
    #[arg(long, default_value_t = 0)]
    id: u32,
    /// Manual roles: control port on 127.0.0.1.
    #[arg(long, default_value_t = 7100)]
    port: u16,
    /// Manual roles: a member to join through.
    #[arg(long)]
    contact: Option<SocketAddr>,
    #[command(flatten)]
    member: bench::MemberArgs,
}

const SIZES: [usize; 14] = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 10240, 16384, 32768, 65536];
/// Samples larger than this are written in place and read into a heap buffer (a
/// Pod value of their size would not fit a thread's stack).
const POD_MAX: usize = 65536;
const END: u64 = u64::MAX;

fn main() {
    let args = Args::parse();
    if let Some(s) = &args.secret_file {
        // Before any thread: the members read it at start, the children inherit it.
        std::env::set_var(spindle_views::config::SECRET_ENV, s);
    }
    let large = args.size.is_power_of_two() && (POD_MAX * 2..=64 << 20).contains(&args.size);
    if !SIZES.contains(&args.size) && !large {
        bench::usage("dds_perf", &format!("--size must be one of {SIZES:?} or a power of two up to 64 MiB"));
    }
    if large && (args.latency || args.clients > 0) {
        bench::usage("dds_perf", "samples over 64 KiB: throughput runs between members only");
    }
    if args.subscribers == 0 || args.subscribers > 32 || args.seconds <= 0.0 || args.count == 0 {
        bench::usage("dds_perf", "--subscribers must be 1..=32, --seconds and --count positive");
    }
    if (args.batch > 0 || args.batching || args.batching_within_us.is_some()) && (large || args.latency) {
        bench::usage("dds_perf", "--batch and --batching are for throughput runs of samples up to 64 KiB");
    }
    if args.clients > 256 || (args.clients > 0 && args.latency) {
        bench::usage("dds_perf", "--clients must be at most 256, and with throughput runs only");
    }
    let r = match (args.member.child, args.role.as_str()) {
        (Some(id), _) => {
            testkit::die_with_parent();
            dispatch(&args, id, true).map(|_| true)
        }
        (None, "local") => parent(&args),
        (None, _) => dispatch(&args, args.id, false).map(|_| true),
    };
    bench::finish("dds_perf", r)
}

/// Runs this participant with a Pod sample of `--size` bytes.
fn dispatch(args: &Args, id: u32, child: bool) -> Result<(), String> {
    macro_rules! sized {
        ($($n:literal),*) => {
            match args.size {
                $($n => participant::<[u64; $n / 8]>(args, id, child),)*
                // Written in place (`--size` bytes); the Pod type is only the topic's.
                _ => participant::<[u64; 2]>(args, id, child),
            }
        };
    }
    sized!(16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 10240, 16384, 32768, 65536)
}

/// The topic's QoS: samples of `--size`; below 64 KiB they go in ring slots sized for
/// them (as before the arena existed), from 64 KiB on through the writer's arena.
/// With `--batch` or `--batching`, slots of the default 1 KB at least, so that packs of small
/// samples fit.
fn level_qos(args: &Args, size: usize) -> Qos {
    let base = Qos { level: args.qos, history: History::KeepLast(1024), window: args.window, ..Qos::default() };
    let slot = match args.slot {
        Some(s) => size.max(s as usize),
        None if args.batch > 0 || args.batching || args.batching_within_us.is_some() => {
            size.max(Qos::default().slot_sample_bytes as usize)
        }
        None => size,
    };
    let q = base.max_sample_bytes(slot as u32);
    if size < POD_MAX {
        q.slot_sample_bytes(slot as u32)
    } else {
        q
    }
}

/// Where Logged topics write: the parent's directory for a local run (it removes it).
fn log_dir() -> std::path::PathBuf {
    std::env::var_os("DDS_PERF_LOG_DIR")
        .map(Into::into)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("dds-perf-{}", std::process::id())))
}

fn participant<T: bytemuck::Pod + Send>(args: &Args, id: u32, child: bool) -> Result<(), String> {
    let b = if child {
        args.member.group_builder(id, &args.transport)?
    } else {
        let t = if args.transport == "tcp" { Transport::Tcp } else { Transport::Shm };
        let b = Config::builder(id, SocketAddr::from(([127, 0, 0, 1], args.port))).name("ddsperf").transport(t);
        match args.contact {
            Some(c) => b.contact(c),
            None => b,
        }
    };
    let b = args.polling.apply(b);
    let mut cfg = DdsConfig::new(b.latency_first(args.latency_first).build().map_err(|e| e.to_string())?);
    cfg.log_dir = log_dir();
    let p = DomainParticipant::new(cfg).map_err(|e| e.to_string())?;
    let qos = level_qos(args, args.size);
    let t0 = Instant::now();
    let data = p.pod_topic::<T>("perf", qos).map_err(|e| e.to_string())?;
    let topic_ms = t0.elapsed().as_secs_f64() * 1e3;
    if args.clients > 0 {
        p.serve_clients(&data, false).map_err(|e| e.to_string())?;
    }
    let is_pub = if child { id == 0 } else { args.role == "pub" };
    let mut held = None;
    let result = if args.latency {
        let pong = p.pod_topic::<T>("perf-pong", qos).map_err(|e| e.to_string())?;
        if is_pub {
            latency::latency_pub(args, &p, &data, &pong, child)?
        } else {
            latency::latency_sub(args, &p, &data, &pong, id, child)?
        }
    } else if is_pub {
        let (mut v, w) = throughput_pub(args, &p, &data, child)?;
        v["topic_create_ms"] = json!(round(topic_ms, 2));
        // The writer stays until the process exits: its removal is a view change,
        // which the readers must not count in their run.
        held = Some(w);
        v
    } else {
        throughput_sub(args, &p, &data, id, child)?
    };
    if child {
        println!("RESULT {result}");
        testkit::wait_for_parent();
    } else {
        out(&result.to_string());
    }
    drop(held);
    Ok(())
}

/// Waits until the topic has `readers` readers and `writers` writers in the view.
fn wait_for_endpoints(p: &DomainParticipant, topic: &str, readers: usize, writers: usize) -> Result<(), String> {
    if p.wait_for_matched(topic, writers, readers, Duration::from_secs(120)).is_ok() {
        Ok(())
    } else {
        Err(format!("topic {topic} did not get {readers} readers and {writers} writers"))
    }
}

fn joined(child: bool) -> Result<(), String> {
    if child {
        println!("JOINED");
        if testkit::wait_for_parent() != "GO" {
            return Err("expected GO".into());
        }
    }
    Ok(())
}

fn throughput_pub<T: bytemuck::Pod>(
    args: &Args,
    p: &DomainParticipant,
    topic: &spindle_dds::Topic<T>,
    child: bool,
) -> Result<(Value, DataWriter<T>), String> {
    let t0 = Instant::now();
    let w = p.create_writer(topic, topic.qos()).map_err(|e| e.to_string())?;
    let writer_ms = t0.elapsed().as_secs_f64() * 1e3;
    let batching = match (args.batching_within_us, args.batching) {
        (Some(us), _) => Batching::Within(Duration::from_micros(us)),
        (None, true) => Batching::UntilFlushed,
        (None, false) => Batching::Off,
    };
    w.set_batching(batching).map_err(|e| e.to_string())?;
    wait_for_endpoints(p, "perf", args.subscribers, 1)?;
    joined(child)?;
    let run = if args.clients > 0 { Some(clients::MemberRun::start(p, child)?) } else { None };
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(args.seconds);
    let mut n = 0u64;
    // A large sample: every byte written once, straight into the writer's arena.
    let mut big = vec![0x5au8; if args.size > POD_MAX { args.size } else { 0 }];
    let mut send = |k: u64| -> Result<(), String> {
        if big.is_empty() {
            let mut loan = w.loan().map_err(|e| e.to_string())?;
            bytemuck::cast_slice_mut::<T, u64>(std::slice::from_mut(&mut *loan))[0] = k;
            loan.write().map(|_| ()).map_err(|e| e.to_string())
        } else {
            big[..8].copy_from_slice(&k.to_le_bytes());
            w.write_in_place(big.len(), |s| s.write(0, &big)).map(|_| ()).map_err(|e| e.to_string())
        }
    };
    let batch = if args.size > POD_MAX { 1 } else { 256 };
    let mut many: Vec<T> = vec![T::zeroed(); args.batch];
    while Instant::now() < until {
        if !many.is_empty() {
            for (k, s) in many.iter_mut().enumerate() {
                bytemuck::cast_slice_mut::<T, u64>(std::slice::from_mut(s))[0] = n + k as u64;
            }
            w.write_batch(&many).map_err(|e| e.to_string())?;
            n += many.len() as u64;
            continue;
        }
        for _ in 0..batch {
            send(n)?;
            n += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    send(END)?;
    w.wait_for_delivery(Duration::from_secs(60));
    let mut v = json!({
        "role": "pub", "samples": n, "secs": round(secs, 3), "samples_per_s": round(n as f64 / secs, 0),
        "writer_create_ms": round(writer_ms, 2),
    });
    if let Some(r) = run {
        r.finish(p, r.view_changes(p), &mut v);
    }
    Ok((v, w))
}

/// What a reader of the run counted: samples, those out of the writer's order,
/// and when the first and the end marker came.
#[derive(Default)]
pub(crate) struct Count {
    pub(crate) n: AtomicU64,
    pub(crate) out_of_order: AtomicU64,
    pub(crate) first: Mutex<Option<Instant>>,
    pub(crate) last: Mutex<Option<Instant>>,
}

impl Count {
    /// A sample whose first word is `w`; `expect` is the reader's next number.
    pub(crate) fn see(&self, w: u64, expect: &mut u64) {
        if w == END {
            *lock(&self.last) = Some(Instant::now());
            return;
        }
        if *expect == 0 {
            *lock(&self.first) = Some(Instant::now());
        }
        if w != *expect {
            self.out_of_order.fetch_add(1, Ordering::Relaxed);
        }
        *expect = w + 1;
        // One thread counts (the reader's listener runs on its node's delivery
        // thread): a plain store, as a subscriber that only counts would do, not a
        // locked add per sample.
        self.n.store(self.n.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
}

fn throughput_sub<T: bytemuck::Pod + Send>(
    args: &Args,
    p: &DomainParticipant,
    topic: &spindle_dds::Topic<T>,
    id: u32,
    child: bool,
) -> Result<Value, String> {
    let r: DataReader<T> = p.create_reader(topic, topic.qos()).map_err(|e| e.to_string())?;
    let c = Arc::new(Count::default());
    let c2 = c.clone();
    let mut expect = 0u64;
    let full = args.read == "full";
    let mut sample = T::zeroed();
    let mut big = vec![0u8; if args.size > POD_MAX { args.size } else { 0 }];
    r.on_sample_in_place(move |s| {
        let w = if full && !big.is_empty() {
            // Every byte copied out of the writer's arena.
            if s.len() != big.len() {
                return;
            }
            s.read_bytes(0, &mut big);
            u64::from_le_bytes(big[..8].try_into().expect("8 bytes"))
        } else if full {
            if s.read_pod(&mut sample).is_err() {
                return;
            }
            bytemuck::cast_slice::<T, u64>(std::slice::from_ref(&sample))[0]
        } else {
            s.word(0).unwrap_or_default() // a sample under 8 bytes: a gap in the count
        };
        c2.see(w, &mut expect);
    });
    joined(child)?;
    let run = if args.clients > 0 { Some(clients::MemberRun::start(p, child)?) } else { None };
    let done = testkit::poll_until(Duration::from_secs_f64(args.seconds + 120.0), Duration::from_millis(5), || {
        c.last.lock().unwrap_or_else(|p| p.into_inner()).is_some() || p.group().stopped().is_some()
    });
    if !done {
        return Err("no end marker".into());
    }
    let changes = run.as_ref().map(|r| r.view_changes(p));
    let n = c.n.load(Ordering::Relaxed);
    let first = c.first.lock().unwrap_or_else(|p| p.into_inner()).ok_or("no samples")?;
    let last = c.last.lock().unwrap_or_else(|p| p.into_inner());
    let last = last.ok_or_else(|| match p.group().stopped() {
        Some(why) => format!("no end: this member stopped: {why}"),
        None => "no end".into(),
    })?;
    let secs = (last - first).as_secs_f64().max(1e-9);
    let rate = n as f64 / secs;
    let mut v = json!({
        "role": "sub", "node": id, "samples": n, "secs": round(secs, 3),
        "samples_per_s": round(rate, 0), "gb_per_s": round(rate * args.size as f64 / 1e9, 4),
        "out_of_order": c.out_of_order.load(Ordering::Relaxed), "lost": r.status().lost,
    });
    if let Some(run) = run {
        // The clients may still be reading: give them until they say so (bounded).
        std::thread::sleep(Duration::from_millis(200));
        run.finish(p, changes.unwrap_or(0), &mut v);
    }
    Ok(v)
}

/// A plain sequential write of `samples` records of `size` bytes (as the log frames
/// them) to a file in the log directory, with the log's fsync policy: the disk's
/// figure to compare the Logged level against.
fn disk_baseline(size: usize, samples: u64) -> Result<f64, String> {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("dds-perf-disk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join("baseline");
    let mut f = std::fs::File::create(&path).map_err(|e| e.to_string())?;
    let rec = vec![0x5au8; spindle_dds::log::SAMPLE_RECORD_OVERHEAD + size];
    let start = Instant::now();
    for i in 0..samples {
        f.write_all(&rec).map_err(|e| e.to_string())?;
        if (i + 1) % 64 == 0 {
            f.sync_data().map_err(|e| e.to_string())?;
        }
    }
    f.sync_data().map_err(|e| e.to_string())?;
    let secs = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(samples as f64 / secs)
}

fn parent(args: &Args) -> Result<bool, String> {
    testkit::catch_interrupts();
    spindle_sst::transport::shm::remove_stale_files();
    let n = 1 + args.subscribers;
    let dir = log_dir();
    let mut kids = bench::start_members(
        n,
        TransportKind::Shm,
        Duration::from_secs(900),
        &[],
        &[],
        &[("DDS_PERF_LOG_DIR", dir.as_os_str())],
    )?;
    let client_results = if args.clients > 0 {
        let all: Vec<usize> = (0..n).collect();
        let addrs = kids.expect_lines("LISTEN ", &all).map_err(|e| e.to_string())?;
        let addrs: Vec<SocketAddr> =
            addrs.iter().map(|a| a.parse().map_err(|_| format!("bad address {a:?}"))).collect::<Result<_, _>>()?;
        let limit = Duration::from_secs_f64(args.seconds + 120.0);
        let start = || kids.tell_all("START").map_err(|e| e.to_string());
        Some(run_clients(args, &addrs[1..], limit, start)?)
    } else {
        None
    };
    let (results, exited_ok) = bench::collect_results(kids, n)?;
    let mut summary = json!({
        "bench": "dds_perf", "transport": args.transport, "qos": args.qos.name(), "size": args.size,
        "subscribers": args.subscribers, "mode": if args.latency { "latency" } else { "throughput" },
        "read": args.read, "batch": args.batch, "batching": args.batching, "batching_within_us": args.batching_within_us, "slot": args.slot,
        "latency_first": args.latency_first,
    });
    if args.clients > 0 && args.latency {
        return Err("--clients is for throughput runs".into());
    }
    if args.latency {
        for k in ["rtt_p50_us", "rtt_p99_us", "rtt_p999_us", "round_trips"] {
            summary[k] = results[0][k].clone();
        }
    } else {
        let subs: Vec<&Value> = results.iter().filter(|r| r["role"] == "sub").collect();
        for s in &subs {
            if !args.json {
                out(&s.to_string());
            }
        }
        let rates: Vec<f64> = subs.iter().map(|s| s["samples_per_s"].as_f64().unwrap_or(0.0)).collect();
        let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
        let mean = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
        summary["samples_per_s_per_sub"] = json!(round(mean, 0));
        summary["min_samples_per_s"] = json!(round(min, 0));
        summary["gb_per_s_per_sub"] = json!(round(mean * args.size as f64 / 1e9, 4));
        summary["written"] = results[0]["samples"].clone();
        summary["topic_create_ms"] = results[0]["topic_create_ms"].clone();
        summary["writer_create_ms"] = results[0]["writer_create_ms"].clone();
        let written = results[0]["samples"].as_u64().unwrap_or(0);
        summary["all_received_in_order"] = json!(subs
            .iter()
            .all(|s| s["samples"].as_u64() == Some(written) && s["out_of_order"] == 0 && s["lost"] == 0));
        if let Some(cs) = &client_results {
            let rates: Vec<f64> = cs.iter().map(|c| c["samples_per_s"].as_f64().unwrap_or(0.0)).collect();
            summary["clients"] = json!(args.clients);
            summary["client_samples_per_s"] = json!(rates);
            summary["min_client_samples_per_s"] = json!(rates.iter().copied().fold(f64::INFINITY, f64::min));
            summary["aggregate_client_samples_per_s"] = json!(round(rates.iter().sum::<f64>(), 0));
            let all = |k: &str| results.iter().map(|r| r[k].clone()).collect::<Vec<_>>();
            summary["member_cpu_pct"] = json!(all("cpu_pct"));
            summary["member_rss_mb_start"] = json!(all("rss_mb_start"));
            summary["member_rss_mb_end"] = json!(all("rss_mb_end"));
            summary["member_view_changes"] = json!(all("view_changes_during_run"));
            summary["clients_dropped"] =
                json!(results.iter().map(|r| r["clients_dropped"].as_u64().unwrap_or(0)).sum::<u64>());
            summary["view_changes_during_run"] =
                json!(results.iter().map(|r| r["view_changes_during_run"].as_u64().unwrap_or(0)).sum::<u64>());
            let clients_ok = cs.iter().all(|c| {
                c["samples"].as_u64() == Some(written) && c["out_of_order"] == 0 && c["lost"] == 0 && c["ended"] == true
            });
            let members_ok = summary["all_received_in_order"] == true;
            summary["all_received_in_order"] = json!(members_ok && clients_ok);
        }
        if args.qos == Level::Logged {
            let base = disk_baseline(args.size, written.clamp(1000, 2_000_000))?;
            summary["disk_baseline_samples_per_s"] = json!(round(base, 0));
            summary["fraction_of_disk"] = json!(round(mean / base, 3));
        }
    }
    let _ = std::fs::remove_dir_all(log_dir());
    out(&summary.to_string());
    let no_changes = summary["view_changes_during_run"].as_u64().map_or(true, |c| c == 0);
    Ok(exited_ok && summary["all_received_in_order"] != false && no_changes)
}

/// [`clients::run`] with the sample type of `--size`.
fn run_clients(
    args: &Args,
    addrs: &[SocketAddr],
    limit: Duration,
    start: impl FnOnce() -> Result<(), String>,
) -> Result<Vec<Value>, String> {
    macro_rules! sized {
        ($($n:literal),*) => {
            match args.size {
                $($n => clients::run::<[u64; $n / 8]>(args.clients, addrs, limit, start),)*
                _ => unreachable!("sizes are checked"),
            }
        };
    }
    sized!(16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 10240, 16384, 32768, 65536)
}
