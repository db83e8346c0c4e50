//! dds_keyed: throughput of a keyed topic, one writer process and one reader
//! process on this host, shaped like Cyclone DDS's `ddsperf -TKS -n N` (a keyed
//! topic: sequence number, key, octets).
//!
//! ```text
//! cargo run --release -p bench --bin dds_keyed -- --instances 1,1000,100000 --size 128 --seconds 5
//! cargo run --release -p bench --bin dds_keyed -- --instances 1 --read take,stream --json
//! ```
//!
//! The sample is a Pod of `--size` bytes: word 0 its number, word 1 its key (the
//! instance, `number % instances`), keyed by those 8 bytes. The writer writes as
//! fast as the window allows for `--seconds`, cycling through the instances; the
//! reader takes every sample (`take`: batches of up to 1024; `stream`: the same
//! reader's `futures::Stream`, on a `futures` executor) and checks that each
//! instance's samples come in order. One JSON line per run: samples/s at the
//! reader, the reader process's memory before the run and at its end (RSS), and
//! the samples it lost or saw out of order (both must be 0).
#![forbid(unsafe_code)]

use bench::{out, round, MemberArgs};
use clap::Parser;
use futures::StreamExt;
use serde_json::{json, Value};
use spindle_dds::DdsConfig;
use spindle_dds::{DataReader, DomainParticipant, Sample};
use spindle_dds::{History, Qos};
use std::time::{Duration, Instant};
use testkit::TransportKind;

#[derive(Parser, Debug, Clone)]
#[command(about = "Keyed-topic throughput with many instances, like ddsperf -TKS -n N")]
struct Args {
    /// Instances (comma separated: one run each).
    #[arg(long, value_delimiter = ',', default_value = "1,1000,100000")]
    instances: Vec<u64>,
    /// Sample bytes: 32, 128, 1024.
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// Seconds of writing per run.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// How the reader reads (comma separated: one run each): take, stream.
    #[arg(long, value_delimiter = ',', default_value = "take")]
    read: Vec<String>,
    /// Transport: shm or tcp.
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Rounds of every run (the runs interleave).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// JSON lines only.
    #[arg(long)]
    json: bool,
    /// (internal) this run's instances and read mode, for a member.
    #[arg(long, hide = true)]
    run: Option<String>,
    #[command(flatten)]
    member: MemberArgs,
}

const END: u64 = u64::MAX;

fn main() {
    let args = Args::parse();
    if ![32, 128, 1024].contains(&args.size) || args.seconds <= 0.0 || args.instances.contains(&0) {
        bench::usage("dds_keyed", "--size must be 32, 128 or 1024; --seconds and --instances positive");
    }
    if args.read.iter().any(|r| r != "take" && r != "stream") {
        bench::usage("dds_keyed", "--read takes take and stream");
    }
    bench::run_parent_or_member("dds_keyed", &args.member, |id| member(&args, id), || parent(&args))
}

fn member(args: &Args, id: u32) -> Result<(), String> {
    match args.size {
        32 => run_member::<[u64; 4]>(args, id),
        128 => run_member::<[u64; 16]>(args, id),
        _ => run_member::<[u64; 128]>(args, id),
    }
}

/// The resident memory of this process, in MiB.
fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<f64>().ok()))
        .map_or(0.0, |kb| kb / 1024.0)
}

