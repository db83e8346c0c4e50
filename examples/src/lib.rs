//! Shared helpers for the benchmark and demo programs: latency summaries. Process
//! orchestration, bounded polling and CPU clocks live in `testkit`.
#![forbid(unsafe_code)]

pub mod mcast;

use std::time::Duration;

/// A latency histogram in nanoseconds, reported in microseconds.
#[derive(Debug, Clone)]
pub struct Latency {
    h: hdrhistogram::Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Latency { h: hdrhistogram::Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds") }
    }
}

impl Latency {
    /// Records one sample.
    pub fn record(&mut self, d: Duration) {
        let _ = self.h.record((d.as_nanos() as u64).max(1));
    }
    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.h.len()
    }
    /// True without samples.
    pub fn is_empty(&self) -> bool {
        self.h.is_empty()
    }
    /// The `q` quantile (0..=1) in microseconds.
    pub fn quantile_us(&self, q: f64) -> f64 {
        self.h.value_at_quantile(q) as f64 / 1000.0
    }
}

/// Rounds to `digits` decimals (for JSON output).
pub fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// Writes a line to stdout; a closed stdout (a reader that went away) is not an error
/// worth a panic, unlike `println!`.
pub fn out(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// Writes a line to stderr, ignoring a closed stderr (see [`out`]).
pub fn err(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// `n` distinct loopback ports, each free together with the next one (a member's
/// control port and the data port after it), for member processes to bind.
pub use testkit::free_ports;

/// The `main` of a program that runs either as the parent of a run or, with
/// `--child ID`, as one of its members (dying with the parent): runs the right
/// one and exits as [`finish`] does.
pub fn run_parent_or_member(
    program: &str,
    child: Option<u32>,
    member: impl FnOnce(u32) -> Result<(), String>,
    parent: impl FnOnce() -> Result<bool, String>,
) -> ! {
    let r = match child {
        Some(id) => {
            testkit::die_with_parent();
            member(id).map(|_| true)
        }
        None => parent(),
    };
    finish(program, r)
}

/// Ends a benchmark or demo program: exit status 0 for `Ok(true)`, 3 for
/// `Ok(false)` (it ran, and a check failed), 1 with the error on stderr for `Err`.
pub fn finish(program: &str, result: Result<bool, String>) -> ! {
    match result {
        Ok(true) => std::process::exit(0),
        Ok(false) => std::process::exit(3),
        Err(e) => {
            err(&format!("{program}: {e}"));
            std::process::exit(1);
        }
    }
}

/// In a member process started by `testkit::ChildSet` with every member's
/// control port in `ports`: says READY, waits for the parent's go-ahead, and
/// returns member `id`'s group config (loopback, the run's group name, `transport`
/// "tcp" or "shm", the given heartbeat and failure timeouts; members other than 0
/// join member 0).
pub fn child_member_config(
    ports: &[u16],
    id: u32,
    transport: &str,
    heartbeat: Duration,
    failure_timeout: Duration,
) -> Result<views::config::Config, String> {
    use std::net::SocketAddr;
    let port = *ports.get(id as usize).ok_or("no port for this member")?;
    let group = std::env::var("SPINDLE_CHILD_GROUP").map_err(|_| "SPINDLE_CHILD_GROUP is not set")?;
    out("READY");
    testkit::wait_for_parent();
    let t = if transport == "tcp" { views::config::Transport::Tcp } else { views::config::Transport::Shm };
    let mut b = views::config::Config::builder(id, SocketAddr::from(([127, 0, 0, 1], port)))
        .name(&group)
        .transport(t)
        .timeouts(heartbeat, failure_timeout);
    if id > 0 {
        b = b.contact(SocketAddr::from(([127, 0, 0, 1], ports[0])));
    }
    b.build().map_err(|e| e.to_string())
}

/// Starts `n` copies of this program as the members of a run
/// (`testkit::ChildSet`): each gets this program's own arguments, without the
/// flags in `drop` (and their values), then `extra`, `--child i` and `--ports`
/// with every member's port from [`free_ports`]; `env` is set for each. All
/// waiting is bounded by `deadline`.
pub fn start_members(
    n: usize,
    kind: testkit::TransportKind,
    deadline: Duration,
    extra: &[&str],
    drop: &[&str],
    env: &[(&str, &std::path::Path)],
) -> Result<testkit::ChildSet, String> {
    let ports = free_ports(n)?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    for flag in drop {
        if let Some(i) = argv.iter().position(|a| a == flag) {
            argv.drain(i..(i + 2).min(argv.len()));
        }
    }
    let plist: Vec<String> = ports.iter().map(u16::to_string).collect();
    testkit::ChildSet::start(
        |i| {
            let mut cmd = std::process::Command::new(&exe);
            cmd.args(&argv).args(extra).args(["--child", &i.to_string(), "--ports", &plist.join(",")]);
            for (k, v) in env {
                cmd.env(k, v);
            }
            cmd
        },
        kind,
        n,
        deadline,
    )
    .map_err(|e| e.to_string())
}

/// The members' result lines (what follows their `RESULT ` marker) as JSON.
pub fn parse_results(lines: &[String]) -> Result<Vec<serde_json::Value>, String> {
    lines.iter().map(|l| serde_json::from_str(l).map_err(|e| format!("bad result {l:?}: {e}"))).collect()
}
