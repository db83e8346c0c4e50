//! `kv_chaos`: a sharded key-value store of three member processes (`--shards`
//! shards, 2 copies of each shard's log) moves a range of hashes from one shard
//! to another in each round while clients write, and the primary of the range's
//! new or old shard (alternating; the move is picked between shards whose
//! primaries differ where there are such) is killed with SIGKILL in the middle
//! of the pull. The killed member is then started again from its own directory
//! and rejoins.
//!
//! ```text
//! cargo run --release -p bench --bin kv_chaos -- --rounds 10
//! cargo run --release -p bench --bin kv_chaos -- --transport tcp --rounds 4 --seed 7
//! ```
//!
//! Each round passes when the migration ends by itself after the kill, every
//! put the writer saw acknowledged reads back, each key of the recorded history
//! (puts and gets of a few keys by `--clients` clients through the whole round)
//! is linearizable (`spindle_kv::shard::sim::check`), and once the writes stop
//! each shard's store is held by exactly its log's two replicas and holds the
//! same pairs at both. One JSON line per round (the kill's moment, how long the migration took to end after it
//! and the member to rejoin), then a summary line; exit 0 if every round
//! passed, 3 if a check failed, 1 on an error.

use bench::{err, out};
use clap::Parser;
use serde_json::json;
use spindle_kv::shard::client::ShardClient;
use spindle_kv::shard::{Range, Shard, ShardMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use testkit::LineChild;

mod load;
mod member;

#[derive(Parser, Debug, Clone)]
#[command(about = "Kill a shard's primary in the middle of each live migration of a sharded store, and check")]
pub(crate) struct Args {
    /// Data-plane transport.
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Migrations, each with a kill.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// Shards of the store.
    #[arg(long, default_value_t = 4)]
    shards: u16,
    /// Keys the writer writes.
    #[arg(long, default_value_t = 4000)]
    keys: u32,
    /// Clients whose requests are recorded for the linearizability check.
    #[arg(long, default_value_t = 3)]
    clients: usize,
    /// Seed of the kills' moments and of which primary goes first.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Silence that makes a member suspected (ms).
    #[arg(long, default_value_t = 1000)]
    failure_ms: u64,
    /// Records a migration pulls per batch (small: the pull lasts long enough
    /// for the kill to land in it).
    #[arg(long, default_value_t = 8)]
    pull_batch: u32,
    /// Print only the JSON lines on stdout (progress goes to stderr either way).
    #[arg(long)]
    json: bool,
    /// Internal: run as member `id`.
    #[arg(long, hide = true)]
    member: Option<u32>,
    #[arg(long, hide = true)]
    name: Option<String>,
    #[arg(long, hide = true)]
    dir: Option<PathBuf>,
    #[arg(long, hide = true)]
    port: Option<u16>,
    #[arg(long, hide = true)]
    contact: Option<SocketAddr>,
}

/// Bound of every wait of the parent.
const WAIT: Duration = Duration::from_secs(60);
const N: usize = 3;

fn main() {
    let args = Args::parse();
    if let Some(id) = args.member {
        testkit::die_with_parent();
        bench::finish("kv_chaos", member::run(&args, id).map(|_| true));
    }
    if args.rounds == 0
        || !(2..=16).contains(&args.shards)
        || args.keys < 100
        || args.clients == 0
        || args.pull_batch == 0
        || args.failure_ms < 100
    {
        bench::usage(
            "kv_chaos",
            "need --rounds >= 1, --shards 2..=16, --keys >= 100, --clients >= 1, --pull-batch >= 1, --failure-ms >= 100",
        );
    }
    testkit::catch_interrupts();
    bench::finish("kv_chaos", parent(&args))
}

/// The member processes, by node id (`None`: killed).
struct Members {
    procs: Vec<Option<LineChild>>,
    ports: Vec<u16>,
    dirs: testkit::TempDirs,
    name: String,
}

impl Members {
    fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports[i]))
    }

    fn live(&self) -> Vec<usize> {
        (0..N).filter(|i| self.procs[*i].is_some()).collect()
    }

    /// Starts member `i` (joining through `contact`) and waits until it serves;
    /// the milliseconds it took to start, and to have its stores caught up.
    fn start(&mut self, args: &Args, i: usize, contact: Option<SocketAddr>) -> Result<(f64, f64), String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = std::process::Command::new(exe);
        cmd.args(["--member", &i.to_string(), "--name", &self.name, "--port", &self.ports[i].to_string()])
            .arg("--dir")
            .arg(&self.dirs[i])
            .args(["--transport", &args.transport, "--failure-ms", &args.failure_ms.to_string()])
            .args(["--pull-batch", &args.pull_batch.to_string(), "--shards", &args.shards.to_string()]);
        if let Some(c) = contact {
            cmd.args(["--contact", &c.to_string()]);
        }
        let mut p = LineChild::start(cmd);
        // A member that fails says why on stderr ("kv_chaos: ...") and exits.
        let up = p.wait_for(WAIT, |l| l.starts_with("UP ") || l.starts_with("kv_chaos: "));
        let Some(up) = up.filter(|l| l.starts_with("UP ")) else {
            return Err(format!("member {i} did not start:\n{}", p.seen.join("\n")));
        };
        self.procs[i] = Some(p);
        // "UP addr start_ms synced_ms"
        let t: Vec<f64> = up.split(' ').skip(2).filter_map(|x| x.parse().ok()).collect();
        Ok((t.first().copied().unwrap_or(f64::NAN), t.get(1).copied().unwrap_or(f64::NAN)))
    }

    /// Asks live member `i` with `cmd` and waits for its answer line (`what` and
    /// the rest).
    fn ask(&mut self, i: usize, cmd: &str, what: &str) -> Result<String, String> {
        let p = self.procs[i].as_mut().ok_or("asked a member that is not running")?;
        p.tell(cmd);
        let line =
            p.wait_for(WAIT, |l| l.starts_with(what)).ok_or_else(|| format!("member {i} did not answer {cmd}"))?;
        Ok(line[what.len()..].trim().to_string())
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.procs[i].take() {
            p.kill();
        }
    }

    /// Waits until every live member runs a view of all `N`.
    fn wait_all(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + WAIT;
        for i in self.live() {
            loop {
                if self.ask(i, "MEMBERS", "MEMBERS ")?.split(',').count() == N {
                    break;
                }
                if Instant::now() > deadline || testkit::interrupted() {
                    return Err(format!("member {i} does not run a view of all {N}"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        for i in 0..N {
            self.kill(i);
        }
        spindle_sst::transport::shm::remove_group_files(&self.name);
    }
}

fn emit(args: &Args, v: &serde_json::Value) {
    if args.json {
        out(&v.to_string());
    } else {
        err(&v.to_string());
    }
}

fn parent(args: &Args) -> Result<bool, String> {
    let name = format!("kvchaos{}", std::process::id());
    let ports = testkit::free_ports(N)?;
    let mut m = Members { procs: (0..N).map(|_| None).collect(), ports, dirs: testkit::TempDirs::new(&name, N), name };
    m.start(args, 0, None)?;
    for i in 1..N {
        m.start(args, i, Some(m.addr(0)))?;
    }
    m.wait_all()?;
    let contacts: Vec<SocketAddr> = (0..N).map(|i| m.addr(i)).collect();
    let connect = || ShardClient::connect(&contacts, None).map_err(|e| format!("a client: {e}"));
    let began = Instant::now();
    let mut acked = load::fill(&contacts, args.keys)?;
    err(&format!("kv_chaos: {} keys put in {:.1} s; {} rounds", args.keys, began.elapsed().as_secs_f64(), args.rounds));
    let (mut ends, mut rejoins, mut passed, mut mid) = (Vec::new(), Vec::new(), 0usize, 0usize);
    for round in 0..args.rounds {
        if testkit::interrupted() {
            return Err("interrupted".into());
        }
        let r = one_round(args, &mut m, &contacts, round, &mut acked, &connect)?;
        if r["mid_pull"] == true {
            mid += 1;
            ends.push(r["end_after_kill_ms"].as_f64().unwrap_or(f64::NAN));
        }
        rejoins.push(r["rejoin_ms"].as_f64().unwrap_or(f64::NAN));
        let ok = r["ok"] == true;
        passed += usize::from(ok);
        emit(args, &r);
        if !ok {
            break;
        }
    }
    let (e50, emax) = median_max(ends);
    let (r50, rmax) = median_max(rejoins);
    let summary = json!({
        "bench": "kv_chaos", "transport": args.transport, "rounds": args.rounds, "passed": passed,
        "killed_mid_pull": mid, "keys": args.keys, "seed": args.seed,
        // Over the rounds whose kill landed while the range was being pulled.
        "end_after_kill_ms_p50": e50, "end_after_kill_ms_max": emax, "rejoin_ms_p50": r50, "rejoin_ms_max": rmax,
        "ok": passed == args.rounds,
    });
    emit(args, &summary);
    Ok(passed == args.rounds)
}

fn median_max(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let r = |x: f64| bench::round(x, 1);
    (v.get(v.len() / 2).copied().map_or(f64::NAN, r), v.last().copied().map_or(f64::NAN, r))
}

/// The move of a round, and whether its victim is the target's primary (not
/// the source's). Between two shards whose primaries (`primaries[s]`) differ if
/// any do, preferring a move whose victim is member `want` (the victims go round
/// the members), the one owning the most hashes gives the first half of its
/// widest span to the other.
fn pick_move(map: &ShardMap, primaries: &[Option<u32>], target: bool, want: u32) -> (Range, Shard, Shard) {
    let shares = map.shares();
    let n = map.shards();
    let p = |s: Shard| primaries[usize::from(s)];
    let score = |(f, t): (Shard, Shard)| {
        let victim = if target { p(t) } else { p(f) };
        (p(f) != p(t), victim == Some(want), shares[usize::from(f)], u16::MAX - t)
    };
    let pairs = (0..n).flat_map(|f| (0..n).filter(move |t| *t != f).map(move |t| (f, t)));
    let (from, to) = pairs.max_by_key(|x| score(*x)).expect("two shards");
    let (span, _) = map
        .spans()
        .into_iter()
        .filter(|(_, o)| *o == from)
        .max_by_key(|(r, _)| r.last - r.first)
        .expect("the largest shard owns a span");
    (Range { first: span.first, last: span.first + (span.last - span.first) / 2 }, from, to)
}

mod round;
use round::one_round;
