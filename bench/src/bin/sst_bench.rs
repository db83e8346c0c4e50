//! sst_bench: round trip and throughput of SST counter pushes, and idle CPU per node.
//!
//! ```text
//! cargo run --release -p bench --bin sst_bench -- --transport mem|shm|tcp --nodes N \
//!     [--seconds S] [--idle-seconds I] [--spin-us U] [--per-peer] [--json]
//! ```
//!
//! Nodes are threads for `mem` and child processes of this program for `shm` and `tcp`
//! (on 127.0.0.1). Node 0 drives three phases through a `phase` counter in the table
//! itself, and every node acknowledges each phase in its `phase_ack` column:
//!
//! 1. round trip: node 0 raises `ping` and pushes it to node 1, node 1's predicate
//!    raises `pong` and pushes it back, node 0's predicate sees it and records the
//!    time; all on the predicate threads, no application thread in the loop;
//! 2. throughput: node 0 raises `flood` and pushes it to every peer once per pass for
//!    S seconds; peers acknowledge the latest value they see; the rate counts pushes
//!    until the last one is acknowledged by every peer;
//! 3. idle: nobody sends; heartbeats continue; each node measures its own CPU time
//!    between seeing the idle phase start and end.
#![forbid(unsafe_code)]

use bench::{err, out, round, Latency};
use clap::Parser;
use serde_json::json;
use spindle_sst::heartbeat::{self, HeartbeatConfig};
use spindle_sst::predicate::{Kind, PollConfig, PredicateThread, DEFAULT_SPIN_US};
use spindle_sst::sync::Arc;
use spindle_sst::transport::{NodeId, RegionId, RegionSpec, Transport};
use spindle_sst::{Counter, LayoutBuilder, LocalRow, Table};
use std::time::{Duration, Instant};
use testkit::{poll_until as wait_for, CpuClock, TransportKind};

#[derive(Parser, Debug, Clone)]
#[command(about = "SST push round trip, throughput and idle CPU")]
struct Args {
    /// Transport: mem (threads), shm (processes, /dev/shm), tcp (processes, 127.0.0.1).
    #[arg(long, default_value = "shm")]
    transport: TransportKind,
    /// Number of nodes (at least 2).
    #[arg(long, default_value_t = 2)]
    nodes: usize,
    /// Length of the round-trip and of the throughput phase, in seconds.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Length of the idle phase, in seconds.
    #[arg(long, default_value_t = 2.0)]
    idle_seconds: f64,
    /// Most round trips to time (the phase also ends after --seconds).
    #[arg(long, default_value_t = 1_000_000)]
    pings: u64,
    /// How long a predicate thread spins after its last work before parking (µs).
    #[arg(long, default_value_t = DEFAULT_SPIN_US)]
    spin_us: u64,
    /// Copy each push into every peer's memory (`Table::create`), as before the
    /// one-copy path; by default mem/shm tables are shared (`Table::create_shared`:
    /// one publication per push, peers read in place).
    #[arg(long)]
    per_peer: bool,
    /// Print one JSON line instead of the summary.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    member: bench::MemberArgs,
}

const R: RegionId = RegionId(0);
const RTT: u64 = 1;
const FLOOD: u64 = 2;
const IDLE: u64 = 3;
const DONE: u64 = 4;

#[derive(Debug, Clone, Copy)]
struct Cols {
    ping: Counter,
    pong: Counter,
    flood: Counter,
    flood_ack: Counter,
    phase: Counter,
    phase_ack: Counter,
    beat: Counter,
}

fn layout() -> (spindle_sst::table::Layout, Cols) {
    let mut b = LayoutBuilder::new();
    let c = Cols {
        ping: b.counter("ping"),
        pong: b.counter("pong"),
        flood: b.counter("flood"),
        flood_ack: b.counter("flood_ack"),
        phase: b.counter("phase"),
        phase_ack: b.counter("phase_ack"),
        beat: b.counter("heartbeat"),
    };
    (b.build(), c)
}

struct Node {
    row: LocalRow,
    c: Cols,
    clock: CpuClock,
    // Driven by node 0's application thread:
    want_phase: u64,
    rtt_active: bool,
    rtt_target: u64,
    flood_limit: u64,
    // Node 0's predicate thread:
    t_sent: Instant,
    rtt: Latency,
    // Every node:
    seen_phase: u64,
    idle_start: Option<(Duration, Instant)>,
    idle_cpu_pct: Option<f64>,
    suspicions: Vec<String>,
}

const NODE0: u64 = 1 << 0;
const NODE1: u64 = 1 << 1;

