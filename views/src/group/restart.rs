//! A member that comes back finds its group, also when the group lost its majority
//! meanwhile (Derecho's restart from persistent state, in its simplest form).
//!
//! With [`crate::config::Config::state_dir`] a member keeps, in a file of its own,
//! its node id and the last view it installed (written at every install). Started
//! again on that directory with no node id, it takes its id back, so ids never
//! collide and the others know it.
//!
//! A member that lost the majority of its view (a survivor of two, or of three when
//! two failed) is *stranded*: it installs nothing, but it answers discovery with a
//! `stranded` beacon (its last view) and keeps the view's members and its state. A
//! restarted member of that view that finds no running group joins through the
//! stranded one (the one stranded in the latest view, if several answer),
//! claiming its id and naming the last view it installed. A stranded member whose
//! view is older than that is stale (the group went on without it) and refuses.
//! Otherwise the restarted member is counted towards restoring the view; the
//! member out of it that counted a strict majority of the last view starts view
//! `v + 1` with the members it counted (a restarted one takes the restarter's state,
//! as a joiner does), and never two (`crate::restore`). Members that stayed alive
//! count each other the same way (see `rejoin`).
//!
//! A new member (no state directory) that hears only stranded beacons does not
//! start a second group: it fails to start, saying which view is stranded and what
//! brings it back.

use super::Inner;
use crate::view::View;
use serde::{Deserialize, Serialize};
use spindle_sst::transport::NodeId;
use std::path::{Path, PathBuf};

/// The file's format version.
const VERSION: u8 = 1;
const FILE: &str = "member";

/// What a member keeps of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stored {
    version: u8,
    pub(crate) group: String,
    pub(crate) node: u32,
    pub(crate) view: u64,
    pub(crate) members: Vec<u32>,
}

/// Why a state directory could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateDirError {
    /// The file could not be read or written.
    #[error("state directory {path}: {why}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        why: String,
    },
    /// The file is not one this version wrote (damaged, or from elsewhere).
    #[error("state directory {0}: the member file is damaged or of another version")]
    Damaged(PathBuf),
    /// The directory is a member of another group.
    #[error("state directory {path} belongs to group `{group}`")]
    OtherGroup {
        /// The file.
        path: PathBuf,
        /// The group it names.
        group: String,
    },
}

fn io(path: &Path, e: std::io::Error) -> StateDirError {
    StateDirError::Io { path: path.to_path_buf(), why: e.to_string() }
}

/// What `dir` holds of a member of `group`, if anything.
pub(crate) fn load(dir: &Path, group: &str) -> Result<Option<Stored>, StateDirError> {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path, e)),
    };
    let s: Stored = postcard::from_bytes(&bytes).map_err(|_| StateDirError::Damaged(path.clone()))?;
    if s.version != VERSION || s.node >= spindle_sst::transport::MAX_NODE_ID || !s.members.contains(&s.node) {
        return Err(StateDirError::Damaged(path));
    }
    if s.group != group {
        return Err(StateDirError::OtherGroup { path, group: s.group });
    }
    Ok(Some(s))
}

/// Keeps `me` and `view` in `dir` (a new file renamed over the old one: a crash
/// leaves one or the other whole).
pub(crate) fn store(dir: &Path, group: &str, me: NodeId, view: &View) -> Result<(), StateDirError> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let s = Stored {
        version: VERSION,
        group: group.into(),
        node: me.0,
        view: view.id().0,
        members: view.members().iter().map(|n| n.0).collect(),
    };
    let bytes = postcard::to_stdvec(&s).map_err(|_| StateDirError::Damaged(dir.join(FILE)))?;
    let (tmp, path) = (dir.join(format!("{FILE}.new")), dir.join(FILE));
    std::fs::write(&tmp, bytes).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))
}

/// Keeps the view this member just installed, if it has a state directory (a
/// failure is logged: the group goes on, only a later restart loses its identity).
pub(crate) fn remember(inner: &Inner, view: &View) {
    if let Some(dir) = &inner.cfg.state_dir {
        if let Err(e) = store(dir, &inner.cfg.name, NodeId(inner.cfg.node_id), view) {
            tracing::warn!(%e, "could not keep this member's view");
        }
    }
}

