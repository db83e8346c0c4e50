//! A network partition between namespaces this test creates (a bridge in a hub
//! namespace, one namespace and veth pair per member, nftables drop rules for the
//! cut): the majority side goes on, the minority side stops with the majority-rule
//! error, and nothing delivered diverges (each minority member's deliveries are a
//! prefix of the majority's).
//!
//! It needs root, `ip` (iproute2) and `nft` (nftables); where the machine cannot
//! create namespaces it says why and skips. Everything it creates is named after the
//! test's pid and removed on drop, also when it fails.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

const N: usize = 5;
const MINORITY: [usize; 2] = [3, 4];

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
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
struct Net {
    tag: String,
    made: Vec<String>,
}

impl Net {
    fn ns(&self, i: usize) -> String {
        format!("{}n{i}", self.tag)
    }
    fn ip(i: usize) -> String {
        format!("10.77.0.{}", i + 1)
    }

    fn create(tag: &str) -> Result<Net, String> {
        let mut net = Net { tag: tag.into(), made: Vec::new() };
        let hub = format!("{tag}h");
        run("ip", &["netns", "add", &hub])?;
        net.made.push(hub.clone());
        run("ip", &["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        run("ip", &["-n", &hub, "link", "set", "br0", "up"])?;
        for i in 0..N {
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
            run("ip", &["-n", &hub, "link", "set", &b, "master", "br0"])?;
            run("ip", &["-n", &hub, "link", "set", &b, "up"])?;
        }
        Ok(net)
    }

    /// Drops all traffic between the two sides, in both directions, at every member.
    fn partition(&self, minority: &[usize]) -> Result<(), String> {
        for i in 0..N {
            let other: Vec<String> =
                (0..N).filter(|j| minority.contains(j) != minority.contains(&i)).map(Net::ip).collect();
            let set = other.join(", ");
            let rules = format!(
                "table inet cut {{\n chain input {{ type filter hook input priority 0; ip saddr {{ {set} }} drop; }}\n \
                 chain output {{ type filter hook output priority 0; ip daddr {{ {set} }} drop; }}\n}}\n"
            );
            run_stdin("ip", &["netns", "exec", &self.ns(i), "nft", "-f", "-"], &rules)?;
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
fn unavailable(tag: &str) -> Option<String> {
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

struct Member {
    child: Child,
    stdin: ChildStdin,
}

struct Members {
    list: Vec<Member>,
    tx: Sender<(usize, String)>,
    rx: Receiver<(usize, String)>,
}

impl Members {
    fn spawn(&mut self, net: &Net, i: usize, log: &std::path::Path) {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &net.ns(i), env!("CARGO_BIN_EXE_chaos")])
            .args(["--child", &i.to_string(), "--port", "7100", "--ip", &Net::ip(i), "--name", &net.tag])
            .args(["--transport", "tcp", "--nodes", &N.to_string(), "--size", "32", "--rate", "300"])
            .args(["--heartbeat-ms", "50", "--failure-ms", "400", "--log"])
            .arg(log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if i > 0 {
            cmd.args(["--contact", &format!("{}:7100", Net::ip(0))]);
        }
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

    fn tell(&mut self, i: usize, line: &str) {
        let _ = writeln!(self.list[i].stdin, "{line}");
        let _ = self.list[i].stdin.flush();
    }

    /// The first line from each of `from` that starts with `marker` (FAILED lines
    /// count as answers too; the caller checks).
    fn expect(&self, marker: &str, from: &[usize], within: Duration) -> Vec<(usize, String)> {
        let deadline = Instant::now() + within;
        let mut got: Vec<(usize, String)> = Vec::new();
        while got.len() < from.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no {marker} from {from:?} within {within:?}; got {got:?}");
            if let Ok((i, line)) = self.rx.recv_timeout(left.min(Duration::from_millis(200))) {
                if from.contains(&i)
                    && !got.iter().any(|(j, _)| *j == i)
                    && (line.starts_with(marker) || line.starts_with("FAILED"))
                {
                    got.push((i, line));
                }
            }
        }
        got.sort();
        got
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

fn read_log(path: &std::path::Path) -> Vec<(u32, u64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.split(' ');
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect()
}

#[test]
fn majority_goes_on_minority_stops_nothing_diverges() {
    let tag = format!("sp{}", std::process::id() % 100_000);
    if let Some(why) = unavailable(&tag) {
        eprintln!("partition test skipped: {why}");
        return;
    }
    let net = Net::create(&tag).expect("namespaces");
    let dir = std::env::temp_dir().join(format!("spindle-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let logs: Vec<_> = (0..N).map(|i| dir.join(format!("member{i}.log"))).collect();
    let (tx, rx) = channel();
    let mut m = Members { list: Vec::new(), tx, rx };
    m.spawn(&net, 0, &logs[0]);
    let j = m.expect("JOINED", &[0], Duration::from_secs(30));
    assert!(j[0].1.starts_with("JOINED"), "{j:?}");
    for (i, log) in logs.iter().enumerate().skip(1) {
        m.spawn(&net, i, log);
    }
    let all: Vec<usize> = (0..N).collect();
    for (i, l) in m.expect("FULL", &all, Duration::from_secs(60)) {
        assert!(l.starts_with("FULL"), "member {i}: {l}");
    }
    for i in 0..N {
        m.tell(i, "GO");
    }
    std::thread::sleep(Duration::from_secs(1));
    net.partition(&MINORITY).expect("nftables rules");
    // The minority side must stop on its own, with the majority-rule error.
    for (i, l) in m.expect("FAILED", &MINORITY, Duration::from_secs(30)) {
        assert!(l.contains("minority"), "member {i} should stop as a minority: {l}");
    }
    // The majority side goes on sending and delivering, then reports.
    let majority: Vec<usize> = (0..N).filter(|i| !MINORITY.contains(i)).collect();
    std::thread::sleep(Duration::from_secs(2));
    for i in &majority {
        m.tell(*i, "STOP");
    }
    for (i, l) in m.expect("STOPPED", &majority, Duration::from_secs(30)) {
        assert!(l.starts_with("STOPPED"), "member {i}: {l}");
    }
    for i in &majority {
        m.tell(*i, "REPORT");
    }
    let results = m.expect("RESULT", &majority, Duration::from_secs(60));
    let parsed: Vec<serde_json::Value> = results
        .iter()
        .map(|(i, l)| {
            let json = l.strip_prefix("RESULT").unwrap_or_else(|| panic!("member {i}: {l}"));
            serde_json::from_str(json.trim()).unwrap()
        })
        .collect();
    for r in &parsed {
        assert_eq!(r["digest"], parsed[0]["digest"], "the majority agrees: {parsed:?}");
        assert_eq!(r["members"].as_array().map(|a| a.len()), Some(majority.len()), "{r}");
    }
    drop(m);
    let reference = read_log(&logs[majority[0]]);
    for i in &majority {
        assert_eq!(read_log(&logs[*i]), reference, "member {i} delivered the same sequence");
    }
    for i in MINORITY {
        let mine = read_log(&logs[i]);
        assert!(mine.len() <= reference.len() && reference[..mine.len()] == mine[..], "member {i} diverged");
        assert!(reference.len() > mine.len(), "the majority delivered more after the cut");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
