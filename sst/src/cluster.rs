//! Running a group of nodes on one host: as threads of this process, or as child
//! processes, for benchmarks, demos and multi-process tests.
//!
//! A parent starts `n` children with [`ChildSet::start`]; each child calls
//! [`child_transport`], which builds its transport from the environment the parent set
//! (`SPINDLE_CHILD_KIND`, `_ME`, `_N`, `_GROUP`). They talk over the children's stdio:
//!
//! ```text
//!   child:  ADDR 127.0.0.1:port   (tcp; it bound port 0)   or   READY   (shm)
//!   parent: addr0,addr1,...       (one line to every child)
//!   child:  JOINED                (its transport is set up)
//!   parent: GO                    (all are: setup is not a barrier by itself)
//!   child:  ... RESULT <text>     (whatever the program reports)
//! ```
//!
//! Markers are found anywhere in a line (a test harness may print before them).
//! Dropping a [`ChildSet`] kills its children and removes the group's `/dev/shm`
//! files; [`interrupted`] lets a parent notice Ctrl-C and clean up the same way, and
//! [`die_with_parent`] makes a child exit if its parent is killed.

use crate::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use crate::sync::Arc;
use crate::transport::{mem::MemFabric, rdma, shm, tcp, NodeId, RegionSpec, SetupError, Transport};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Which transport a group uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// Threads of one process.
    Mem,
    /// Processes sharing /dev/shm.
    Shm,
    /// Processes connected by tcp on 127.0.0.1.
    Tcp,
    /// Nodes with RDMA queue pairs (the `rdma` feature and a device; see
    /// `transport::rdma`), set up over 127.0.0.1.
    Rdma,
}

impl TransportKind {
    /// The name used on command lines.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Mem => "mem",
            TransportKind::Shm => "shm",
            TransportKind::Tcp => "tcp",
            TransportKind::Rdma => "rdma",
        }
    }
}

