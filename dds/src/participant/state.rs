//! A participant's state: what its group's callbacks share with it ([`Shared`])
//! and what its topics, writers and readers hold ([`Participant`]). Plain data at
//! the bottom of the driver layer: the modules that act on it import it from here.

use crate::config::DdsConfig;
use crate::logs::Logs;
use crate::topic::TopicState;
use spindle_sst::sync::atomic::{AtomicU32, AtomicU64};
use spindle_sst::transport::NodeId;
use spindle_views::group::Group;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// What the domain's delivery and request handlers share with the participant.
#[derive(Debug)]
pub(crate) struct Shared {
    /// This participant's node id, once its group started (it may be given by the
    /// group: `spindle_views::config::AUTO_ID`).
    pub(crate) me: OnceLock<NodeId>,
    pub(crate) topics: Mutex<HashMap<String, Arc<TopicState>>>,
    pub(crate) group: OnceLock<Weak<Group>>,
    pub(crate) participant: OnceLock<Weak<Participant>>,
    pub(crate) catch_up_timeout: Duration,
    /// This participant's members of the domain's replicated logs.
    pub(crate) logs: Logs,
    pub(crate) log_dir: PathBuf,
}

impl Shared {
    /// This participant's node id (set once its group started).
    pub(crate) fn me(&self) -> NodeId {
        self.me.get().copied().unwrap_or(NodeId(spindle_views::config::AUTO_ID))
    }
}

/// A participant's state, shared by its topics, writers and readers.
#[derive(Debug)]
pub(crate) struct Participant {
    pub(crate) group: Arc<Group>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) cfg: DdsConfig,
    pub(crate) incarnation: u64,
    pub(crate) next_endpoint: AtomicU32,
    /// Numbers of dropped endpoints, free again once the domain's table lost them.
    pub(crate) free_endpoints: Mutex<Vec<u32>>,
    /// The application asked this participant to leave.
    pub(crate) leaving: spindle_sst::sync::atomic::AtomicBool,
}

/// A process-unique random incarnation number for this participant.
pub(crate) fn incarnation() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.write_u64(N.fetch_add(1, spindle_sst::sync::atomic::Ordering::Relaxed));
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}
