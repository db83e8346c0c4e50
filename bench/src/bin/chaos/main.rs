//! `chaos`: N member processes send continuously while K of them are killed with
//! SIGKILL at random times (never a majority); then the survivors' deliveries are
//! compared. One JSON line: views installed, whether the survivors' delivery digests
//! agree, messages delivered, and view-change times.
//!
//! ```text
//! cargo run --release -p bench --bin chaos -- --transport shm --nodes 5 --kill 2 --seconds 10
//! cargo run --release -p bench --bin chaos -- --transport tcp --nodes 5 --kill 2 --burst-ms 5 --kill-leader
//! ```
//!
//! The parent starts member 0, lets the others join through it, waits until every
//! member runs the full view, says GO, kills K members at random moments in the
//! middle 60% of the run (with `--burst-ms W`, all within W ms of a random moment, so
//! that later kills land inside the change the first one started; with
//! `--kill-leader`, member 0, the leader, is the last victim), waits until every
//! survivor runs a view of exactly the survivors, lets them send to the end of the run
//! (at least 0.5 s more), says STOP (survivors stop sending), then REPORT (each
//! survivor waits until its deliveries stop moving and prints its digest).
//!
//! With `--stop-rounds R` it runs the rejoin check instead (see `rejoin.rs`): the
//! last member is stalled with SIGSTOP until the others remove it, continued, and
//! must join again by itself, R times.
//!
//! ```text
//! cargo run --release -p bench --bin chaos -- --transport tcp --nodes 3 --stop-rounds 20 --rate 300
//! ```
//!
//! It passes (exit 0) when the survivors' digests agree, every survivor's final view
//! is the survivors, and each delivered messages in it (`delivered_after_last_view`).

use bench::mcast::Digest;
use bench::{err, out, round};
use clap::Parser;
use serde_json::{json, Value};
use spindle_sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spindle_views::config::{Config, Transport};
use spindle_views::group::GroupBuilder;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod member;
mod rejoin;
use member::child;

#[derive(Parser, Debug, Clone)]
#[command(about = "Kill members of a sending group and check that the survivors agree")]
struct Args {
    /// Data-plane transport.
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Members.
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Members to kill (fewer than half).
    #[arg(long, default_value_t = 2)]
    kill: usize,
    /// Length of the sending phase.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Message size in bytes (16 to 256 MiB; past 1024 a message goes through the
    /// sender's arena, and every delivery is checked to be whole).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Relay large messages member to member (the RDMC chain; `Config::relay`).
    #[arg(long)]
    relay: bool,
    /// Heartbeat period (ms).
    #[arg(long, default_value_t = 50)]
    heartbeat_ms: u64,
    /// Silence that makes a member suspected (ms).
    #[arg(long, default_value_t = 500)]
    failure_ms: u64,
    /// Kill every victim within a window of this many milliseconds (from a random
    /// moment in the middle of the run), so that later kills land inside the view
    /// change the first one started. 0: each victim at its own random moment.
    #[arg(long, default_value_t = 0)]
    burst_ms: u64,
    /// The lowest-ranked member (the leader of the group's first view, member 0) is
    /// among the victims, killed last.
    #[arg(long)]
    kill_leader: bool,
    /// With `--kill-leader`: kill the leader not at its scheduled moment but as soon as
    /// a survivor installed the view that the earlier kills led to, so that it dies
    /// while the others set that view up (the pattern of the outage after a second
    /// failure).
    #[arg(long, requires = "kill_leader")]
    kill_leader_in_change: bool,
    /// Instead of kills: stall the last member (SIGSTOP) until the others remove it,
    /// continue it (SIGCONT) and check that it joins again, this many times.
    #[arg(long, default_value_t = 0)]
    stop_rounds: usize,
    /// Seed for the kill schedule (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Print only the JSON line on stdout (progress goes to stderr either way).
    #[arg(long)]
    json: bool,
    /// Messages per second each member sends (0: as fast as it can).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Internal: the address a member binds (default loopback).
    #[arg(long, hide = true, default_value = "127.0.0.1")]
    ip: std::net::Ipv4Addr,
    /// Internal: a member writes every delivery ("sender seq" lines) to this file
    /// when it finishes or stops.
    #[arg(long, hide = true)]
    log: Option<std::path::PathBuf>,
    /// Internal: run as member `id` with this control port.
    #[arg(long, hide = true)]
    child: Option<u32>,
    #[arg(long, hide = true)]
    port: Option<u16>,
    /// Internal: a member with no id, port or contact (discovery finds the group).
    #[arg(long, hide = true)]
    auto: bool,
    #[arg(long, hide = true)]
    contact: Option<SocketAddr>,
    #[arg(long, hide = true)]
    name: Option<String>,
}

