//! Replicated logs in a domain: Tailwind ([`spindle_tailwind::service`]) as one service
//! among the domain's topics, in the same group and views.
//!
//! A log is created at run time like a topic, by an edit of the domain's table
//! ([`crate::DomainParticipant::create_log`]); every participant then runs a member
//! of it ([`LogService`]): the log's **replicas** hold it (the primary takes
//! appends and writes them into the backups' buffers with one-sided writes), the
//! others forward their appends to the primary.
//!
//! **Who holds a log.** The replicas of log `name` in a view are the `replicas`
//! members that score highest for it (rendezvous hashing of the name and the node
//! id, [`members_of`]); the highest is the primary. So logs' primaries spread over
//! the members, a member that joins or leaves moves only the logs it scores high
//! for, and a failed primary's log goes to the next one in its order, which has
//! every acknowledged record (see [`spindle_tailwind::service`] for the failover).
//!
//! **Buffers.** Log `i` of the table (in creation order) has its buffers in
//! regions `LOG_REGIONS + 64 i ..` of every view's transport (at every member: a
//! view's regions are the same everywhere); the pages of a buffer a member never
//! writes are never touched. Its segment files are in
//! `<log_dir>/tw-<name>-n<node>/` (the name's bytes other than letters, digits,
//! `-` and `_` written as `_`).
//!
//! ```no_run
//! use spindle_dds::{DdsConfig, DomainParticipant, LogQos};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cfg = DdsConfig::from_toml("node_id = 0\nlisten = \"127.0.0.1:7400\"\nname = \"shop\"")?;
//! let p = DomainParticipant::new(cfg)?;
//! let orders = p.create_log("orders", LogQos::default())?;
//! let lsn = orders.append(b"order 1: two apples")?;
//! for r in orders.read_from(lsn) {
//!     let (lsn, bytes) = r?;
//!     println!("{lsn:?} {}", String::from_utf8_lossy(&bytes));
//! }
//! # Ok(()) }
//! ```

use spindle_sst::sync::lock;
use spindle_sst::transport::{NodeId, RegionId, RegionSpec, Transport};
pub use spindle_tailwind::service::Ack;
use spindle_tailwind::service::{wire, LogService, StartError, TailwindConfig, LOG_REGIONS};
use spindle_views::group::Group;
use spindle_views::view::View;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) mod entry;

pub use crate::qos::LogQos;
use entry::REGIONS_PER_LOG;
pub use entry::{members_of, LogEntry, MAX_LOGS};

/// The first region of log `i` of the table.
fn region_base(i: usize) -> u16 {
    LOG_REGIONS + i as u16 * REGIONS_PER_LOG
}

/// The settings of this member of `entry` (files in `log_dir`).
fn config(entry: &LogEntry, log_dir: &Path, me: NodeId) -> TailwindConfig {
    TailwindConfig {
        log: entry.number,
        replicas: entry.qos.replicas as usize,
        buffer: entry.qos.buffer_bytes as usize,
        buffers: entry.qos.buffers as usize,
        ack: entry.qos.ack,
        ..TailwindConfig::new(dir_of(log_dir, &entry.name, me))
    }
}

/// The regions every log of `view`'s table takes in its transport (buffers and
/// commit word; the same at every member).
pub(crate) fn regions(view: &View) -> Vec<RegionSpec> {
    regions_of(view, |_| true)
}

/// The regions of [`regions`] written at `node` in `view`: those of the logs it
/// holds there (their primary writes its own buffers and its backups'), reserved
/// when the view starts (`GroupBuilder::reserve_regions_by`).
pub(crate) fn held(view: &View, node: NodeId) -> Vec<RegionId> {
    regions_of(view, |l| l.members(view).contains(&node)).into_iter().map(|r| r.id).collect()
}

/// The regions of the logs of `view`'s table that `keep` picks.
fn regions_of(view: &View, keep: impl Fn(&LogEntry) -> bool) -> Vec<RegionSpec> {
    let Ok(table) = crate::table::TopicTable::decode(view.layout().bytes()) else { return Vec::new() };
    let nobody = Path::new("");
    let logs = table.logs.iter().enumerate().filter(|(_, l)| keep(l));
    logs.flat_map(|(i, l)| spindle_tailwind::service::regions(region_base(i), &config(l, nobody, NodeId(0)))).collect()
}

/// Where this member of log `name` keeps its segments.
fn dir_of(log_dir: &Path, name: &str, me: NodeId) -> PathBuf {
    let safe: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    log_dir.join(format!("tw-{safe}-n{}", me.0))
}

/// This participant's members of the domain's logs.
#[derive(Debug, Default)]
pub(crate) struct Logs {
    list: Mutex<Vec<(LogEntry, Arc<LogService>)>>,
    /// Serializes creation (not the list: `wedged` takes that on the predicate thread).
    creating: Mutex<()>,
}

impl Logs {
    fn all(&self) -> Vec<Arc<LogService>> {
        lock(&self.list).iter().map(|(_, s)| s.clone()).collect()
    }

    /// This member of log `name`, if it runs one.
    pub(crate) fn get(&self, name: &str) -> Option<(LogEntry, Arc<LogService>)> {
        lock(&self.list).iter().find(|(e, _)| e.name == name).cloned()
    }