impl std::str::FromStr for TransportKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mem" => Ok(TransportKind::Mem),
            "shm" => Ok(TransportKind::Shm),
            "tcp" => Ok(TransportKind::Tcp),
            "rdma" => Ok(TransportKind::Rdma),
            other => Err(format!("unknown transport {other:?} (expected mem, shm, tcp or rdma)")),
        }
    }
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Errors running a group of child processes.
#[derive(Debug, Error)]
pub enum ClusterError {
    /// A child did not say what was expected before the deadline.
    #[error("children did not report {what:?} within {deadline:?}")]
    Timeout {
        /// The awaited marker.
        what: String,
        /// The deadline.
        deadline: Duration,
    },
    /// Ctrl-C or SIGTERM arrived.
    #[error("interrupted")]
    Interrupted,
    /// A child exited before reporting.
    #[error("child {0} exited early")]
    ChildExited(usize),
    /// Spawning or talking to a child failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Transport setup failed.
    #[error(transparent)]
    Setup(#[from] SetupError),
}

/// A group name unique to this process and call (for `/dev/shm` files).
pub fn unique_group(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{tag}{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Every node but `me` with its address (node `i` at `addrs[i]`).
fn others_at(me: NodeId, addrs: &[SocketAddr]) -> Vec<(NodeId, SocketAddr)> {
    addrs.iter().enumerate().map(|(i, a)| (NodeId(i as u32), *a)).filter(|(id, _)| *id != me).collect()
}

fn others(me: NodeId, n: usize) -> Vec<NodeId> {
    (0..n as u32).map(NodeId).filter(|p| *p != me).collect()
}

/// `n` nodes (ids `0..n`) in this process. Removes its `/dev/shm` files when dropped.
#[derive(Debug)]
pub struct LocalGroup {
    /// The nodes' transports, by id.
    pub nodes: Vec<Arc<dyn Transport>>,
    shm_group: Option<String>,
}

impl Drop for LocalGroup {
    fn drop(&mut self) {
        self.nodes.clear();
        if let Some(g) = &self.shm_group {
            shm::remove_group_files(g);
        }
    }
}

/// Sets up `n` nodes of `kind` in this process (each joins on its own thread, as
/// separate processes would).
pub fn local_group(
    kind: TransportKind,
    n: usize,
    regions: &[RegionSpec],
    timeout: Duration,
) -> Result<LocalGroup, SetupError> {
    type Join = Box<dyn FnOnce() -> Result<Arc<dyn Transport>, SetupError> + Send>;
    let mut shm_group = None;
    let joins: Vec<Join> = match kind {
        TransportKind::Mem => {
            let fabric = MemFabric::new();
            (0..n as u32)
                .map(|i| {
                    let (f, r, me) = (fabric.clone(), regions.to_vec(), NodeId(i));
                    Box::new(move || f.join(me, &others(me, n), &r, timeout).map(|t| Arc::new(t) as Arc<dyn Transport>))
                        as Join
                })
                .collect()
        }
        TransportKind::Shm => {
            let g = unique_group("local");
            shm_group = Some(g.clone());
            (0..n as u32)
                .map(|i| {
                    let me = NodeId(i);
                    let cfg = shm::ShmConfig::new(g.clone(), me, others(me, n), regions.to_vec(), timeout);
                    Box::new(move || shm::join(&cfg).map(|t| Arc::new(t) as Arc<dyn Transport>)) as Join
                })
                .collect()
        }
        TransportKind::Tcp => {
            let listeners = (0..n).map(|_| tcp::bind(loopback())).collect::<Result<Vec<_>, _>>()?;
            let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr()).collect();
            listeners
                .into_iter()
                .enumerate()
                .map(|(i, l)| {
                    let me = NodeId(i as u32);
                    let cfg = tcp::TcpConfig {
                        timeout,
                        ..tcp::TcpConfig::new(me, others_at(me, &addrs), 1, regions.to_vec())
                    };
                    Box::new(move || l.establish(&cfg).map(|t| Arc::new(t) as Arc<dyn Transport>)) as Join
                })
                .collect()
        }
        TransportKind::Rdma => {
            let listeners = (0..n).map(|_| rdma::bind(loopback())).collect::<Result<Vec<_>, _>>()?;
            let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr()).collect();
            let group = rdma::group_number(&unique_group("rdma"));
            listeners
                .into_iter()
                .enumerate()
                .map(|(i, l)| {
                    let me = NodeId(i as u32);
                    let base = rdma::RdmaConfig::new(me, others_at(me, &addrs), group, regions.to_vec());
                    let cfg = rdma::config_from_env(rdma::RdmaConfig { timeout, ..base });
                    Box::new(move || l.establish_dyn(&cfg)) as Join
                })
                .collect()
        }
    };
    let handles: Vec<_> = joins.into_iter().map(std::thread::spawn).collect();
    let mut group = LocalGroup { nodes: Vec::new(), shm_group };
    let mut first_err = None;
    for h in handles {
        match h.join().expect("join thread panicked") {
            Ok(t) => group.nodes.push(t),
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(group),
    }
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Child processes of one group; killed (and their shm files removed) on drop.
#[derive(Debug)]
pub struct ChildSet {
    kids: Vec<Child>,
    stdins: Vec<ChildStdin>,
    lines: std::sync::mpsc::Receiver<(usize, Option<String>)>,
    start: Instant,
    deadline: Duration,
    group: String,
}

impl ChildSet {
    /// Starts `n` children, `command(i)` for child `i`, with the `SPINDLE_CHILD_*`
    /// environment set, and runs the setup protocol (see the module docs). All
    /// waiting is bounded by `deadline` from now.
    pub fn start(
        command: impl Fn(usize) -> Command,
        kind: TransportKind,
        n: usize,
        deadline: Duration,
    ) -> Result<ChildSet, ClusterError> {
        let group = unique_group("run");
        let (tx, rx) = std::sync::mpsc::channel();
        let mut set =
            ChildSet { kids: Vec::new(), stdins: Vec::new(), lines: rx, start: Instant::now(), deadline, group };
        for i in 0..n {
            let mut cmd = command(i);
            cmd.env("SPINDLE_CHILD_KIND", kind.name())
                .env("SPINDLE_CHILD_ME", i.to_string())
                .env("SPINDLE_CHILD_N", n.to_string())
                .env("SPINDLE_CHILD_GROUP", &set.group)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            let mut c = cmd.spawn()?;
            set.stdins.push(c.stdin.take().expect("piped stdin"));
            let out = c.stdout.take().expect("piped stdout");
            set.kids.push(c);
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send((i, Some(line))).is_err() {
                        return;
                    }
                }
                let _ = tx.send((i, None));
            });
        }
        let all: Vec<usize> = (0..n).collect();
        let first = set.expect_any(&["ADDR ", "READY"], &all)?;
        let list: Vec<String> = first.iter().map(|a| if a.is_empty() { "-".to_string() } else { a.clone() }).collect();
        set.tell_all(&list.join(","))?;
        set.expect_lines("JOINED", &all)?;
        set.tell_all("GO")?;
        Ok(set)
    }

    /// The group name (shm file prefix).
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Writes one line to every child's stdin.
    pub fn tell_all(&mut self, line: &str) -> Result<(), ClusterError> {
        for i in 0..self.stdins.len() {
            self.tell(i, line)?;
        }
        Ok(())
    }

