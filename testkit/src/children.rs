//! A group of child processes and the stdio protocol that sets up their transports.

use crate::local::{loopback, others, unique_group};
use crate::{interrupted, TransportKind};
use spindle_sst::transport::{rdma, shm, tcp, NodeId, RegionSpec, SetupError, Transport};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

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

    /// As [`ChildSet::expect_lines`], with a line containing any of `markers`
    /// (the first that matches) from each child; returns what follows it.
    pub fn expect_any(&self, markers: &[&str], from: &[usize]) -> Result<Vec<String>, ClusterError> {
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

    /// Child `i`'s process id (to stop and continue it, say).
    pub fn pid(&self, i: usize) -> u32 {
        self.kids[i].id()
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

/// The variable that gives a tcp child the address to listen on (one of its own
/// namespace's, for runs whose children are emulated hosts); 127.0.0.1 without it.
pub const BIND_VAR: &str = "SPINDLE_CHILD_BIND";

/// Where a tcp child listens: [`BIND_VAR`]'s address, or loopback.
fn bind_address() -> Result<SocketAddr, SetupError> {
    match std::env::var(BIND_VAR) {
        Ok(ip) => {
            let ip: std::net::IpAddr = ip.parse().map_err(|_| SetupError::Invalid(format!("bad {BIND_VAR} {ip:?}")))?;
            Ok(SocketAddr::new(ip, 0))
        }
        Err(_) => Ok(loopback()),
    }
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
    child_transport_with(regions, timeout, None)
}

/// [`child_transport`], with tcp links that prove a secret and are sealed by `auth`.
pub fn child_transport_with(
    regions: &[RegionSpec],
    timeout: Duration,
    auth: Option<std::sync::Arc<dyn tcp::LinkAuth>>,
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
            Err(source) => Err(SetupError::Io { context: "read from parent".into(), source }),
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
            let l = tcp::bind(bind_address()?)?;
            println!("ADDR {}", l.local_addr());
            read(&mut stdin, &mut line)?;
            let cfg =
                tcp::TcpConfig { timeout, auth, ..tcp::TcpConfig::new(me, addresses(&line)?, 1, regions.to_vec()) };
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