    /// Starts a member of every log of `view` this participant lacks (attached to
    /// `group` if it runs already); returns the failures.
    pub(crate) fn ensure(
        &self,
        view: &View,
        me: NodeId,
        log_dir: &Path,
        group: Option<&Arc<Group>>,
    ) -> Vec<(String, StartError)> {
        let Ok(table) = crate::table::TopicTable::decode(view.layout().bytes()) else { return Vec::new() };
        let _one = lock(&self.creating);
        let mut failed = Vec::new();
        for (i, entry) in table.logs.iter().enumerate() {
            if lock(&self.list).iter().any(|(e, _)| e.name == entry.name) {
                continue;
            }
            let cfg = config(entry, log_dir, me);
            let e = entry.clone();
            match LogService::new(me, cfg, region_base(i), move |v| e.members(v)) {
                Ok(s) => {
                    let s = Arc::new(s);
                    if let Some(g) = group {
                        if let Err(why) = s.attach(g) {
                            failed.push((entry.name.clone(), why));
                            continue;
                        }
                    }
                    lock(&self.list).push((entry.clone(), s));
                }
                Err(why) => failed.push((entry.name.clone(), why)),
            }
        }
        failed
    }

    /// Attaches the members started before the group ran.
    pub(crate) fn attach_all(&self, group: &Arc<Group>) {
        for s in self.all() {
            if !s.is_attached() {
                if let Err(why) = s.attach(group) {
                    tracing::error!(log = s.log(), %why, "a log member could not start");
                }
            }
        }
    }

    pub(crate) fn view_starts(&self, view: &View, t: &Arc<dyn Transport>) {
        for s in self.all() {
            s.view_starts(view, t);
        }
    }

    pub(crate) fn view_ends(&self, view: &View) {
        for s in self.all() {
            s.view_ends(view);
        }
    }

    /// On the predicate thread: quick, never blocks for long (the list's lock is
    /// held only to copy or push).
    pub(crate) fn wedged(&self, view: &View) {
        for (_, s) in lock(&self.list).iter() {
            s.wedged(view);
        }
    }

    pub(crate) fn rejoined(&self) {
        for s in self.all() {
            s.rejoined();
        }
    }

    /// Answers a request of the logs' service (its frame names its log); a log
    /// this member runs no member of yet (it has not started the view that lists
    /// it) is asked again.
    pub(crate) fn answer(&self, body: &[u8]) -> Vec<u8> {
        let Some(log) = wire::log_of(body) else {
            return wire::encode(0, &wire::Reply::Failed("a frame too short for a log frame's header".into()));
        };
        let s = lock(&self.list).iter().find(|(e, _)| e.number == log).map(|(_, s)| s.clone());
        match s {
            Some(s) => s.answer(body),
            None => wire::encode(log, &wire::Reply::NotYet),
        }
    }

    pub(crate) fn stop(&self, why: &str) {
        for s in self.all() {
            s.stop(why);
        }
    }
}

/// A participant's handle on a replicated log of the domain
/// ([`crate::DomainParticipant::create_log`]). Every [`LogService`] call works on
/// it (`Deref`): `append`, `append_batch`, `read_from` (at a replica), `primary`,
/// `wait_for_primary`, `segments`, ... It keeps the participant alive.
pub struct ReplicatedLog {
    pub(crate) entry: LogEntry,
    pub(crate) service: Arc<LogService>,
    /// Keeps its participant alive.
    pub(crate) _p: Arc<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for ReplicatedLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicatedLog").field("name", &self.entry.name).finish()
    }
}

impl std::ops::Deref for ReplicatedLog {
    type Target = LogService;
    fn deref(&self) -> &LogService {
        &self.service
    }
}

impl ReplicatedLog {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.entry.name
    }

    /// Its settings.
    pub fn qos(&self) -> LogQos {
        self.entry.qos
    }

    /// Whether this participant is one of its replicas now.
    pub fn is_replica(&self) -> bool {
        self.service.members().contains(&self.service.node())
    }

    /// Waits up to `within` until the log takes appends; returns its primary.
    pub fn ready(&self, within: Duration) -> Option<NodeId> {
        self.service.wait_for_primary(within)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::TopicTable;
    use spindle_views::view::LayoutDoc;

    /// Each log's buffers and commit word are reserved at exactly its replicas in
    /// the view (the members its `LogService` writes at), and nowhere else.
    #[test]
    fn a_logs_regions_are_reserved_at_its_replicas_only() {
        let qos = LogQos { replicas: 2, ..LogQos::default() };
        let logs = ["a", "b", "c"].iter().zip(1..).map(|(n, k)| LogEntry { name: n.to_string(), number: k, qos });
        let t = TopicTable { logs: logs.collect(), ..TopicTable::default() };
        let view = View::initial((0..5).map(NodeId).collect()).with_layout(LayoutDoc::new(1, t.encode()));
        let all: Vec<RegionId> = regions(&view).iter().map(|r| r.id).collect();
        assert_eq!(all.len(), 3 * (qos.buffers as usize + 1), "each log's buffers and its commit word");
        let at: Vec<Vec<RegionId>> = (0..5).map(|n| held(&view, NodeId(n))).collect();
        for (i, l) in t.logs.iter().enumerate() {
            let mine: Vec<RegionId> = all[i * 3..i * 3 + 3].to_vec();
            let holders: Vec<u32> = (0..5).filter(|n| mine.iter().all(|id| at[*n as usize].contains(id))).collect();
            let replicas: Vec<u32> = l.members(&view).iter().map(|m| m.0).collect();
            assert_eq!(holders.len(), 2, "log {}: held at {holders:?}", l.name);
            assert!(replicas.iter().all(|r| holders.contains(r)), "log {}: {holders:?} against {replicas:?}", l.name);
            for n in (0..5).filter(|n| !replicas.contains(n)) {
                assert!(mine.iter().all(|id| !at[n as usize].contains(id)), "log {} reserved at {n}", l.name);
            }
        }
        // A view without the table (or with another document) reserves nothing.
        assert!(held(&View::initial(vec![NodeId(0)]), NodeId(0)).is_empty());
    }
}
