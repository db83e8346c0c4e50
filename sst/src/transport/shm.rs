//! The `shm` transport: nodes are processes on one host.
//!
//! Each node keeps its header and regions in one file, `/dev/shm/spindle-<group>-<id>`,
//! which every peer maps shared. A write is a word copy straight into the peer's
//! mapping: a real one-sided write, the target's CPU does nothing. The doorbell is a
//! futex word in the file, which peers ring through their own mapping.
//!
//! A node creates its file under a temporary name and renames it into place when the
//! header is complete, so peers never map a half-written header; a file left behind by
//! a dead process (its pid no longer exists) is ignored. Each node unlinks its own file
//! when its transport is dropped; [`remove_group_files`] removes what killed processes
//! left behind.

use super::direct::{segment_bytes, DirectTransport, Flavor, NodeMem, MAX_NODE_ID};
use super::{check_peers, probe_gone, NodeId, RegionSpec, SetupError};
use crate::region::Segment;
use crate::sync::Arc;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const DIR: &str = "/dev/shm";

/// How to join an `shm` group.
#[derive(Debug, Clone)]
pub struct ShmConfig {
    /// The group's name, shared by its nodes; letters, digits, `_`, `-` and `.` only.
    pub group: String,
    /// This node.
    pub me: NodeId,
    /// The other nodes.
    pub peers: Vec<NodeId>,
    /// Regions to register (the same on every node).
    pub regions: Vec<RegionSpec>,
    /// How long to wait for peers' files.
    pub timeout: Duration,
    /// At the deadline, go on without the peers still missing (they are left out of
    /// [`super::Transport::peers`]; writes to them fail) instead of failing. A group runtime
    /// uses this for a new view whose members may have died meanwhile.
    pub partial: bool,
    /// Stops waiting for a peer this says is gone (then it is missing at once, or,
    /// without `partial`, setup fails with [`SetupError::Gone`]).
    pub gone: Option<super::GoneProbe>,
}

impl ShmConfig {
    /// A config that waits up to `timeout` for every peer and fails without one.
    pub fn new(
        group: impl Into<String>,
        me: NodeId,
        peers: Vec<NodeId>,
        regions: Vec<RegionSpec>,
        timeout: Duration,
    ) -> Self {
        ShmConfig { group: group.into(), me, peers, regions, timeout, partial: false, gone: None }
    }
}

fn check_group(group: &str) -> Result<(), SetupError> {
    let ok = !group.is_empty()
        && group.len() <= 100
        && group.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(SetupError::Invalid(format!("bad shm group name {group:?}")))
    }
}

/// The file of node `node` in `group`.
pub fn path_for(group: &str, node: NodeId) -> PathBuf {
    PathBuf::from(format!("{DIR}/spindle-{group}-{}", node.0))
}