fn main() {
    let args = Args::parse();
    if let Some(id) = args.child {
        std::process::exit(child(&args, id));
    }
    if args.stop_rounds > 0 {
        if args.nodes < 3 || args.size < 16 {
            bench::usage("chaos", "--stop-rounds needs --nodes >= 3 and --size >= 16");
        }
        testkit::catch_interrupts();
        bench::finish("chaos", rejoin::stop_rounds(&args, args.stop_rounds));
    }
    if args.nodes < 3
        || 2 * args.kill >= args.nodes
        || args.size < 16
        || args.size > 256 << 20
        || args.seconds <= 0.0
        || (args.kill_leader && args.kill < 1 + usize::from(args.kill_leader_in_change))
    {
        bench::usage(
            "chaos",
            "need --nodes >= 3, --kill < nodes/2 (at least 1 with --kill-leader), --size in 16..=256 MiB and --seconds > 0",
        );
    }
    testkit::catch_interrupts();
    bench::finish("chaos", parent(&args))
}

// ------------------------------------------------------------------ the parent

struct Member {
    child: Child,
    stdin: ChildStdin,
    alive: bool,
}

struct Members {
    list: Vec<Member>,
    lines: Receiver<(usize, String)>,
    tx: std::sync::mpsc::Sender<(usize, String)>,
}

impl Members {
    fn spawn(
        &mut self,
        args: &Args,
        id: usize,
        port: u16,
        contact: Option<SocketAddr>,
        name: &str,
        log: Option<&std::path::Path>,
    ) -> Result<(), String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(exe);
        cmd.args(["--child", &id.to_string(), "--port", &port.to_string(), "--name", name])
            .args(["--transport", &args.transport, "--size", &args.size.to_string()])
            .args(["--heartbeat-ms", &args.heartbeat_ms.to_string(), "--failure-ms", &args.failure_ms.to_string()])
            .args(["--rate", &args.rate.to_string(), "--nodes", &args.nodes.to_string()])
            .args(args.relay.then_some("--relay"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(c) = contact {
            cmd.args(["--contact", &c.to_string()]);
        }
        if let Some(l) = log {
            cmd.arg("--log").arg(l);
        }
        let mut child = cmd.spawn().map_err(|e| format!("spawn member {id}: {e}"))?;
        let stdout = child.stdout.take().expect("piped");
        let stdin = child.stdin.take().expect("piped");
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((id, line)).is_err() {
                    break;
                }
            }
        });
        self.list.push(Member { child, stdin, alive: true });
        Ok(())
    }

    fn tell(&mut self, i: usize, line: &str) {
        let m = &mut self.list[i];
        if m.alive {
            let _ = writeln!(m.stdin, "{line}");
            let _ = m.stdin.flush();
        }
    }

    /// Reads `VIEW` lines (member, its view's ids sorted) into `seen` until it returns
    /// true (then `Ok(true)`) or `within` passes (`Ok(false)`).
    fn watch_views(&self, within: Duration, mut seen: impl FnMut(usize, Vec<u64>) -> bool) -> Result<bool, String> {
        let deadline = Instant::now() + within;
        loop {
            if testkit::interrupted() {
                return Err("interrupted".into());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok((i, line)) => {
                    if let Some(rest) = line.strip_prefix("VIEW ") {
                        let mut ids: Vec<u64> = rest.split(',').filter_map(|x| x.trim().parse().ok()).collect();
                        ids.sort_unstable();
                        if seen(i, ids) {
                            return Ok(true);
                        }
                    } else if let Some(why) = line.strip_prefix("FAILED") {
                        return Err(format!("member {i} failed:{why}"));
                    }
                }
                Err(_) if left.is_zero() => return Ok(false),
                Err(_) => {}
            }
        }
    }

    /// Waits until one member in `from` runs a view without any of `gone`.
    fn wait_for_view_without(&self, from: &[usize], gone: &[u64], within: Duration) -> Result<(), String> {
        let found = self.watch_views(within, |i, ids| from.contains(&i) && !ids.iter().any(|x| gone.contains(x)))?;
        found.then_some(()).ok_or_else(|| format!("no view without {gone:?} within {within:?}"))
    }

    /// Waits until every member in `from` runs a view whose members are `want` (sorted).
    fn wait_for_view(&self, from: &[usize], want: &[u64], within: Duration) -> Result<(), String> {
        let mut latest: Vec<Vec<u64>> = vec![Vec::new(); self.list.len()];
        let found = self.watch_views(within, |i, ids| {
            latest[i] = ids;
            from.iter().all(|j| latest[*j] == want)
        })?;
        if found {
            return Ok(());
        }
        let behind: Vec<(usize, &Vec<u64>)> =
            from.iter().filter(|i| latest[**i] != want).map(|i| (*i, &latest[*i])).collect();
        Err(format!("no view of the survivors {want:?} within {within:?}: {behind:?}"))
    }

    /// Waits for `marker` from each member in `from`; returns the rest of each line.
    fn expect(&self, marker: &str, from: &[usize], within: Duration) -> Result<Vec<(usize, String)>, String> {
        let deadline = Instant::now() + within;
        let mut got: Vec<(usize, String)> = Vec::new();
        while got.len() < from.len() {
            if testkit::interrupted() {
                return Err("interrupted".into());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok((i, line)) => {
                    if let Some(rest) = line.strip_prefix(marker) {
                        if from.contains(&i) && !got.iter().any(|(j, _)| *j == i) {
                            got.push((i, rest.trim().to_string()));
                        }
                    } else if let Some(why) = line.strip_prefix("FAILED") {
                        return Err(format!("member {i} failed:{why}"));
                    }
                }
                Err(_) if left.is_zero() => {
                    let missing: Vec<usize> =
                        from.iter().copied().filter(|i| !got.iter().any(|(j, _)| j == i)).collect();
                    return Err(format!("no {marker} from members {missing:?} within {within:?}"));
                }
                Err(_) => {}
            }
        }
        got.sort();
        Ok(got)
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        for m in &mut self.list {
            let _ = m.child.kill();
            let _ = m.child.wait();
        }
        spindle_sst::transport::shm::remove_stale_files();
    }
}

