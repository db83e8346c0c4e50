#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod catchup;
pub mod client;
mod config;
mod domain;
mod engine;
mod error;
pub mod filter;
mod history;
pub mod instance;
pub mod log;
pub mod logs;
mod participant;
pub mod qos;
mod queue;
mod reader;
mod sample;
mod serve;
#[cfg(test)]
mod sim;
mod sink;
mod status;
mod table;
mod topic;
pub mod waitset;
mod wire;
mod writer;

// Entities: the participant and its topics, writers and readers; clients; logs.
pub use client::{ClientConfig, ClientLog, ClientTail, ClientWriter, DomainClient, DomainInfo, MAX_CLIENT_SAMPLE};
pub use config::{default_data_dir, DdsConfig};
pub use logs::{members_of as log_members, LogQos, ReplicatedLog, MAX_LOGS};
pub use reader::{DataReader, SampleRef, SampleStream};
pub use waitset::{Condition, GuardCondition, ReadCondition, StatusCondition, StatusKind, WaitSet};
pub use writer::{DataWriter, Loan, SampleSlot, Writer};
// QoS.
pub use log::Fsync;
pub use logs::Ack as LogAck;
pub use qos::{History, Level, Qos, DEFAULT_MAX_BLOCKING, DEFAULT_MAX_SAMPLE};
// Samples and instances.
pub use instance::{InstanceHandle, InstanceState, Keyed, SampleState, StateMask, ViewState};
pub use sample::{Sample, SampleInfo, WriterId};
// Statuses, and the domain's table as a client reads it.
pub use status::{DeadlineMissed, IncompatibleQos, InstanceCounts, Liveliness, Matched, ReaderStatus};
pub use table::{Endpoint, TopicEntry, TopicTable, MAX_NAME, MAX_TYPE_NAME};
// Errors.
pub use error::{DdsError, ProtocolError};
pub use log::LogError;

use participant::{deliverer, rejoined};
use sample::Codec;
use sst::sync::atomic::{AtomicU32, AtomicU64};
use sst::transport::NodeId;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use table::{DdsLayout, Edit};
use topic::TopicState;
use views::group::{Group, GroupBuilder};

/// What the domain's delivery and request handlers share with the participant.
#[derive(Debug)]
pub(crate) struct Shared {
    /// This participant's node id, once its group started (it may be given by the
    /// group: `views::config::AUTO_ID`).
    me: OnceLock<NodeId>,
    topics: Mutex<HashMap<String, Arc<TopicState>>>,
    group: OnceLock<Weak<Group>>,
    participant: OnceLock<Weak<Participant>>,
    catch_up_timeout: Duration,
    /// This participant's members of the domain's replicated logs.
    logs: logs::Logs,
    log_dir: PathBuf,
}

impl Shared {
    /// This participant's node id (set once its group started).
    pub(crate) fn me(&self) -> NodeId {
        self.me.get().copied().unwrap_or(NodeId(views::config::AUTO_ID))
    }
}

/// A participant's state, shared by its topics, writers and readers.
#[derive(Debug)]
pub(crate) struct Participant {
    pub(crate) group: Arc<Group>,
    shared: Arc<Shared>,
    cfg: DdsConfig,
    incarnation: u64,
    next_endpoint: AtomicU32,
    /// Numbers of dropped endpoints, free again once the domain's table lost them.
    free_endpoints: Mutex<Vec<u32>>,
}

/// A member of a domain (see the crate docs). Cheap to clone; the domain membership
/// ends when the last clone and every writer and reader are dropped.
#[derive(Debug, Clone)]
pub struct DomainParticipant(Arc<Participant>);

/// A topic of sample type `T`, as this participant knows it.
pub struct Topic<T> {
    name: String,
    qos: Qos,
    codec: Codec<T>,
    _t: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for Topic<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topic").field("name", &self.name).field("type", &self.codec.type_name).finish()
    }
}

impl<T> Topic<T> {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Its QoS, as the domain holds it.
    pub fn qos(&self) -> Qos {
        self.qos
    }
    /// Its type name as participants compare it: the codec, the declared name
    /// and a fingerprint of the layout.
    pub fn type_name(&self) -> &str {
        &self.codec.type_name
    }
    /// True for a keyed topic (see [`instance`]).
    pub fn is_keyed(&self) -> bool {
        self.codec.key.is_some()
    }
}

/// A process-unique random incarnation number for this participant.
fn incarnation() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.write_u64(N.fetch_add(1, sst::sync::atomic::Ordering::Relaxed));
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}

impl DomainParticipant {
    /// Creates the domain (no `contact` in the group config) or joins it, and
    /// announces this participant (a view change).
    pub fn new(cfg: DdsConfig) -> Result<DomainParticipant, DdsError> {
        let shared = Arc::new(Shared {
            me: OnceLock::new(),
            topics: Mutex::new(HashMap::new()),
            group: OnceLock::new(),
            participant: OnceLock::new(),
            catch_up_timeout: cfg.catch_up_timeout,
            logs: logs::Logs::default(),
            log_dir: cfg.log_dir.clone(),
        });
        let (s1, s2, s3) = (shared.clone(), shared.clone(), shared.clone());
        let (s4, s5, s6, s7) = (shared.clone(), shared.clone(), shared.clone(), shared.clone());
        let group = GroupBuilder::new(cfg.group.clone())
            .layout(DdsLayout)
            .deliver_by(move |view, k, _spec| deliverer(&s1, view, k))
            .on_rejoin(move |_| rejoined(&s3))
            .serve(wire::SERVICE, move |body| catchup::answer(&s2, body))
            .serve(tailwind::service::wire::SERVICE, move |body| s7.logs.answer(body))
            .regions_by(logs::regions)
            .on_view_start(move |v, t| {
                let group = s4.group.get().and_then(Weak::upgrade);
                for why in s4.logs.ensure(v, t.local_id(), &s4.log_dir, group.as_ref()) {
                    tracing::error!(%why, "a log member could not start");
                }
                s4.logs.view_starts(v, t);
                participant::view_started(&s4, v);
            })
            .on_view_end(move |v, _| s5.logs.view_ends(v))
            .on_wedge(move |v| s6.logs.wedged(v))
            .client_handler(serve::Serve::new(shared.clone(), cfg.client_limits.buffer_bytes))
            .client_limits(cfg.client_limits)
            .start()?;
        let group = Arc::new(group);
        let _ = shared.me.set(group.node());
        let _ = shared.group.set(Arc::downgrade(&group));
        shared.logs.attach_all(&group);
        let p = Participant {
            group,
            shared,
            cfg,
            incarnation: incarnation(),
            next_endpoint: AtomicU32::new(0),
            free_endpoints: Mutex::new(Vec::new()),
        };
        p.edit(&Edit::Hello { node: p.shared.me().0, incarnation: p.incarnation }, "participant")?;
        let p = Arc::new(p);
        let _ = p.shared.participant.set(Arc::downgrade(&p));
        Ok(DomainParticipant(p))
    }

    /// A participant outside the domain's group: a client of one of its members
    /// (see [`client`]). The same as [`DomainClient::connect`].
    pub fn client(cfg: ClientConfig) -> Result<DomainClient, DdsError> {
        DomainClient::connect(cfg)
    }

    /// This participant's node id.
    pub fn node(&self) -> NodeId {
        self.0.shared.me()
    }

    /// The domain's group (views, members, metrics).
    pub fn group(&self) -> &Group {
        &self.0.group
    }
}
