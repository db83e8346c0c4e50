#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod mcast;
pub mod rpclog;

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
    /// Adds another histogram's samples.
    pub fn merge(&mut self, other: &Latency) {
        let _ = self.h.add(&other.h);
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

/// The hidden arguments a program gives the copies of itself that it starts as the
/// members of a run ([`start_members`]). Flatten them into a program's arguments.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MemberArgs {
    /// (internal) this process is member `ID` of a run.
    #[arg(long, hide = true)]
    pub child: Option<u32>,
    /// (internal) every member's control port.
    #[arg(long, hide = true, value_delimiter = ',')]
    pub ports: Vec<u16>,
}

impl MemberArgs {
    /// In a member process started by `testkit::ChildSet`: says READY, waits for the
    /// parent's go-ahead, and returns member `id`'s group config builder (loopback,
    /// the run's group name, `transport` "tcp" or "shm"; members other than 0 join
    /// member 0) for the caller to finish.
    pub fn group_builder(&self, id: u32, transport: &str) -> Result<spindle_views::config::ConfigBuilder, String> {
        use std::net::SocketAddr;
        let port = *self.ports.get(id as usize).ok_or("no port for this member")?;
        let group = std::env::var("SPINDLE_CHILD_GROUP").map_err(|_| "SPINDLE_CHILD_GROUP is not set")?;
        out("READY");
        testkit::wait_for_parent();
        let t = if transport == "tcp" {
            spindle_views::config::Transport::Tcp
        } else {
            spindle_views::config::Transport::Shm
        };
        let mut b = spindle_views::config::Config::builder(id, SocketAddr::from(([127, 0, 0, 1], port)))
            .name(&group)
            .transport(t);
        if id > 0 {
            b = b.contact(SocketAddr::from(([127, 0, 0, 1], self.ports[0])));
        }
        Ok(b)
    }

    /// [`MemberArgs::group_builder`] with the given heartbeat and failure timeouts,
    /// built.
    pub fn group_config(
        &self,
        id: u32,
        transport: &str,
        heartbeat: Duration,
        failure_timeout: Duration,
    ) -> Result<spindle_views::config::Config, String> {
        self.group_builder(id, transport)?.timeouts(heartbeat, failure_timeout).build().map_err(|e| e.to_string())
    }
}

/// The predicate thread's two settings, as every benchmark program that runs a group
/// takes them. Flatten them into a program's arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct Polling {
    /// Predicate-thread spin budget after the last work (µs). Left out: chosen from
    /// the host as a group chooses it (`spindle_sst::spin::auto_spin_us`: the default
    /// while this host's members have a core each, none past that; docs/benchmarks.md
    /// has what the budget did to Tailwind over tcp).
    #[arg(long)]
    pub spin_us: Option<u64>,
    /// After this many µs of passes that all did work, the predicate thread gives its
    /// core away after each further one (`spindle_sst::predicate::PollConfig::busy_yield`;
    /// 0: never).
    #[arg(long, default_value_t = spindle_sst::predicate::DEFAULT_BUSY_YIELD_US)]
    pub busy_yield_us: u64,
}

impl Polling {
    /// The busy-yield threshold as a duration.
    pub fn busy_yield(&self) -> Duration {
        Duration::from_micros(self.busy_yield_us)
    }

    /// A group config builder with both settings (the spin budget only if given).
    pub fn apply(&self, b: spindle_views::config::ConfigBuilder) -> spindle_views::config::ConfigBuilder {
        let b = match self.spin_us {
            Some(us) => b.spin(Duration::from_micros(us)),
            None => b,
        };
        b.busy_yield(self.busy_yield())
    }
}

/// The `main` of a program that runs either as the parent of a run or, with
/// `--child ID`, as one of its members (dying with the parent): runs the right
/// one and exits as [`finish`] does.
pub fn run_parent_or_member(
    program: &str,
    member: &MemberArgs,
    run_member: impl FnOnce(u32) -> Result<(), String>,
    parent: impl FnOnce() -> Result<bool, String>,
) -> ! {
    let r = match member.child {
        Some(id) => {
            testkit::die_with_parent();
            run_member(id).map(|_| true)
        }
        None => {
            testkit::catch_interrupts();
            parent()
        }
    };
    finish(program, r)
}

/// Ends a program with the status of the table in the crate docs: 0 for
/// `Ok(true)`, 3 for `Ok(false)`, and for `Err` the error on stderr and 130 if
/// the run was interrupted, else 1.
pub fn finish(program: &str, result: Result<bool, String>) -> ! {
    match result {
        Ok(true) => std::process::exit(0),
        Ok(false) => std::process::exit(3),
        Err(e) => {
            err(&format!("{program}: {e}"));
            std::process::exit(if testkit::interrupted() { 130 } else { 1 });
        }
    }
}

/// Refuses bad arguments: `why` on stderr, exit status 2.
pub fn usage(program: &str, why: &str) -> ! {
    err(&format!("{program}: {why}"));
    std::process::exit(2);
}