/// Removes every file of `group` under /dev/shm (after its processes were killed);
/// returns how many were removed.
pub fn remove_group_files(group: &str) -> usize {
    if check_group(group).is_err() {
        return 0;
    }
    let prefix = format!("spindle-{group}-");
    let Ok(dir) = std::fs::read_dir(DIR) else { return 0 };
    dir.flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// Removes every `/dev/shm/spindle-*` file whose creating process no longer exists
/// (left behind when a group was killed with -9); returns how many were removed.
/// Files of live processes, and files that are not ours, are left alone.
pub fn remove_stale_files() -> usize {
    let Ok(dir) = std::fs::read_dir(DIR) else { return 0 };
    let mut removed = 0;
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with("spindle-") {
            continue;
        }
        // A temporary file names its creator; a published one stores it in its header.
        let pid = match name.rsplit_once(".tmp") {
            Some((_, pid)) => pid.parse::<u64>().ok(),
            None => header_pid(&e.path()),
        };
        if let Some(pid) = pid {
            if !super::direct::process_alive(pid) && std::fs::remove_file(e.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// The creator pid from a published file's header, if it has our magic.
fn header_pid(path: &std::path::Path) -> Option<u64> {
    use std::io::Read;
    let mut head = [0u8; 24];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    let word = |i: usize| u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    (word(0) == super::direct::MAGIC).then(|| word(2))
}

fn map_file(path: &PathBuf, create_len: Option<usize>) -> std::io::Result<memmap2::MmapMut> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create_len.is_some())
        .truncate(create_len.is_some())
        // The segments hold the group's rows and messages: the members' user only.
        .mode(0o600)
        .open(path)?;
    if let Some(len) = create_len {
        file.set_len(len as u64)?;
    }
    // SAFETY: the file is shared with peer processes that write it concurrently; the
    // mapping is only ever accessed through atomic word operations (`Segment`), which
    // is what makes concurrent modification sound. Truncation by another process
    // would fault; our files are only truncated before they are renamed into place.
    unsafe { memmap2::MmapMut::map_mut(&file) }
}

/// Creates this node's file and maps every peer's, waiting up to `cfg.timeout`.
pub fn join(cfg: &ShmConfig) -> Result<DirectTransport, SetupError> {
    check_group(&cfg.group)?;
    let peers = check_peers(cfg.me, &cfg.peers)?;
    if cfg.me.0 >= MAX_NODE_ID || peers.iter().any(|p| p.0 >= MAX_NODE_ID) {
        return Err(SetupError::Invalid(format!("shm node ids must be below {MAX_NODE_ID}")));
    }
    super::check_regions(&cfg.regions)?;
    let path = path_for(&cfg.group, cfg.me);
    let tmp = PathBuf::from(format!("{}.tmp{}", path.display(), std::process::id()));
    let map = map_file(&tmp, Some(segment_bytes(&cfg.regions)))
        .map_err(SetupError::io(format!("create {}", tmp.display())))?;
    let local = match NodeMem::create(Segment::mapped(map), &cfg.regions) {
        Ok(m) => Arc::new(m),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    std::fs::rename(&tmp, &path).map_err(SetupError::io(format!("publish {}", path.display())))?;
    // From here on the transport (or this guard) owns the file.
    let cleanup = FileGuard(Some(path.clone()));

    let deadline = Instant::now() + cfg.timeout;
    let mut found: Vec<(NodeId, Arc<NodeMem>)> = Vec::new();
    // Each peer still missing, with when the probe last asked about it.
    let mut missing: Vec<(NodeId, Instant)> = peers.iter().map(|p| (*p, Instant::now())).collect();
    while !missing.is_empty() {
        let mut still = Vec::new();
        for (p, mut probed) in missing {
            if probe_gone(cfg.gone.as_ref(), p, &mut probed) {
                if !cfg.partial {
                    return Err(SetupError::Gone(p));
                }
                tracing::warn!(node = %cfg.me, peer = %p, "a peer is gone: not waiting for it");
                continue;
            }
            let ppath = path_for(&cfg.group, p);
            match map_file(&ppath, None) {
                Ok(map) => {
                    let mem = NodeMem::attach(Segment::mapped(map), p)?;
                    if mem_pid_alive(&mem) {
                        found.push((p, Arc::new(mem)));
                    } else {
                        still.push((p, probed)); // a stale file of a dead process
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => still.push((p, probed)),
                Err(e) => return Err(SetupError::io(format!("map {}", ppath.display()))(e)),
            }
        }
        missing = still;
        if !missing.is_empty() {
            if Instant::now() >= deadline {
                if cfg.partial {
                    break;
                }
                return Err(SetupError::Timeout(missing.into_iter().map(|(p, _)| p).collect()));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let t = DirectTransport::new(cfg.me, local, found, Flavor::Shm { path })?;
    std::mem::forget(cleanup);
    Ok(t)
}

fn mem_pid_alive(mem: &NodeMem) -> bool {
    super::direct::process_alive(mem.pid())
}

struct FileGuard(Option<PathBuf>);
impl Drop for FileGuard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_file(name: &str, pid: u64) -> PathBuf {
        let path = PathBuf::from(format!("{DIR}/{name}"));
        let mut head = Vec::new();
        head.extend_from_slice(&super::super::direct::MAGIC.to_le_bytes());
        head.extend_from_slice(&1u64.to_le_bytes());
        head.extend_from_slice(&pid.to_le_bytes());
        std::fs::write(&path, head).unwrap();
        path
    }

    #[test]
    fn stale_files_of_dead_processes_are_removed_live_ones_kept() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id() as u64;
        child.wait().unwrap();
        let me = std::process::id();
        let stale = fake_file(&format!("spindle-stale{me}-0"), dead);
        let live = fake_file(&format!("spindle-live{me}-0"), me as u64);
        let stale_tmp = PathBuf::from(format!("{DIR}/spindle-tmp{me}-0.tmp{dead}"));
        std::fs::write(&stale_tmp, b"partial").unwrap();
        let foreign = PathBuf::from(format!("{DIR}/spindle-foreign{me}"));
        std::fs::write(&foreign, [0u8; 24]).unwrap();
        remove_stale_files();
        assert!(!stale.exists() && !stale_tmp.exists(), "files of a dead process are removed");
        assert!(live.exists(), "a live process's file is kept");
        assert!(foreign.exists(), "a file without our magic is kept");
        std::fs::remove_file(live).unwrap();
        std::fs::remove_file(foreign).unwrap();
    }

    #[test]
    fn segments_are_created_for_their_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let path = PathBuf::from(format!("{DIR}/spindle-mode{}-0.tmp", std::process::id()));
        let map = map_file(&path, Some(4096)).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        drop(map);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn group_names_are_checked() {
        let cfg = ShmConfig::new("../etc", NodeId(0), vec![], vec![], Duration::ZERO);
        assert!(matches!(join(&cfg), Err(SetupError::Invalid(_))));
        assert_eq!(remove_group_files("a/b"), 0);
    }
}
