//! Test harness: builds groups of nodes on any transport, in one process or as child
//! processes of the test binary, with deadlines and cleanup.
#![allow(dead_code, missing_docs)]

use sst::transport::{mem::MemFabric, shm, tcp, NodeId, PeerEvent, RegionSpec, Transport};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const SETUP: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Mem,
    Shm,
    Tcp,
}

impl Kind {
    pub fn parse(s: &str) -> Kind {
        match s {
            "mem" => Kind::Mem,
            "shm" => Kind::Shm,
            "tcp" => Kind::Tcp,
            other => panic!("unknown transport {other}"),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mem => "mem",
            Kind::Shm => "shm",
            Kind::Tcp => "tcp",
        }
    }
}

/// A unique shm group name for this process and call.
pub fn unique_group(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("t{}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed), tag)
}

/// Removes the group's /dev/shm files when dropped (even if the test panics).
pub struct ShmCleanup(pub String);
impl Drop for ShmCleanup {
    fn drop(&mut self) {
        shm::remove_group_files(&self.0);
    }
}

/// A group of `n` nodes (ids 0..n) in this process.
pub struct Group {
    pub nodes: Vec<Arc<dyn Transport>>,
    _cleanup: Option<ShmCleanup>,
}

pub fn ids(n: usize) -> Vec<NodeId> {
    (0..n as u32).map(NodeId).collect()
}

fn others(me: NodeId, n: usize) -> Vec<NodeId> {
    ids(n).into_iter().filter(|p| *p != me).collect()
}

pub fn group(kind: Kind, n: usize, regions: &[RegionSpec]) -> Group {
    let regions = regions.to_vec();
    match kind {
        Kind::Mem => {
            let fabric = MemFabric::new();
            let hs: Vec<_> = ids(n)
                .into_iter()
                .map(|me| {
                    let (f, r) = (fabric.clone(), regions.clone());
                    std::thread::spawn(move || f.join(me, &others(me, n), &r, SETUP).expect("mem join"))
                })
                .collect();
            let nodes = hs.into_iter().map(|h| Arc::new(h.join().unwrap()) as Arc<dyn Transport>).collect();
            Group { nodes, _cleanup: None }
        }
        Kind::Shm => {
            let g = unique_group("in");
            let cleanup = ShmCleanup(g.clone());
            let hs: Vec<_> = ids(n)
                .into_iter()
                .map(|me| {
                    let cfg = shm::ShmConfig { group: g.clone(), me, peers: others(me, n), regions: regions.clone(), timeout: SETUP };
                    std::thread::spawn(move || shm::join(&cfg).expect("shm join"))
                })
                .collect();
            let nodes = hs.into_iter().map(|h| Arc::new(h.join().unwrap()) as Arc<dyn Transport>).collect();
            Group { nodes, _cleanup: Some(cleanup) }
        }
        Kind::Tcp => {
            let listeners: Vec<tcp::Listener> = (0..n).map(|_| tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap()).collect();
            let addrs: Vec<(NodeId, SocketAddr)> = listeners.iter().enumerate().map(|(i, l)| (NodeId(i as u32), l.local_addr())).collect();
            let hs: Vec<_> = listeners
                .into_iter()
                .enumerate()
                .map(|(i, l)| {
                    let me = NodeId(i as u32);
                    let peers = addrs.iter().filter(|(id, _)| *id != me).copied().collect();
                    let cfg = tcp::TcpConfig { timeout: SETUP, ..tcp::TcpConfig::new(me, peers, 7, regions.clone()) };
                    std::thread::spawn(move || l.establish(&cfg).expect("tcp establish"))
                })
                .collect();
            let nodes = hs.into_iter().map(|h| Arc::new(h.join().unwrap()) as Arc<dyn Transport>).collect();
            Group { nodes, _cleanup: None }
        }
    }
}

/// Polls `f` until it returns true or `deadline_after` passes; returns whether it did.
pub fn eventually(deadline_after: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + deadline_after;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Waits for a Broken event about `peer` on `t` (flushing, so tcp acks and errors move).
pub fn wait_broken(t: &dyn Transport, peer: NodeId, within: Duration) -> bool {
    let mut evs = Vec::new();
    eventually(within, || {
        t.flush();
        t.drain_events(&mut evs);
        evs.iter().any(|PeerEvent::Broken { peer: p, .. }| *p == peer)
    })
}

/// Child processes of this test binary, killed (and their shm files removed) on drop.
pub struct ChildSet {
    kids: Vec<Child>,
    lines: std::sync::mpsc::Receiver<(usize, String)>,
    start: Instant,
    deadline: Duration,
    _cleanup: ShmCleanup,
}

impl ChildSet {
    /// Starts `n` children running `entry` (an ignored test of this binary) with the
    /// `SST_CHILD_*` environment, and wires tcp addresses through their stdio.
    pub fn start(entry: &str, kind: Kind, n: usize, extra_env: &[(&str, String)], deadline: Duration) -> ChildSet {
        let exe = std::env::current_exe().unwrap();
        let group = unique_group("mp");
        let cleanup = ShmCleanup(group.clone());
        let (tx, rx) = std::sync::mpsc::channel::<(usize, String)>();
        let mut kids = Vec::new();
        let mut stdins = Vec::new();
        for i in 0..n {
            let mut cmd = Command::new(&exe);
            cmd.args([entry, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
                .env("SST_CHILD_KIND", kind.name())
                .env("SST_CHILD_ME", i.to_string())
                .env("SST_CHILD_N", n.to_string())
                .env("SST_CHILD_GROUP", &group)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            for (k, v) in extra_env {
                cmd.env(k, v);
            }
            let mut c = cmd.spawn().expect("spawn child");
            stdins.push(c.stdin.take().unwrap());
            let out = c.stdout.take().unwrap();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send((i, line)).is_err() {
                        break;
                    }
                }
            });
            kids.push(c);
        }
        let set = ChildSet { kids, lines: rx, start: Instant::now(), deadline, _cleanup: cleanup };
        // Each child reports "ADDR <addr>" (tcp) or "READY" (shm), then waits for the list.
        let mut first: Vec<Option<String>> = vec![None; n];
        while first.iter().any(Option::is_none) {
            let (i, line) = set.next_line().expect("children did not report in time");
            // libtest prints "test NAME ... " without a newline before a child's
            // first line, so markers are looked for anywhere in a line.
            if let Some(a) = after(&line, "ADDR ") {
                first[i] = Some(a.trim().to_string());
            } else if line.contains("READY") {
                first[i] = Some("-".into());
            }
        }
        let list: Vec<String> = first.into_iter().map(Option::unwrap).collect();
        for s in &mut stdins {
            writeln!(s, "{}", list.join(",")).unwrap();
        }
        // Setup is not a barrier (a fast node may finish before a slow one has mapped
        // its memory), so children report JOINED and wait for GO.
        set.expect_lines("JOINED", &(0..n).collect::<Vec<_>>());
        for s in &mut stdins {
            writeln!(s, "GO").unwrap();
        }
        set
    }

    fn next_line(&self) -> Option<(usize, String)> {
        let left = self.deadline.saturating_sub(self.start.elapsed());
        self.lines.recv_timeout(left).ok()
    }

    /// Waits for a line starting with `prefix` from each child in `from`; returns the
    /// rest of each line, in the order of `from`. Panics at the deadline.
    pub fn expect_lines(&self, prefix: &str, from: &[usize]) -> Vec<String> {
        let mut got: Vec<Option<String>> = vec![None; from.len()];
        while got.iter().any(Option::is_none) {
            let Some((i, line)) = self.next_line() else {
                panic!("children did not print {prefix:?} within {:?}; got {got:?}", self.deadline);
            };
            if let (Some(rest), Some(k)) = (after(&line, prefix), from.iter().position(|f| *f == i)) {
                got[k] = Some(rest.trim().to_string());
            }
        }
        got.into_iter().map(Option::unwrap).collect()
    }

    /// `kill -9` child `i`.
    pub fn kill(&mut self, i: usize) {
        let _ = self.kids[i].kill();
        let _ = self.kids[i].wait();
    }

    /// Waits for every child to exit; panics at the deadline.
    pub fn wait_all(&mut self) {
        self.wait_all_but(&[])
    }

    /// Waits for every child not in `skip` to exit; panics at the deadline.
    pub fn wait_all_but(&mut self, skip: &[usize]) {
        for (i, c) in self.kids.iter_mut().enumerate() {
            if skip.contains(&i) {
                continue;
            }
            while c.try_wait().unwrap().is_none() {
                assert!(self.start.elapsed() < self.deadline, "child did not exit in time");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

impl Drop for ChildSet {
    fn drop(&mut self) {
        for c in &mut self.kids {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|i| &line[i + marker.len()..])
}

/// In a child: builds this node's transport from the `SST_CHILD_*` environment.
pub fn child_transport(regions: &[RegionSpec]) -> (NodeId, usize, Arc<dyn Transport>) {
    let kind = Kind::parse(&std::env::var("SST_CHILD_KIND").unwrap());
    let me = NodeId(std::env::var("SST_CHILD_ME").unwrap().parse().unwrap());
    let n: usize = std::env::var("SST_CHILD_N").unwrap().parse().unwrap();
    let group = std::env::var("SST_CHILD_GROUP").unwrap();
    let mut stdin = BufReader::new(std::io::stdin());
    let mut line = String::new();
    let t: Arc<dyn Transport> = match kind {
        Kind::Tcp => {
            let l = tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
            println!("ADDR {}", l.local_addr());
            stdin.read_line(&mut line).unwrap();
            let peers = line
                .trim()
                .split(',')
                .enumerate()
                .filter(|(i, _)| *i as u32 != me.0)
                .map(|(i, a)| (NodeId(i as u32), a.parse().unwrap()))
                .collect();
            let cfg = tcp::TcpConfig { timeout: SETUP, ..tcp::TcpConfig::new(me, peers, 7, regions.to_vec()) };
            Arc::new(l.establish(&cfg).expect("tcp establish"))
        }
        Kind::Shm => {
            println!("READY");
            stdin.read_line(&mut line).unwrap();
            let cfg = shm::ShmConfig { group, me, peers: others(me, n), regions: regions.to_vec(), timeout: SETUP };
            Arc::new(shm::join(&cfg).expect("shm join"))
        }
        Kind::Mem => panic!("mem nodes cannot be processes"),
    };
    println!("JOINED");
    line.clear();
    stdin.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "GO");
    (me, n, t)
}