/// `n` control ports whose next ports are free too (data ports).
/// Who is killed, and when (sorted). With `--kill-leader`, member 0 (the leader: the
/// lowest rank of every view it is in) is the last victim, so it dies while the
/// change that the earlier kills started is running.
fn kill_schedule(args: &Args, rng: &mut spindle_smc::sim::Rng, total: Duration) -> (Vec<usize>, Vec<Duration>) {
    let mut victims: Vec<usize> = Vec::new();
    let first = if args.kill_leader { 1 } else { 0 };
    while victims.len() < args.kill - usize::from(args.kill_leader) {
        let v = first + rng.below((args.nodes - first) as u64) as usize;
        if !victims.contains(&v) {
            victims.push(v);
        }
    }
    if args.kill_leader {
        victims.push(0);
    }
    let mid = |rng: &mut spindle_smc::sim::Rng| total.mul_f64(0.2 + 0.6 * (rng.below(1000) as f64 / 1000.0));
    let mut at: Vec<Duration> = if args.burst_ms > 0 {
        let start = mid(rng);
        let w = args.burst_ms * 1000;
        (0..args.kill).map(|_| start + Duration::from_micros(rng.below(w + 1))).collect()
    } else {
        (0..args.kill).map(|_| mid(rng)).collect()
    };
    at.sort();
    (victims, at)
}

