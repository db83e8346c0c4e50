//! catchup: how long a late joiner of a Volatile topic waits for its history.
//!
//! ```text
//! cargo run --release -p bench --bin catchup -- --runs 20 --transport shm [--json]
//! ```
//!
//! Each run starts a fresh domain of two participants (threads of this process).
//! Participant 0 writes a `KeepLast(--keep)` topic of `u64` every `--period-us`
//! and keeps writing; once it wrote `--before` samples, participant 1 creates the
//! topic and a reader (its join of the topic: a table edit, a view, the catch-up
//! from participant 0) and the time from that call to its first history sample is
//! one figure. Prints each run as it ends, then the median, 90th percentile and
//! maximum (ms).
#![forbid(unsafe_code)]

use bench::{err, out, round};
use clap::Parser;
use serde_json::json;
use spindle_dds::DdsConfig;
use spindle_dds::DomainParticipant;
use spindle_dds::{History, Qos};
use spindle_views::config::{Config, Transport};
use std::net::SocketAddr;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

#[derive(Parser, Debug, Clone)]
#[command(about = "Time from a late joiner's topic creation to its first history sample")]
struct Args {
    /// Transport: shm or tcp (on 127.0.0.1).
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Runs (each a fresh domain).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Samples the topic keeps (`KeepLast`).
    #[arg(long, default_value_t = 20)]
    keep: u32,
    /// Samples written before the joiner comes.
    #[arg(long, default_value_t = 100)]
    before: u64,
    /// Microseconds between writes.
    #[arg(long, default_value_t = 1000)]
    period_us: u64,
    /// Print only the JSON line.
    #[arg(long)]
    json: bool,
}

fn participant(name: &str, id: u32, contact: Option<SocketAddr>, t: Transport) -> Result<DomainParticipant, String> {
    let mut b = Config::builder(id, testkit::free_control_addr())
        .name(name)
        .transport(t)
        .timeouts(Duration::from_millis(100), Duration::from_millis(1000));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    DomainParticipant::new(DdsConfig::new(b.build().map_err(|e| e.to_string())?)).map_err(|e| e.to_string())
}

/// One run: the joiner's wait for its first history sample, in ms.
fn once(args: &Args, run: usize) -> Result<f64, String> {
    let t = if args.transport == "tcp" { Transport::Tcp } else { Transport::Shm };
    let name = format!("catchup{}-{run}", std::process::id());
    let p0 = participant(&name, 0, None, t)?;
    let p1 = participant(&name, 1, Some(p0.group().listen_addr()), t)?;
    if !p0.group().wait_for_members(2, Duration::from_secs(30)) {
        return Err("the second participant did not join within 30 s".into());
    }
    let qos = Qos::volatile(History::KeepLast(args.keep));
    let t0 = p0.topic::<u64>("ticks", qos).map_err(|e| e.to_string())?;
    let w = p0.create_writer(&t0, qos).map_err(|e| e.to_string())?;
    let (stop, stopped) = channel::<()>();
    let (written, enough) = channel::<()>();
    let (before, period) = (args.before, Duration::from_micros(args.period_us));
    let result = std::thread::scope(|s| {
        s.spawn(move || {
            let mut i = 0u64;
            while stopped.try_recv().is_err() && w.write(&i).is_ok() {
                i += 1;
                if i == before {
                    let _ = written.send(());
                }
                std::thread::sleep(period);
            }
        });
        let r = (|| {
            enough.recv_timeout(Duration::from_secs(60)).map_err(|_| "the writer stalled".to_string())?;
            let began = Instant::now();
            let t1 = p1.topic::<u64>("ticks", qos).map_err(|e| e.to_string())?;
            let r = p1.create_reader(&t1, qos).map_err(|e| e.to_string())?;
            let first = r.take_n(1, Duration::from_secs(30));
            let ms = began.elapsed().as_secs_f64() * 1e3;
            match first.first() {
                Some(s) if s.info.from_history => Ok(ms),
                Some(_) => Err("the first sample was live: no history came".to_string()),
                None => Err("no sample within 30 s".to_string()),
            }
        })();
        let _ = stop.send(());
        r
    });
    drop(p1);
    drop(p0);
    spindle_sst::transport::shm::remove_stale_files();
    result
}

fn main() {
    let args = Args::parse();
    let mut ms = Vec::new();
    for run in 0..args.runs {
        match once(&args, run) {
            Ok(x) => {
                if !args.json {
                    err(&format!("run {}/{}: first history sample after {x:.2} ms", run + 1, args.runs));
                }
                ms.push(x);
            }
            Err(e) => {
                err(&format!("catchup: run {}: {e}", run + 1));
                std::process::exit(1);
            }
        }
    }
    if ms.is_empty() {
        return;
    }
    ms.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    let line = json!({
        "bench": "catchup",
        "transport": args.transport,
        "runs": ms.len(),
        "keep": args.keep,
        "median_ms": round(at(0.5), 2),
        "p90_ms": round(at(0.9), 2),
        "max_ms": round(at(1.0), 2),
    });
    if !args.json {
        out(&format!(
            "late joiner's first history sample: median {:.2} ms, p90 {:.2} ms, max {:.2} ms over {} runs",
            at(0.5),
            at(0.9),
            at(1.0),
            ms.len()
        ));
    }
    out(&line.to_string());
}