    /// Writes one line to child `i`'s stdin.
    pub fn tell(&mut self, i: usize, line: &str) -> Result<(), ClusterError> {
        writeln!(self.stdins[i], "{line}")?;
        Ok(())
    }

    fn next_line(&self, what: &str) -> Result<(usize, Option<String>), ClusterError> {
        let step = Duration::from_millis(50);
        loop {
            if interrupted() {
                return Err(ClusterError::Interrupted);
            }
            let left = self.deadline.saturating_sub(self.start.elapsed());
            if left.is_zero() {
                return Err(ClusterError::Timeout { what: what.into(), deadline: self.deadline });
            }
            match self.lines.recv_timeout(left.min(step)) {
                Ok(x) => return Ok(x),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(ClusterError::Timeout { what: what.into(), deadline: self.deadline })
                }
            }
        }
    }

    fn expect_any(&self, markers: &[&str], from: &[usize]) -> Result<Vec<String>, ClusterError> {
        let mut got: Vec<Option<String>> = vec![None; from.len()];
        while got.iter().any(Option::is_none) {
            let (i, line) = self.next_line(markers[0])?;
            let Some(k) = from.iter().position(|f| *f == i) else { continue };
            let Some(line) = line else {
                if got[k].is_none() {
                    return Err(ClusterError::ChildExited(i));
                }
                continue;
            };
            if got[k].is_none() {
                got[k] = markers.iter().find_map(|m| after(&line, m)).map(|rest| rest.trim().to_string());
            }
        }
        Ok(got.into_iter().map(|g| g.unwrap_or_default()).collect())
    }

    /// Waits for a line containing `marker` from each child in `from`; returns what
    /// follows the marker on each, in the order of `from`.
    pub fn expect_lines(&self, marker: &str, from: &[usize]) -> Result<Vec<String>, ClusterError> {
        self.expect_any(&[marker], from)
    }

    /// `kill -9` child `i` and reap it.
    pub fn kill(&mut self, i: usize) {
        let _ = self.kids[i].kill();
        let _ = self.kids[i].wait();
    }

    /// Waits (within the deadline) for every child not in `skip` to exit; returns
    /// whether they all exited successfully.
    pub fn wait_all_but(&mut self, skip: &[usize]) -> Result<bool, ClusterError> {
        let mut ok = true;
        for (i, c) in self.kids.iter_mut().enumerate() {
            if skip.contains(&i) {
                continue;
            }
            loop {
                if let Some(status) = c.try_wait()? {
                    ok &= status.success();
                    break;
                }
                if interrupted() {
                    return Err(ClusterError::Interrupted);
                }
                if self.start.elapsed() >= self.deadline {
                    return Err(ClusterError::Timeout { what: "exit".into(), deadline: self.deadline });
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(ok)
    }
}

impl Drop for ChildSet {
    fn drop(&mut self) {
        for c in &mut self.kids {
            let _ = c.kill();
            let _ = c.wait();
        }
        shm::remove_group_files(&self.group);
    }
}

fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|i| &line[i + marker.len()..])
}

/// In a child started by [`ChildSet::start`]: is this process one?
pub fn is_child() -> bool {
    std::env::var_os("SPINDLE_CHILD_ME").is_some()
}

/// In a child: blocks until the parent writes a line (or closes stdin); returns it.
/// Children that report results wait here, so that no peer sees them exit while
/// the parent is still collecting.
pub fn wait_for_parent() -> String {
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    line.trim().to_string()
}