fn start_node(
    t: Arc<dyn Transport>,
    n: usize,
    spin: Duration,
    clock: CpuClock,
    per_peer: bool,
) -> PredicateThread<Node> {
    let (l, c) = layout();
    let members: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
    let me = t.local_id();
    let row = if per_peer {
        Table::create(l, &members, me, R, t.region(R).expect("table region").clone())
    } else {
        Table::create_shared(l, &members, me, R, t.as_ref())
    }
    .expect("table");
    let rank = row.table().my_rank();
    let node = Node {
        row,
        c,
        clock,
        want_phase: 0,
        rtt_active: false,
        rtt_target: 0,
        flood_limit: 0,
        t_sent: Instant::now(),
        rtt: Latency::default(),
        seen_phase: 0,
        idle_start: None,
        idle_cpu_pct: None,
        suspicions: Vec::new(),
    };
    let cfg = PollConfig { spin, name: format!("sst-pred-{}", me.0), ..PollConfig::default() };
    let pt = PredicateThread::spawn(node, t, cfg).expect("spawn predicate thread");
    if rank == 0 {
        pt.register(
            Kind::Recurrent,
            |s: &Node| s.want_phase > s.row.get(s.c.phase),
            |s, p| {
                s.row.advance(s.c.phase, s.want_phase).expect("phase only grows");
                p.push(s.row.push(s.c.phase.range()));
            },
        );
        pt.register(
            Kind::Recurrent,
            |s: &Node| s.rtt_active && s.row.table().counter(1, s.c.pong) == s.row.get(s.c.ping),
            |s, p| {
                let now = Instant::now();
                if s.row.get(s.c.ping) > 0 {
                    s.rtt.record(now - s.t_sent);
                }
                if s.rtt.len() < s.rtt_target {
                    s.row.increment(s.c.ping);
                    s.t_sent = now;
                    p.push(s.row.push_to(s.c.ping.range(), NODE1));
                } else {
                    s.rtt_active = false;
                }
            },
        );
        pt.register(
            Kind::Recurrent,
            |s: &Node| s.row.get(s.c.flood) < s.flood_limit,
            |s, p| {
                s.row.increment(s.c.flood);
                p.push(s.row.push(s.c.flood.range()));
            },
        );
    } else {
        if rank == 1 {
            echo_to_node0(&pt, c.ping, c.pong);
        }
        echo_to_node0(&pt, c.flood, c.flood_ack);
    }
    // Every node: follow node 0's phase, time the idle phase, acknowledge.
    pt.register(
        Kind::Recurrent,
        |s: &Node| s.row.table().counter(0, s.c.phase) != s.seen_phase,
        |s, p| {
            s.seen_phase = s.row.table().counter(0, s.c.phase);
            let now = Instant::now();
            if s.seen_phase == IDLE {
                s.idle_start = Some((testkit::cpu_time(s.clock), now));
            } else if s.seen_phase == DONE {
                if let Some((cpu0, t0)) = s.idle_start {
                    let cpu = testkit::cpu_time(s.clock).saturating_sub(cpu0);
                    s.idle_cpu_pct = Some(100.0 * cpu.as_secs_f64() / (now - t0).as_secs_f64());
                }
            }
            s.row.advance(s.c.phase_ack, s.seen_phase).expect("phase ack only grows");
            p.push(s.row.push_to(s.c.phase_ack.range(), NODE0));
        },
    );
    let beat = c.beat;
    heartbeat::install(
        &pt,
        HeartbeatConfig::default(),
        |s: &Node| &s.row,
        beat,
        |s, sus, _| {
            s.suspicions.push(format!("{} {:?}", sus.peer, sus.reason));
        },
    );
    pt
}

/// Registers: whenever node 0's `from` is ahead of this node's `to`, raise `to` to it
/// and push `to` back to node 0 (pong for ping, acknowledgement for flood).
fn echo_to_node0(pt: &PredicateThread<Node>, from: Counter, to: Counter) {
    pt.register(
        Kind::Recurrent,
        move |s: &Node| s.row.table().counter(0, from) > s.row.get(to),
        move |s, p| {
            let v = s.row.table().counter(0, from);
            s.row.advance(to, v).expect("an echo only grows");
            p.push(s.row.push_to(to.range(), NODE0));
        },
    );
}

/// What node 0 measured.
struct Drive {
    rtt: Latency,
    pushes: u64,
    flood_secs: f64,
}

fn all_acked(s: &Node, col: Counter, v: u64) -> bool {
    (1..s.row.table().rows()).all(|r| s.row.table().counter(r, col) >= v)
}

