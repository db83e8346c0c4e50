//! Network namespaces for the multi-host tests (partition, hosts): a bridge in a
//! hub namespace and one namespace per member, each with a veth pair into the
//! bridge and the address 10.77.0.(i+1)/24; nftables rules cut traffic between
//! sides. Everything is named after the test's pid and removed on drop, also when
//! the test fails. Needs root, `ip` (iproute2) and `nft` (nftables); where the
//! machine cannot create namespaces, [`unavailable`] says why.

#![allow(dead_code)] // each test uses its part

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

pub fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn run_stdin(cmd: &str, args: &[&str], input: &str) -> Result<(), String> {
    let mut c =
        Command::new(cmd).args(args).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| e.to_string())?;
    c.stdin.take().expect("piped").write_all(input.as_bytes()).map_err(|e| e.to_string())?;
    let out = c.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// The namespaces; removed on drop.
pub struct Net {
    pub tag: String,
    n: usize,
    made: Vec<String>,
}

impl Net {
    pub fn ns(&self, i: usize) -> String {
        format!("{}n{i}", self.tag)
    }
    pub fn ip(i: usize) -> String {
        format!("10.77.0.{}", i + 1)
    }

    pub fn create(tag: &str, n: usize) -> Result<Net, String> {
        let mut net = Net { tag: tag.into(), n, made: Vec::new() };
        let hub = format!("{tag}h");
        run("ip", &["netns", "add", &hub])?;
        net.made.push(hub.clone());
        run("ip", &["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        // Multicast (discovery) is flooded to every port, as on a switch without
        // IGMP snooping.
        run("ip", &["-n", &hub, "link", "set", "br0", "type", "bridge", "mcast_snooping", "0"])?;
        run("ip", &["-n", &hub, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let ns = net.ns(i);
            run("ip", &["netns", "add", &ns])?;
            net.made.push(ns.clone());
            let (a, b) = (format!("{tag}a{i}"), format!("{tag}b{i}"));
            run("ip", &["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            run("ip", &["link", "set", &a, "netns", &ns])?;
            run("ip", &["link", "set", &b, "netns", &hub])?;
            run("ip", &["-n", &ns, "addr", "add", &format!("{}/24", Net::ip(i)), "dev", &a])?;
            run("ip", &["-n", &ns, "link", "set", &a, "up"])?;
            run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            // Multicast leaves by the veth (discovery); there is no default route.
            run("ip", &["-n", &ns, "route", "add", "224.0.0.0/4", "dev", &a])?;
            run("ip", &["-n", &hub, "link", "set", &b, "master", "br0"])?;
            run("ip", &["-n", &hub, "link", "set", &b, "up"])?;
        }
        Ok(net)
    }

    /// Drops all traffic between the two sides, in both directions, at every member.
    pub fn partition(&self, minority: &[usize]) -> Result<(), String> {
        for i in 0..self.n {
            let other: Vec<String> =
                (0..self.n).filter(|j| minority.contains(j) != minority.contains(&i)).map(Net::ip).collect();
            let set = other.join(", ");
            let rules = format!(
                "table inet cut {{\n chain input {{ type filter hook input priority 0; ip saddr {{ {set} }} drop; }}\n \
                 chain output {{ type filter hook output priority 0; ip daddr {{ {set} }} drop; }}\n}}\n"
            );
            run_stdin("ip", &["netns", "exec", &self.ns(i), "nft", "-f", "-"], &rules)?;
        }
        Ok(())
    }

    /// Removes the cut.
    pub fn heal(&self) -> Result<(), String> {
        for i in 0..self.n {
            run("ip", &["netns", "exec", &self.ns(i), "nft", "delete", "table", "inet", "cut"])?;
        }
        Ok(())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.made.drain(..).rev() {
            let _ = run("ip", &["netns", "del", &ns]);
        }
    }
}

/// Why this machine cannot run the test, if it cannot.
pub fn unavailable(tag: &str) -> Option<String> {
    let euid = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(2)).map(String::from)
    });
    if euid.as_deref() != Some("0") {
        return Some("needs root to create network namespaces".into());
    }
    if run("nft", &["--version"]).is_err() {
        return Some("needs nft (Debian package nftables)".into());
    }
    let probe = format!("{tag}p");
    match run("ip", &["netns", "add", &probe]) {
        Ok(()) => {
            let _ = run("ip", &["netns", "del", &probe]);
            None
        }
        Err(e) => Some(format!("cannot create a network namespace: {e}")),
    }
}

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