fn run_member<T: bytemuck::Pod + Send>(args: &Args, id: u32) -> Result<(), String> {
    let run = args.run.clone().ok_or("no --run")?;
    let (instances, read) = run.split_once(':').ok_or("bad --run")?;
    let instances: u64 = instances.parse().map_err(|_| "bad --run")?;
    let cfg = args.member.group_config(id, &args.transport, Duration::from_millis(100), Duration::from_secs(5))?;
    let mut cfg = DdsConfig::new(cfg);
    cfg.log_dir = std::env::temp_dir().join(format!("dds-keyed-{}", std::process::id()));
    let p = DomainParticipant::new(cfg).map_err(|e| e.to_string())?;
    let size = std::mem::size_of::<T>() as u32;
    let qos = Qos::ordered().max_sample_bytes(size + 16).slot_sample_bytes(size + 16);
    let topic = p.keyed_pod_topic::<T>("keyed", qos, 8..16).map_err(|e| e.to_string())?;
    let result = if id == 0 {
        let w = p.create_writer(&topic, qos).map_err(|e| e.to_string())?;
        if p.wait_for_matched("keyed", 1, 1, Duration::from_secs(120)).is_err() {
            return Err("no reader came".into());
        }
        go()?;
        let mut v = T::zeroed();
        let words: &mut [u64] = bytemuck::cast_slice_mut(bytemuck::bytes_of_mut(&mut v));
        let until = Instant::now() + Duration::from_secs_f64(args.seconds);
        let mut n = 0u64;
        while Instant::now() < until {
            for _ in 0..256 {
                (words[0], words[1]) = (n, n % instances);
                w.write(bytemuck::from_bytes(bytemuck::cast_slice(words))).map_err(|e| e.to_string())?;
                n += 1;
            }
        }
        (words[0], words[1]) = (END, 0);
        w.write(bytemuck::from_bytes(bytemuck::cast_slice(words))).map_err(|e| e.to_string())?;
        w.wait_for_delivery(Duration::from_secs(60));
        json!({"role": "pub", "written": n})
    } else {
        let r = p.create_reader(&topic, Qos::ordered().history(History::KeepAll)).map_err(|e| e.to_string())?;
        let before = rss_mb();
        go()?;
        let mut tally = Tally::new(instances);
        if read == "stream" {
            futures::executor::block_on(async {
                let mut s = r.stream();
                while let Some(x) = s.next().await {
                    if !tally.see(&x) {
                        break;
                    }
                }
            });
        } else {
            take_all(&r, &mut tally);
        }
        let secs = tally.first.map_or(0.0, |f| f.elapsed().as_secs_f64());
        let st = r.status();
        json!({"role": "sub", "samples": tally.n, "samples_per_s": round(tally.n as f64 / secs.max(1e-9), 0),
               "out_of_order": tally.out_of_order, "lost": st.lost, "instances_seen": st.instances,
               "rss_mb_before": round(before, 1), "rss_mb_end": round(rss_mb(), 1)})
    };
    println!("RESULT {result}");
    testkit::wait_for_parent();
    Ok(())
}

/// Says this member is ready and waits for the run's start (every member ready;
/// see `testkit::ChildSet::start`).
fn go() -> Result<(), String> {
    println!("JOINED");
    match testkit::wait_for_parent().as_str() {
        "GO" => Ok(()),
        other => Err(format!("expected GO, got {other:?}")),
    }
}

/// What the reader counts: samples, the first one's time, order per instance.
struct Tally {
    n: u64,
    first: Option<Instant>,
    last_of: Vec<u64>,
    out_of_order: u64,
}

impl Tally {
    fn new(instances: u64) -> Tally {
        Tally { n: 0, first: None, last_of: vec![u64::MAX; instances.min(1 << 20) as usize], out_of_order: 0 }
    }
    /// Counts one sample; false at the end marker.
    fn see<T: bytemuck::Pod>(&mut self, s: &Sample<T>) -> bool {
        let words: &[u64] = bytemuck::cast_slice(bytemuck::bytes_of(&s.data));
        if words[0] == END {
            return false;
        }
        self.first.get_or_insert_with(Instant::now);
        self.n += 1;
        if let Some(last) = self.last_of.get_mut(words[1] as usize) {
            if *last != u64::MAX && *last >= words[0] {
                self.out_of_order += 1;
            }
            *last = words[0];
        }
        true
    }
}

fn take_all<T: bytemuck::Pod + Send>(r: &DataReader<T>, tally: &mut Tally) {
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline {
        for s in r.take_n(1024, Duration::from_millis(100)) {
            if !tally.see(&s) {
                return;
            }
        }
    }
}

fn parent(args: &Args) -> Result<bool, String> {
    spindle_sst::transport::shm::remove_stale_files();
    let mut ok = true;
    for round_no in 0..args.rounds {
        for &instances in &args.instances {
            for read in &args.read {
                let run = format!("{instances}:{read}");
                let limit = Duration::from_secs_f64(args.seconds + 300.0);
                // Both say JOINED once set up (the writer once the reader is in the
                // topic); `start_members` then starts the run.
                let kids = bench::start_members(2, TransportKind::Shm, limit, &["--run", &run], &["--run"], &[])?;
                let (results, exited_ok) = bench::collect_results(kids, 2)?;
                let sub: &Value = &results[1];
                let line = json!({
                    "bench": "dds_keyed", "transport": args.transport, "size": args.size, "instances": instances,
                    "read": read, "round": round_no + 1, "written": results[0]["written"],
                    "samples_per_s": sub["samples_per_s"], "received": sub["samples"], "lost": sub["lost"],
                    "out_of_order": sub["out_of_order"], "reader_rss_mb_before": sub["rss_mb_before"],
                    "reader_rss_mb_end": sub["rss_mb_end"], "instances_seen": sub["instances_seen"],
                });
                ok &= exited_ok
                    && sub["out_of_order"] == 0
                    && sub["lost"] == 0
                    && sub["samples"] == results[0]["written"];
                out(&line.to_string());
            }
        }
    }
    Ok(ok)
}