fn set_phase(pt: &PredicateThread<Node>, phase: u64, within: Duration) -> Result<(), String> {
    pt.with_state(|s| s.want_phase = phase);
    pt.notify();
    let acked = wait_for(within, Duration::from_millis(1), || {
        pt.with_state(|s| s.row.get(s.c.phase_ack) >= phase && all_acked(s, s.c.phase_ack, phase))
    });
    if acked {
        Ok(())
    } else {
        Err(format!("peers did not acknowledge phase {phase} within {within:?}"))
    }
}

/// Node 0's application thread: runs the three phases.
fn drive(pt: &PredicateThread<Node>, args: &Args, progress: bool) -> Result<Drive, String> {
    let secs = Duration::from_secs_f64(args.seconds);
    let slack = Duration::from_secs(30);
    let say = |m: &str| {
        if progress {
            err(&format!("sst_bench: {m}"));
        }
    };
    say("round trips");
    set_phase(pt, RTT, slack)?;
    pt.with_state(|s| {
        s.rtt_target = args.pings;
        s.rtt_active = true;
    });
    pt.notify();
    wait_for(secs, Duration::from_millis(5), || pt.with_state(|s| !s.rtt_active));
    pt.with_state(|s| s.rtt_active = false);
    // Let a ping in flight come back before the next phase.
    let settled = wait_for(slack, Duration::from_millis(1), || {
        pt.with_state(|s| s.row.table().counter(1, s.c.pong) == s.row.get(s.c.ping))
    });
    if !settled {
        return Err("the last ping was never answered".into());
    }

    say("push throughput");
    set_phase(pt, FLOOD, slack)?;
    let start = Instant::now();
    pt.with_state(|s| s.flood_limit = u64::MAX);
    pt.notify();
    std::thread::sleep(secs);
    let last = pt.with_state(|s| {
        s.flood_limit = s.row.get(s.c.flood);
        s.flood_limit
    });
    let acked = wait_for(slack, Duration::from_micros(100), || pt.with_state(|s| all_acked(s, s.c.flood_ack, last)));
    let flood_secs = start.elapsed().as_secs_f64();
    if !acked {
        return Err(format!("peers did not acknowledge push {last}"));
    }

    say(&format!("idle for {} s", args.idle_seconds));
    set_phase(pt, IDLE, slack)?;
    std::thread::sleep(Duration::from_secs_f64(args.idle_seconds));
    set_phase(pt, DONE, slack)?;
    let rtt = pt.with_state(|s| s.rtt.clone());
    Ok(Drive { rtt, pushes: last, flood_secs })
}

fn node_result(pt: &PredicateThread<Node>) -> serde_json::Value {
    // A slow poll: in a node process this thread's CPU counts towards the idle figure.
    let ready =
        wait_for(Duration::from_secs(60), Duration::from_millis(50), || pt.with_state(|s| s.idle_cpu_pct.is_some()));
    pt.with_state(|s| {
        json!({
            "idle_cpu_pct": if ready { s.idle_cpu_pct } else { None },
            "suspicions": s.suspicions,
        })
    })
}

fn drive_result(d: &Drive) -> serde_json::Value {
    json!({
        "rtt_us_p50": round(d.rtt.quantile_us(0.5), 2),
        "rtt_us_p99": round(d.rtt.quantile_us(0.99), 2),
        "rtt_samples": d.rtt.len(),
        "pushes": d.pushes,
        "flood_secs": d.flood_secs,
    })
}

/// A node process (for shm and tcp).
fn child(args: &Args) -> Result<(), String> {
    testkit::die_with_parent();
    let (l, _) = layout();
    let (me, n, t) =
        testkit::child_transport(&[RegionSpec { id: R, len: l.table_bytes(args.nodes) }], Duration::from_secs(30))
            .map_err(|e| e.to_string())?;
    let mut pt = start_node(t, n, Duration::from_micros(args.spin_us), CpuClock::Process, args.per_peer);
    let mut report = if me == NodeId(0) { drive_result(&drive(&pt, args, false)?) } else { json!({}) };
    let mine = node_result(&pt);
    report["node"] = json!(me.0);
    report["idle_cpu_pct"] = mine["idle_cpu_pct"].clone();
    report["suspicions"] = mine["suspicions"].clone();
    out(&format!("RESULT {report}"));
    // Stay up until the parent has every result, so no node sees a peer vanish early.
    testkit::wait_for_parent();
    pt.stop();
    Ok(())
}