fn parent(args: &Args) -> Result<bool, String> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    let mut rng = spindle_smc::sim::Rng::new(seed);
    let name = format!("chaos{}", std::process::id());
    let ports = testkit::free_ports(args.nodes)?;
    let (tx, rx) = channel();
    let mut m = Members { list: Vec::new(), lines: rx, tx };
    let contact: SocketAddr = SocketAddr::from(([127, 0, 0, 1], ports[0]));
    m.spawn(args, 0, ports[0], None, &name, None)?;
    m.expect("JOINED", &[0], Duration::from_secs(30))?;
    for (i, port) in ports.iter().enumerate().skip(1) {
        m.spawn(args, i, *port, Some(contact), &name, None)?;
    }
    let all: Vec<usize> = (0..args.nodes).collect();
    m.expect("FULL", &all, Duration::from_secs(60))?;
    err(&format!(
        "chaos: {} members over {}, seed {seed}: sending for {} s, killing {}",
        args.nodes, args.transport, args.seconds, args.kill
    ));
    for i in 0..args.nodes {
        m.tell(i, "GO");
    }
    let start = Instant::now();
    let total = Duration::from_secs_f64(args.seconds);
    let (victims, at) = kill_schedule(args, &mut rng, total);
    let survivors: Vec<usize> = (0..args.nodes).filter(|i| !victims.contains(i)).collect();
    for (n, (v, when)) in victims.iter().zip(&at).enumerate() {
        if args.kill_leader_in_change && n + 1 == victims.len() {
            // The leader dies as soon as a survivor installed the view the earlier
            // kills led to: the others are setting that view up, or about to.
            let gone: Vec<u64> = victims[..n].iter().map(|x| *x as u64).collect();
            m.wait_for_view_without(&survivors, &gone, Duration::from_secs(60))?;
        } else {
            let wait = when.saturating_sub(start.elapsed());
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
        }
        if testkit::interrupted() {
            return Err("interrupted".into());
        }
        let _ = m.list[*v].child.kill();
        let _ = m.list[*v].child.wait();
        m.list[*v].alive = false;
        err(&format!("chaos: killed member {v} at {:.4} s", start.elapsed().as_secs_f64()));
    }
    // The survivors must go on: wait until each runs a view of exactly the survivors
    // (a change may wait out the setup deadline for a victim), then let them send in
    // it for a while before STOP.
    // (With no victims there is no change to wait for: the full view was announced
    // before GO.)
    if !victims.is_empty() {
        let want: Vec<u64> = survivors.iter().map(|i| *i as u64).collect();
        m.wait_for_view(&survivors, &want, Duration::from_secs(60))?;
        let at = start.elapsed().as_secs_f64();
        err(&format!("chaos: every survivor runs a view of the survivors at {at:.2} s"));
    }
    let rest = total.saturating_sub(start.elapsed()).max(Duration::from_millis(500));
    std::thread::sleep(rest);
    for i in &survivors {
        m.tell(*i, "STOP");
    }
    m.expect("STOPPED", &survivors, Duration::from_secs(60))?;
    for i in &survivors {
        m.tell(*i, "REPORT");
    }
    let reports = m.expect("RESULT", &survivors, Duration::from_secs(60))?;
    let parsed: Vec<Value> = reports.iter().map(|(_, r)| serde_json::from_str(r).unwrap_or(Value::Null)).collect();
    let digests: Vec<&Value> = parsed.iter().map(|r| &r["digest"]).collect();
    let delivered: Vec<u64> = parsed.iter().map(|r| r["delivered"].as_u64().unwrap_or(0)).collect();
    // Views installed during the run (the joins before it are not counted).
    let views: Vec<u64> = parsed.iter().map(|r| r["view_change_ms"].as_array().map_or(0, |a| a.len() as u64)).collect();
    let torn: u64 = parsed.iter().map(|r| r["torn"].as_u64().unwrap_or(u64::MAX)).fold(0, u64::saturating_add);
    let agree = !digests.is_empty()
        && digests.iter().all(|d| !d.is_null() && *d == digests[0])
        && delivered.iter().all(|d| *d == delivered[0]);
    // The group went on after the kills: every survivor runs a view of exactly the
    // survivors and delivered in it.
    let after: Vec<u64> = parsed.iter().map(|r| r["delivered_after_last_view"].as_u64().unwrap_or(0)).collect();
    let want: Vec<u64> = survivors.iter().map(|i| *i as u64).collect();
    let final_views: Vec<Vec<u64>> = parsed
        .iter()
        .map(|r| {
            let mut v: Vec<u64> =
                r["members"].as_array().map_or(Vec::new(), |a| a.iter().filter_map(|x| x.as_u64()).collect());
            v.sort_unstable();
            v
        })
        .collect();
    let went_on = after.iter().all(|a| *a > 0) && final_views.iter().all(|v| *v == want);
    let mut changes: Vec<f64> = parsed
        .iter()
        .flat_map(|r| r["view_change_ms"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_f64())
        .collect();
    changes.sort_by(|a, b| a.total_cmp(b));
    let p50 = changes.get(changes.len() / 2).copied().unwrap_or(f64::NAN);
    let max = changes.last().copied().unwrap_or(f64::NAN);
    let line = json!({
        "bench": "chaos",
        "transport": args.transport,
        "nodes": args.nodes,
        "killed": args.kill,
        "seconds": args.seconds,
        "seed": seed,
        "survivors": survivors.len(),
        "views_installed": views.iter().max().copied().unwrap_or(0),
        "digest_agree": agree,
        "size": args.size,
        "relay": args.relay,
        "torn": torn,
        "delivered": delivered.first().copied().unwrap_or(0),
        "delivered_after_last_view": after.iter().min().copied().unwrap_or(0),
        "final_view_is_survivors": final_views.iter().all(|v| *v == want),
        "burst_ms": args.burst_ms,
        "kill_leader": args.kill_leader,
        "kill_leader_in_change": args.kill_leader_in_change,
        "view_change_ms_p50": round(p50, 2),
        "view_change_ms_max": round(max, 2),
    });
    out(&line.to_string());
    if !agree {
        err(&format!("chaos: survivors disagree: {parsed:?}"));
    } else if !went_on {
        err(&format!("chaos: the survivors did not go on in a view of their own: {parsed:?}"));
    } else if torn > 0 {
        err(&format!("chaos: {torn} deliveries were not whole messages: {parsed:?}"));
    }
    Ok(agree && went_on && torn == 0)
}
