//! startup: how long a member takes from `GroupBuilder::start` to its first
//! delivery, when it finds the group by discovery and when it is given a contact;
//! and how long a member alone takes to start a group with and without discovery.
//!
//! ```text
//! cargo run --release -p bench --bin startup -- --transport tcp --runs 10 [--json]
//! ```
//!
//! Two members (threads of this process) run a group; each run starts a third
//! member, alternately by discovery (no contact) and with a contact, which sends one
//! message and times its delivery back to itself (the first delivery it can be sure
//! of), then leaves gracefully. The alone case starts a one-member group of a fresh
//! name, alternately with discovery on (it waits `discovery_wait_ms` for an answer
//! that does not come) and off. Medians and maxima of each.
#![forbid(unsafe_code)]

use bench::{err, out, round};
use clap::Parser;
use serde_json::json;
use spindle_views::config::{Config, ConfigBuilder, Transport};
use spindle_views::group::{Group, GroupBuilder};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

#[derive(Parser, Debug, Clone)]
#[command(about = "Time from a member's start to its first delivery, with discovery and with a contact")]
struct Args {
    /// Transport: shm or tcp (on 127.0.0.1).
    #[arg(long, default_value = "tcp", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Runs of each kind (interleaved).
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Print only the JSON line.
    #[arg(long)]
    json: bool,
}

fn base(name: &str, t: Transport) -> ConfigBuilder {
    Config::local().name(name).transport(t).timeouts(Duration::from_millis(100), Duration::from_millis(1000))
}

/// Starts a member and times start → its own first message delivered back.
fn join_once(cfg: Config) -> Result<(f64, Group), String> {
    let (tx, rx) = channel();
    let began = Instant::now();
    let g = GroupBuilder::new(cfg)
        .on_deliver(0, move |d| {
            if d.data == b"first" {
                let _ = tx.send(Instant::now());
            }
        })
        .start()
        .map_err(|e| e.to_string())?;
    g.send(0, b"first").map_err(|e| e.to_string())?;
    let at = rx.recv_timeout(Duration::from_secs(30)).map_err(|_| "no delivery within 30 s".to_string())?;
    Ok(((at - began).as_secs_f64() * 1e3, g))
}

fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (round(v[v.len() / 2], 1), round(*v.last().unwrap_or(&f64::NAN), 1))
}

fn run(args: &Args) -> Result<bool, String> {
    let t = if args.transport == "tcp" { Transport::Tcp } else { Transport::Shm };
    let name = format!("startup{}", std::process::id());
    let a = GroupBuilder::new(base(&name, t).discovery(false).build().map_err(|e| e.to_string())?)
        .start()
        .map_err(|e| e.to_string())?;
    let b = GroupBuilder::new(base(&name, t).contact(a.listen_addr()).build().map_err(|e| e.to_string())?)
        .start()
        .map_err(|e| e.to_string())?;
    if !a.wait_for_members(2, Duration::from_secs(30)) {
        return Err("the first two members did not form a group".into());
    }
    let (mut found, mut given, mut alone_on, mut alone_off) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..args.runs {
        for discover in [true, false] {
            let mut c = base(&name, t);
            if !discover {
                c = c.contact(if r % 2 == 0 { a.listen_addr() } else { b.listen_addr() });
            }
            let (ms, g) = join_once(c.build().map_err(|e| e.to_string())?)?;
            if !g.leave(Duration::from_secs(30)) || !a.wait_for_members(2, Duration::from_secs(30)) {
                return Err("the third member did not leave".into());
            }
            drop(g);
            if discover { &mut found } else { &mut given }.push(ms);
            let alone = base(&format!("{name}a{r}{discover}"), t).discovery(discover);
            let (ms, g) = join_once(alone.build().map_err(|e| e.to_string())?)?;
            drop(g);
            if discover { &mut alone_on } else { &mut alone_off }.push(ms);
        }
        err(&format!("startup: run {} of {} done", r + 1, args.runs));
    }
    let (f50, fmax) = stats(found);
    let (g50, gmax) = stats(given);
    let (on50, onmax) = stats(alone_on);
    let (off50, offmax) = stats(alone_off);
    let line = json!({
        "bench": "startup", "transport": args.transport, "runs": args.runs,
        "join_by_discovery_ms_p50": f50, "join_by_discovery_ms_max": fmax,
        "join_by_contact_ms_p50": g50, "join_by_contact_ms_max": gmax,
        "alone_discovery_ms_p50": on50, "alone_discovery_ms_max": onmax,
        "alone_no_discovery_ms_p50": off50, "alone_no_discovery_ms_max": offmax,
    });
    if args.json {
        out(&line.to_string());
    } else {
        out(&format!(
            "startup over {}: start -> first delivery, {} runs each (p50 / max ms)\n  \
             joining by discovery  {f50} / {fmax}\n  joining by contact    {g50} / {gmax}\n  \
             alone, discovery on   {on50} / {onmax}\n  alone, discovery off  {off50} / {offmax}\n{line}",
            args.transport, args.runs
        ));
    }
    Ok(true)
}

fn main() {
    let args = Args::parse();
    if args.runs == 0 {
        bench::usage("startup", "--runs must be at least 1");
    }
    bench::finish("startup", run(&args))
}