fn run(args: &Args) -> Result<(serde_json::Value, Vec<serde_json::Value>), String> {
    let (l, _) = layout();
    let regions = [RegionSpec { id: R, len: l.table_bytes(args.nodes) }];
    let spin = Duration::from_micros(args.spin_us);
    let progress = !args.json;
    match args.transport {
        TransportKind::Mem => {
            let g = testkit::local_group(TransportKind::Mem, args.nodes, &regions, Duration::from_secs(10))
                .map_err(|e| e.to_string())?;
            let pts: Vec<_> = g
                .nodes
                .iter()
                .map(|t| start_node(t.clone(), args.nodes, spin, CpuClock::Thread, args.per_peer))
                .collect();
            let d = drive(&pts[0], args, progress)?;
            let nodes = pts.iter().map(node_result).collect();
            Ok((drive_result(&d), nodes))
        }
        kind => {
            testkit::catch_interrupts();
            let stale = spindle_sst::transport::shm::remove_stale_files();
            if stale > 0 && progress {
                err(&format!("sst_bench: removed {stale} /dev/shm files left by killed runs"));
            }
            let deadline = Duration::from_secs_f64(2.0 * args.seconds + args.idle_seconds + 120.0);
            let kids = bench::start_members(args.nodes, kind, deadline, &[], &[], &[])?;
            if progress {
                err(&format!("sst_bench: {} node processes joined (group {})", args.nodes, kids.group()));
            }
            let (nodes, ok) = bench::collect_results(kids, args.nodes)?;
            if !ok {
                return Err("a node process failed".into());
            }
            Ok((nodes[0].clone(), nodes))
        }
    }
}

fn main() {
    let args = Args::parse();
    if testkit::is_child() {
        bench::finish("sst_bench node", child(&args).map(|_| true));
    }
    if args.nodes < 2 {
        bench::usage("sst_bench", "--nodes must be at least 2");
    }
    if !(args.seconds > 0.0 && args.idle_seconds > 0.0) {
        bench::usage("sst_bench", "--seconds and --idle-seconds must be positive");
    }
    let (d, nodes) = match run(&args) {
        Ok(x) => x,
        Err(e) => bench::finish("sst_bench", Err(e)),
    };
    let idle: Vec<Option<f64>> = nodes.iter().map(|n| n["idle_cpu_pct"].as_f64()).collect();
    let idle_max = idle.iter().map(|x| x.unwrap_or(f64::NAN)).fold(0.0f64, |a, b| {
        if b.is_nan() || a.is_nan() {
            f64::NAN
        } else {
            a.max(b)
        }
    });
    let suspicions: usize = nodes.iter().map(|n| n["suspicions"].as_array().map_or(0, Vec::len)).sum();
    let pushes = d["pushes"].as_u64().unwrap_or(0);
    let pushes_per_s = pushes as f64 / d["flood_secs"].as_f64().unwrap_or(f64::NAN);
    if args.json {
        let line = json!({
            "bench": "sst",
            "transport": args.transport.name(),
            "nodes": args.nodes,
            "rtt_us_p50": d["rtt_us_p50"],
            "rtt_us_p99": d["rtt_us_p99"],
            "pushes_per_s": round(pushes_per_s, 0),
            "idle_cpu_pct": round(idle_max, 3),
            "idle_cpu_pct_nodes": idle.iter().map(|x| x.map(|v| round(v, 3))).collect::<Vec<_>>(),
            "rtt_samples": d["rtt_samples"],
            "spin_us": args.spin_us,
            "per_peer": args.per_peer,
            "suspicions": suspicions,
        });
        out(&line.to_string());
    } else {
        out(&format!("sst_bench: transport={} nodes={} spin={} µs", args.transport, args.nodes, args.spin_us));
        out(&format!(
            "  round trip node 0 -> node 1 -> node 0: p50 {} µs, p99 {} µs ({} samples)",
            d["rtt_us_p50"], d["rtt_us_p99"], d["rtt_samples"]
        ));
        out(&format!(
            "  push throughput node 0 -> {} peers: {:.0} pushes/s ({:.0} writes/s)",
            args.nodes - 1,
            pushes_per_s,
            pushes_per_s * (args.nodes - 1) as f64
        ));
        let per: Vec<String> = idle
            .iter()
            .enumerate()
            .map(|(i, x)| format!("n{i} {}", x.map_or("?".into(), |v| format!("{v:.3}%"))))
            .collect();
        out(&format!("  idle CPU over {} s: {}", args.idle_seconds, per.join(", ")));
        if suspicions > 0 {
            out(&format!(
                "  WARNING: {suspicions} failure suspicions during the run: {:?}",
                nodes.iter().map(|n| &n["suspicions"]).collect::<Vec<_>>()
            ));
        }
    }
}
