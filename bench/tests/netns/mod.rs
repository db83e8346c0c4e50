//! The multi-host tests' members (partition, hosts): `chaos --child` processes in the
//! namespaces of `testkit::netns`, and their stdout lines.

#![allow(dead_code)] // each test uses its part

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};
pub use testkit::netns::{unavailable, Net};

/// What a test across namespaces starts from: `n` namespaces on a bridge (named
/// from `prefix` and this process), a fresh directory for the members' logs and
/// their paths. `None`, having said why on stderr, where the machine cannot.
pub fn prepare(prefix: &str, test: &str, n: usize) -> Option<(Net, std::path::PathBuf, Vec<std::path::PathBuf>)> {
    let tag = format!("{prefix}{}", std::process::id() % 100_000);
    if let Some(why) = unavailable(&tag) {
        eprintln!("{test} test skipped: {why}");
        return None;
    }
    let net = Net::create(&tag, n).expect("namespaces");
    let dir = std::env::temp_dir().join(format!("spindle-{tag}"));
    std::fs::create_dir_all(&dir).expect("a directory for the logs");
    let logs = (0..n).map(|i| dir.join(format!("member{i}.log"))).collect();
    Some((net, dir, logs))
}

pub struct Member {
    pub child: Child,
    stdin: ChildStdin,
}

/// Member processes (`chaos --child`) in the namespaces, and their stdout lines.
pub struct Members {
    pub list: Vec<Member>,
    tx: Sender<(usize, String)>,
    rx: Receiver<(usize, String)>,
}

impl Members {
    pub fn new() -> Members {
        let (tx, rx) = channel();
        Members { list: Vec::new(), tx, rx }
    }

    /// Runs `chaos` with `args` in namespace `i` (member `i`, the next in the list).
    pub fn spawn(&mut self, net: &Net, i: usize, args: &[String]) {
        assert_eq!(self.list.len(), i, "members are spawned in order");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &net.ns(i), env!("CARGO_BIN_EXE_chaos")])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn a member");
        let out = child.stdout.take().expect("piped");
        let stdin = child.stdin.take().expect("piped");
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send((i, line)).is_err() {
                    break;
                }
            }
        });
        self.list.push(Member { child, stdin });
    }

    pub fn tell(&mut self, i: usize, line: &str) {
        let _ = writeln!(self.list[i].stdin, "{line}");
        let _ = self.list[i].stdin.flush();
    }

    /// The first line from each of `from` that starts with `marker` (FAILED lines
    /// count as answers too; the caller checks).
    pub fn expect(&self, marker: &str, from: &[usize], within: Duration) -> Vec<(usize, String)> {
        let mut got: Vec<(usize, String)> = Vec::new();
        self.watch(within, |i, line| {
            if from.contains(&i)
                && !got.iter().any(|(j, _)| *j == i)
                && (line.starts_with(marker) || line.starts_with("FAILED"))
            {
                got.push((i, line.to_string()));
            }
            got.len() == from.len()
        })
        .unwrap_or_else(|| panic!("no {marker} from {from:?} within {within:?}; got {got:?}"));
        got.sort();
        got
    }

    /// Feeds every line to `f` until it returns true (`Some`) or `within` passes.
    pub fn watch(&self, within: Duration, mut f: impl FnMut(usize, &str) -> bool) -> Option<()> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            if let Ok((i, line)) = self.rx.recv_timeout(left.min(Duration::from_millis(200))) {
                if f(i, &line) {
                    return Some(());
                }
            }
        }
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        for m in &mut self.list {
            let _ = m.child.kill();
            let _ = m.child.wait();
        }
    }
}

pub use bench::read_delivery_log as read_log;