/// Where a program keeps its members' state directories unless told: in
/// `$SPINDLE_DATA_DIR/<program>/<group>`, else under `$XDG_DATA_HOME/spindle`, else
/// `$HOME/.local/share/spindle`, else `spindle-data` in the working directory
/// (never the temporary directory, which a reboot may empty).
pub fn default_state_base(program: &str, group: &str) -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let root = var("SPINDLE_DATA_DIR")
        .or_else(|| var("XDG_DATA_HOME").map(|d| d.join("spindle")))
        .or_else(|| var("HOME").map(|h| h.join(".local").join("share").join("spindle")))
        .unwrap_or_else(|| PathBuf::from("spindle-data"));
    root.join(program).join(group)
}

/// The node id a member of `group` kept in state directory `dir`, if it ran there
/// before: for a program that needs its id before it starts (a Tailwind log's
/// member, whose segment files go by it).
pub fn saved_node(dir: &Path, group: &str) -> Result<Option<u32>, StateDirError> {
    Ok(load(dir, group)?.map(|s| s.node))
}

/// Claims a state directory under `base` for this process, for programs that run
/// several members per host with one command (a demo in three terminals): the
/// first `slot-N` that no live process holds. A member killed and started again
/// with the same command finds its own slot free again (its process is gone) and
/// comes back as itself; two members running at once never share one. The claim
/// is a `lock` file holding the process id, made with an exclusive create; a lock
/// of a process that no longer runs (`/proc/<pid>` is gone) is taken over.
pub fn claim_slot(base: &Path) -> Result<PathBuf, StateDirError> {
    let me = std::process::id();
    for n in 0..1024 {
        let slot = base.join(format!("slot-{n}"));
        std::fs::create_dir_all(&slot).map_err(|e| io(&slot, e))?;
        let lock = slot.join("lock");
        for _ in 0..2 {
            match std::fs::OpenOptions::new().write(true).create_new(true).open(&lock) {
                Ok(mut f) => {
                    use std::io::Write;
                    f.write_all(me.to_string().as_bytes()).map_err(|e| io(&lock, e))?;
                    return Ok(slot);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let holder = std::fs::read_to_string(&lock).ok().and_then(|s| s.trim().parse::<u32>().ok());
                    let alive = holder.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
                    if alive {
                        break; // the next slot
                    }
                    // A dead holder's lock: moved aside by one claimer only (a rename
                    // is atomic), then the exclusive create is tried again.
                    let _ = std::fs::rename(&lock, slot.join(format!("lock.stale.{me}")));
                    let _ = std::fs::remove_file(slot.join(format!("lock.stale.{me}")));
                }
                Err(e) => return Err(io(&lock, e)),
            }
        }
    }
    Err(StateDirError::Io { path: base.to_path_buf(), why: "every slot is held".into() })
}

/// Gives a claimed slot back (its lock file), if this process holds it.
pub fn release_slot(slot: &Path) {
    let lock = slot.join("lock");
    if std::fs::read_to_string(&lock).ok().and_then(|s| s.trim().parse::<u32>().ok()) == Some(std::process::id()) {
        let _ = std::fs::remove_file(lock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::ViewId;

    #[test]
    fn a_member_file_round_trips_and_bad_ones_are_refused() {
        let dir = std::env::temp_dir().join(format!("spindle-restart-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(load(&dir, "g"), Ok(None), "nothing kept yet");
        let view = View::with_id(ViewId(4), vec![NodeId(0), NodeId(3)]);
        store(&dir, "g", NodeId(3), &view).unwrap();
        let s = load(&dir, "g").unwrap().unwrap();
        assert_eq!((s.node, s.view, s.members.clone()), (3, 4, vec![0, 3]));
        assert!(matches!(load(&dir, "h"), Err(StateDirError::OtherGroup { .. })));
        std::fs::write(dir.join(FILE), b"\x07garbage").unwrap();
        assert!(matches!(load(&dir, "g"), Err(StateDirError::Damaged(_))));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn slots_are_claimed_once_and_a_dead_holder_s_is_taken_over() {
        let base = std::env::temp_dir().join(format!("spindle-slots-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let a = claim_slot(&base).unwrap();
        let b = claim_slot(&base).unwrap();
        assert_ne!(a, b, "a live holder's slot is not given twice");
        // A holder that no longer runs (no process has id u32::MAX - 1).
        std::fs::write(a.join("lock"), format!("{}", u32::MAX - 1)).unwrap();
        assert_eq!(claim_slot(&base).unwrap(), a, "a dead holder's slot is taken over");
        release_slot(&b);
        assert_eq!(claim_slot(&base).unwrap(), b, "a released slot is free");
        let _ = std::fs::remove_dir_all(&base);
    }
}