/// In a child: builds this node's transport from the environment and the parent's
/// stdio protocol; returns (this node, group size, transport). Tcp setup uses a
/// connection timeout of `timeout`.
pub fn child_transport(
    regions: &[RegionSpec],
    timeout: Duration,
) -> Result<(NodeId, usize, Arc<dyn Transport>), SetupError> {
    let env =
        |k: &str| std::env::var(k).map_err(|_| SetupError::Invalid(format!("{k} is not set; not started by ChildSet")));
    let kind: TransportKind = env("SPINDLE_CHILD_KIND")?.parse().map_err(SetupError::Invalid)?;
    let me = NodeId(env("SPINDLE_CHILD_ME")?.parse().map_err(|_| SetupError::Invalid("bad SPINDLE_CHILD_ME".into()))?);
    let n: usize = env("SPINDLE_CHILD_N")?.parse().map_err(|_| SetupError::Invalid("bad SPINDLE_CHILD_N".into()))?;
    let group = env("SPINDLE_CHILD_GROUP")?;
    let mut stdin = BufReader::new(std::io::stdin());
    let mut line = String::new();
    let read = |stdin: &mut BufReader<std::io::Stdin>, line: &mut String| -> Result<(), SetupError> {
        line.clear();
        match stdin.read_line(line) {
            Ok(0) => Err(SetupError::Invalid("parent closed stdin".into())),
            Ok(_) => Ok(()),
            Err(e) => Err(SetupError::io("read from parent")(e)),
        }
    };
    // The peers' setup addresses from the parent's line (tcp and rdma).
    let addresses = |line: &str| -> Result<Vec<(NodeId, SocketAddr)>, SetupError> {
        let mut peers = Vec::new();
        for (i, a) in line.trim().split(',').enumerate() {
            if i as u32 != me.0 {
                let addr = a.parse().map_err(|_| SetupError::Invalid(format!("bad address {a:?} from parent")))?;
                peers.push((NodeId(i as u32), addr));
            }
        }
        Ok(peers)
    };
    let t: Arc<dyn Transport> = match kind {
        TransportKind::Tcp => {
            let l = tcp::bind(loopback())?;
            println!("ADDR {}", l.local_addr());
            read(&mut stdin, &mut line)?;
            let cfg = tcp::TcpConfig { timeout, ..tcp::TcpConfig::new(me, addresses(&line)?, 1, regions.to_vec()) };
            Arc::new(l.establish(&cfg)?)
        }
        TransportKind::Rdma => {
            let l = rdma::bind(loopback())?;
            println!("ADDR {}", l.local_addr());
            read(&mut stdin, &mut line)?;
            let base = rdma::RdmaConfig::new(me, addresses(&line)?, rdma::group_number(&group), regions.to_vec());
            l.establish_dyn(&rdma::config_from_env(rdma::RdmaConfig { timeout, ..base }))?
        }
        TransportKind::Shm => {
            println!("READY");
            read(&mut stdin, &mut line)?;
            let cfg = shm::ShmConfig::new(group, me, others(me, n), regions.to_vec(), timeout);
            Arc::new(shm::join(&cfg)?)
        }
        TransportKind::Mem => return Err(SetupError::Invalid("mem nodes are threads, not processes".into())),
    };
    println!("JOINED");
    read(&mut stdin, &mut line)?;
    if line.trim() != "GO" {
        return Err(SetupError::Invalid(format!("expected GO from parent, got {line:?}")));
    }
    Ok((me, n, t))
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs SIGINT and SIGTERM handlers that set a flag (see [`interrupted`]), so a
/// parent can kill its children and remove their files before it exits.
pub fn catch_interrupts() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `on_signal` is async-signal-safe (one atomic store) and lives for
        // the whole program; `signal` only installs it.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// True once SIGINT or SIGTERM arrived after [`catch_interrupts`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// In a child: ask the kernel to SIGKILL this process when its parent dies, so a
/// parent killed with -9 leaves no orphans behind.
pub fn die_with_parent() {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number and no pointers.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
    }
}

/// Polls `f` every `step` until it returns true or `within` passes; returns whether
/// it did. The bounded wait that tests, benchmarks and demos use instead of spinning.
pub fn poll_until(within: Duration, step: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(step);
    }
}

/// Whose CPU time [`cpu_time`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuClock {
    /// The calling thread (a `mem` node is one thread of a shared process).
    Thread,
    /// The whole process (an `shm` or `tcp` node is a process).
    Process,
}

/// CPU time (user + system) used so far by the calling thread or this process, with
/// nanosecond resolution.
pub fn cpu_time(clock: CpuClock) -> Duration {
    let id = match clock {
        CpuClock::Thread => libc::CLOCK_THREAD_CPUTIME_ID,
        CpuClock::Process => libc::CLOCK_PROCESS_CPUTIME_ID,
    };
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `n` distinct loopback ports, each free together with the next one (a member's
/// control port and the data port after it), for members to bind. Another process
/// may take one before it is bound; callers that can retry should.
pub fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let mut out = Vec::new();
    for _ in 0..500 {
        if out.len() == n {
            break;
        }
        let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let p = l.local_addr().map_err(|e| e.to_string())?.port();
        if p < u16::MAX
            && !out.contains(&p)
            && !out.contains(&(p + 1))
            && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok()
        {
            out.push(p);
        }
    }
    if out.len() < n {
        return Err("not enough free loopback ports".into());
    }
    Ok(out)
}

/// One loopback control address whose port and the next are free (see
/// [`free_ports`]); panics if there is none, for tests.
pub fn free_control_addr() -> SocketAddr {
    let port = free_ports(1).expect("a free loopback port pair")[0];
    SocketAddr::from(([127, 0, 0, 1], port))
}