/// Starts `n` members, `command(i, ports)` for member `i` given every member's
/// port, as a `testkit::ChildSet`; `env` is set for each. All waiting is bounded
/// by `deadline`.
fn spawn_members(
    n: usize,
    kind: testkit::TransportKind,
    deadline: Duration,
    env: &[(&str, &std::ffi::OsStr)],
    command: impl Fn(usize, &str) -> std::process::Command,
) -> Result<testkit::ChildSet, String> {
    let ports = testkit::free_ports(n)?;
    let plist: Vec<String> = ports.iter().map(u16::to_string).collect();
    let plist = plist.join(",");
    testkit::ChildSet::start(
        |i| {
            let mut cmd = command(i, &plist);
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

/// Starts `n` copies of this program as the members of a run: each gets this
/// program's own arguments, without the flags in `drop` (and their values), then
/// `extra`, `--child i` and `--ports` with every member's port from `testkit::free_ports`
/// (see [`MemberArgs`]); `env` is set for each. All waiting is bounded by
/// `deadline`.
pub fn start_members(
    n: usize,
    kind: testkit::TransportKind,
    deadline: Duration,
    extra: &[&str],
    drop: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> Result<testkit::ChildSet, String> {
    start_members_in(None, n, kind, deadline, extra, drop, env)
}

/// [`start_members`], member `i` in `net`'s namespace `i` (an emulated host of its
/// own, listening on its address there) when `net` is given.
pub fn start_members_in(
    net: Option<&testkit::netns::Net>,
    n: usize,
    kind: testkit::TransportKind,
    deadline: Duration,
    extra: &[&str],
    drop: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> Result<testkit::ChildSet, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    for flag in drop {
        if let Some(i) = argv.iter().position(|a| a == flag) {
            argv.drain(i..(i + 2).min(argv.len()));
        }
    }
    spawn_members(n, kind, deadline, env, |i, ports| {
        let mut cmd = match net {
            Some(net) => {
                let mut c = testkit::netns::command_in(&net.ns(i), &exe);
                c.env(testkit::BIND_VAR, testkit::netns::Net::ip(i));
                c
            }
            None => std::process::Command::new(&exe),
        };
        cmd.args(&argv).args(extra).args(["--child", &i.to_string(), "--ports", ports]);
        cmd
    })
}

/// For integration tests that check a run of member processes: starts `n` copies
/// of the test binary, each running only the (ignored) test `member_test` as member
/// `i`, with `args` (any serde value) for [`run_test_member`] to read back. All waiting
/// is bounded by `deadline`.
pub fn start_test_members<A: serde::Serialize>(
    n: usize,
    member_test: &str,
    args: &A,
    deadline: Duration,
    env: &[(&str, &std::ffi::OsStr)],
) -> Result<testkit::ChildSet, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let args = serde_json::to_string(args).map_err(|e| e.to_string())?;
    spawn_members(n, testkit::TransportKind::Shm, deadline, env, |i, ports| {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args([member_test, "--exact", "--ignored", "--nocapture", "--test-threads", "1"])
            .env("SPINDLE_TEST_MEMBER", i.to_string())
            .env("SPINDLE_TEST_PORTS", ports)
            .env("SPINDLE_TEST_ARGS", &args);
        cmd
    })
}

/// The body of the (ignored) member test of a check that uses
/// [`start_test_members`]: in a member it reads the run's arguments and runs
/// `role(args, member, id)`, panicking (the member then exits non-zero) with the
/// error; run by hand, outside such a run, it does nothing.
pub fn run_test_member<A: serde::de::DeserializeOwned>(role: impl FnOnce(&A, &MemberArgs, u32) -> Result<(), String>) {
    let Ok(id) = std::env::var("SPINDLE_TEST_MEMBER") else { return };
    let read = || -> Result<(MemberArgs, A), String> {
        let child = Some(id.parse().map_err(|_| format!("bad SPINDLE_TEST_MEMBER {id:?}"))?);
        let ports = std::env::var("SPINDLE_TEST_PORTS").map_err(|_| "SPINDLE_TEST_PORTS is not set")?;
        let ports =
            ports.split(',').map(|p| p.parse().map_err(|_| format!("bad port {p:?}"))).collect::<Result<_, _>>()?;
        let args = std::env::var("SPINDLE_TEST_ARGS").map_err(|_| "SPINDLE_TEST_ARGS is not set")?;
        let args = serde_json::from_str(&args).map_err(|e| format!("bad SPINDLE_TEST_ARGS: {e}"))?;
        Ok((MemberArgs { child, ports }, args))
    };
    testkit::die_with_parent();
    let (member, args) = read().unwrap_or_else(|e| panic!("member {id}: {e}"));
    if let Err(e) = role(&args, &member, member.child.unwrap_or_default()) {
        panic!("member {id}: {e}");
    }
}

/// Waits for every one of the `n` members' `RESULT` line, lets them exit and waits
/// for that; returns the results as JSON and whether every member exited cleanly.
pub fn collect_results(mut kids: testkit::ChildSet, n: usize) -> Result<(Vec<serde_json::Value>, bool), String> {
    let all: Vec<usize> = (0..n).collect();
    let lines = kids.expect_lines("RESULT ", &all).map_err(|e| e.to_string())?;
    kids.tell_all("EXIT").map_err(|e| e.to_string())?;
    let exited_ok = kids.wait_all_but(&[]).map_err(|e| e.to_string())?;
    drop(kids);
    Ok((parse_results(&lines)?, exited_ok))
}

/// Ends a run whose member `victim` was killed: `stop` (a line) to the survivors,
/// their RESULT lines (as JSON), EXIT, and whether they all exited cleanly.
pub fn stop_survivors(
    mut kids: testkit::ChildSet,
    n: usize,
    victim: usize,
    stop: &str,
) -> Result<(Vec<serde_json::Value>, bool), String> {
    let survivors: Vec<usize> = (0..n).filter(|i| *i != victim).collect();
    for &i in &survivors {
        kids.tell(i, stop).map_err(|e| e.to_string())?;
    }
    let lines = kids.expect_lines("RESULT ", &survivors).map_err(|e| e.to_string())?;
    for &i in &survivors {
        kids.tell(i, "EXIT").map_err(|e| e.to_string())?;
    }
    let exited_ok = kids.wait_all_but(&[victim]).map_err(|e| e.to_string())?;
    drop(kids);
    Ok((parse_results(&lines)?, exited_ok))
}

/// The members' result lines (what follows their `RESULT ` marker) as JSON.
pub fn parse_results(lines: &[String]) -> Result<Vec<serde_json::Value>, String> {
    lines.iter().map(|l| serde_json::from_str(l).map_err(|e| format!("bad result {l:?}: {e}"))).collect()
}

/// A member's delivery log as `chaos --log` writes it (`sender seq` lines); a
/// file that cannot be read is an empty log, a line that does not parse is skipped.
pub fn read_delivery_log(path: &std::path::Path) -> Vec<(u32, u64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.split(' ');
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect()
}

/// The entry a member's delivery log (`sender seq` pairs) holds where it joined
/// the group again after a removal: what follows comes after a gap in the order.
pub const REJOIN_MARK: (u32, u64) = (u32::MAX, 0);

/// Checks a member's delivery log against `reference`, the log of a member that
/// was never removed (and delivered everything): each run of deliveries between
/// [`REJOIN_MARK`]s is a contiguous piece of the reference, the first starts at the
/// beginning, the pieces come in order without overlapping, and the last ends
/// where the reference does. Returns how many entries the gaps skipped.
pub fn check_segments(reference: &[(u32, u64)], log: &[(u32, u64)]) -> Result<usize, String> {
    let pieces: Vec<&[(u32, u64)]> = log.split(|e| *e == REJOIN_MARK).collect();
    let mut at = 0usize; // where the next piece may start in the reference
    let mut skipped = 0usize;
    for (i, piece) in pieces.iter().enumerate() {
        if piece.is_empty() {
            continue;
        }
        let start = if i == 0 {
            0
        } else {
            let first = piece[0];
            let found = reference[at..].iter().position(|e| *e == first);
            at + found.ok_or_else(|| format!("piece {i} starts with {first:?}, not in the reference after {at}"))?
        };
        let end = start + piece.len();
        if end > reference.len() || reference[start..end] != **piece {
            return Err(format!("piece {i} ({} entries from {start}) differs from the reference", piece.len()));
        }
        skipped += start - at;
        at = end;
    }
    if at != reference.len() {
        return Err(format!("the log ends at {at} of {} reference entries", reference.len()));
    }
    Ok(skipped)
}

#[cfg(test)]
mod segment_tests {
    use super::*;

    #[test]
    fn pieces_must_be_in_order_contiguous_and_complete() {
        let r: Vec<(u32, u64)> = (0..10).map(|i| (i % 3, i as u64)).collect();
        let with_gap: Vec<_> = r[..4].iter().copied().chain([REJOIN_MARK]).chain(r[6..].iter().copied()).collect();
        assert_eq!(check_segments(&r, &r), Ok(0));
        assert_eq!(check_segments(&r, &with_gap), Ok(2));
        let no_mark: Vec<_> = r[..4].iter().chain(&r[6..]).copied().collect();
        assert!(check_segments(&r, &no_mark).is_err(), "a gap without a rejoin");
        let short: Vec<_> = r[..8].to_vec();
        assert!(check_segments(&r, &short).is_err(), "missing the end");
        let swapped: Vec<_> = r[..4].iter().copied().chain([REJOIN_MARK, r[7], r[6], r[8], r[9]]).collect();
        assert!(check_segments(&r, &swapped).is_err(), "out of order");
    }
}
