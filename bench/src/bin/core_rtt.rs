//! core_rtt: how far apart the cores are, as a cache line sees it.
//!
//! ```text
//! cargo run --release -p bench --bin core_rtt -- [--round-trips N] [--probes P] [--json]
//! ```
//!
//! Two threads, pinned to the first two CPUs this process may use, hand one atomic
//! word back and forth (each waits, spinning, for the other's store), N round trips
//! a probe; the figure is the time of one round trip, the lowest of P probes. It needs
//! two CPUs: with one, every round trip waits for a time slice, and a probe that runs
//! past its deadline (20 s) is left out (none finishing is an error).
//!
//! Why it is a benchmark of its own: on a virtual machine the host decides where the
//! guest's CPUs run. On the 2-vCPU machine our figures come from, one round trip took
//! 55-70 ns in some stretches and 400-900 ns in others, and the shm path's rate
//! followed it (about 15 M against 5.5 M msgs/s at 128 B, Aeron IPC's about 27 M
//! against 18 M); see docs/benchmarks.md, "Two placements of the two vCPUs". The comparison scripts run
//! this before and after each measurement and tag it with the figure, so that rounds
//! are compared within one placement.
#![forbid(unsafe_code)]

use bench::out;
use clap::Parser;
use serde_json::json;
use spindle_sst::sync::atomic::{AtomicU64, Ordering};
use spindle_sst::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Cache-line round trip between two threads (ns), the lowest of several probes")]
struct Args {
    /// Round trips per probe.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    round_trips: u64,
    /// Probes; the lowest is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    probes: u64,
    /// One JSON line instead of text.
    #[arg(long)]
    json: bool,
}

/// A probe gives up after this long (a partner thread that never ran).
const PROBE_DEADLINE: Duration = Duration::from_secs(20);

/// The word the two threads hand back and forth, alone on its cache line.
#[repr(align(128))]
struct Line(AtomicU64);

/// Spins until `line` holds `value` (true) or `deadline` has passed (false); the
/// clock is read once every 2^32 spins.
fn wait_for(line: &Line, value: u64, deadline: Instant) -> bool {
    let mut spins = 0u32;
    while line.0.load(Ordering::Acquire) != value {
        spins = spins.wrapping_add(1);
        if spins == 0 && Instant::now() > deadline {
            return false;
        }
    }
    true
}

/// One probe: ns per round trip, or `None` if it ran past the deadline. `cpus`:
/// where this thread and its partner run (unpinned where the process may use only
/// one CPU).
fn probe(n: u64, cpus: Option<(core_affinity::CoreId, core_affinity::CoreId)>) -> Option<f64> {
    let line = Arc::new(Line(AtomicU64::new(0)));
    if let Some((me, _)) = cpus {
        core_affinity::set_for_current(me);
    }
    let partner = {
        let line = line.clone();
        std::thread::spawn(move || {
            if let Some((_, other)) = cpus {
                core_affinity::set_for_current(other);
            }
            let deadline = Instant::now() + PROBE_DEADLINE;
            for i in 0..n {
                if !wait_for(&line, 2 * i + 1, deadline) {
                    return;
                }
                line.0.store(2 * i + 2, Ordering::Release);
            }
        })
    };
    let deadline = Instant::now() + PROBE_DEADLINE;
    let start = Instant::now();
    let done = (0..n).all(|i| {
        line.0.store(2 * i + 1, Ordering::Release);
        wait_for(&line, 2 * i + 2, deadline)
    });
    let took = start.elapsed();
    let _ = partner.join();
    done.then(|| took.as_nanos() as f64 / n as f64)
}

fn main() {
    let a = Args::parse();
    let cpus = core_affinity::get_core_ids().and_then(|ids| Some((*ids.first()?, *ids.get(1)?)));
    let probes: Vec<f64> = (0..a.probes).filter_map(|_| probe(a.round_trips, cpus)).collect();
    let Some(low) = probes.iter().copied().reduce(f64::min) else {
        bench::err("core_rtt: no probe finished (a thread never ran?)");
        std::process::exit(1);
    };
    let round = |x: f64| (x * 10.0).round() / 10.0;
    if a.json {
        out(&json!({
            "bench": "core_rtt",
            "rtt_ns": round(low),
            "probes_ns": probes.iter().map(|&x| round(x)).collect::<Vec<_>>(),
            "round_trips": a.round_trips,
            "cpus": cpus.map(|(x, y)| vec![x.id, y.id]),
        })
        .to_string());
    } else {
        out(&format!("{:.1} ns per cache-line round trip (lowest of {} probes)", low, probes.len()));
    }
}
