//! Participants outside the domain's group: clients that publish and subscribe
//! through a member, without joining the view.
//!
//! A [`DomainClient`] connects to any member's control address (a list of
//! contacts; it tries the next on failure) over TCP and has the same topic,
//! writer and reader calls as a member participant. Clients are not members:
//! connecting, leaving or dying changes no view (except that the first client
//! writer or reader of a topic at a member lists that member's proxy endpoint
//! once), they count neither for the majority nor for stability, and a client that
//! falls behind is dropped by its member rather than slowing anyone (it then moves
//! on as after a failure).
//!
//! - **Reading.** The member relays every sample it delivers on the topic, in its
//!   delivery order, with the same [`crate::SampleInfo`] its own readers get
//!   (writer, seq, `topic_seq`, view). When the member is lost, the client moves to
//!   the next contact. For Volatile and Logged topics it resumes from its last
//!   `topic_seq`, which is the same at every member: no gap, no duplicate; samples
//!   the new member no longer holds are counted in [`crate::ReaderStatus::lost`].
//!   For Ordered and Unordered topics (no history, and `topic_seq` is each member's
//!   own count) it drops what it had already, by writer and sequence number, and
//!   counts the gaps in each writer's sequence since the move as `lost`: samples it
//!   may have missed, reported rather than hidden.
//! - **Writing.** A client writer's samples go to the member, which sends them into
//!   the topic's total order stamped with the client's id, writer number and
//!   sequence number, and acknowledges each once it has delivered it (for ordered
//!   levels: stable, so every surviving member delivers it). The client keeps what
//!   is not acknowledged (at most [`ClientConfig::max_unacked`]) and sends it again
//!   after a move; members drop a client sample they delivered already, all alike,
//!   so each acknowledged sample appears exactly once. A member that cannot send a
//!   sample (it is stopping, or out of the majority) ends the session rather than
//!   fail it, so the client moves and nothing is lost; only a sample too large, or
//!   one that found no room because the readers are behind, is reported failed
//!   ([`ClientWriter::failures`]).
//!
//! What a client may not do: write as another client (the member stamps the
//! session's id), write on a writer it did not register, or take more than its
//! member's bounded buffer ([`spindle_views::group::ClientLimits`]).
//!
//! ```no_run
//! use spindle_dds::{ClientConfig, DomainClient, qos::Qos};
//! use std::time::Duration;
//! let contacts = vec!["127.0.0.1:7101".parse().unwrap(), "127.0.0.1:7102".parse().unwrap()];
//! let c = DomainClient::connect(ClientConfig::new(contacts)).unwrap();
//! let topic = c.find_topic::<String>("chat").unwrap();
//! let reader = c.create_reader(&topic, topic.qos()).unwrap();
//! let writer = c.create_writer(&topic, topic.qos()).unwrap();
//! writer.write(&"hello".to_string()).unwrap();
//! for s in reader.take_n(1, Duration::from_secs(5)) {
//!     println!("{} from {}", s.data, s.info.writer);
//! }
//! ```

mod log;
mod pump;
mod writer;

pub use log::{ClientLog, ClientTail};
pub use writer::ClientWriter;

use crate::error::{CatchUpError, ClientEnd, TopicError};
use crate::qos::{Level, Qos, QosError};
use crate::queue::ReaderCore;
use crate::reader::{DataReader, Owner};
use crate::sample::{self, Codec, WriterId};
use crate::table::TopicTable;
use crate::wire::client::{self as wire, Call, Refusal, Reply};
use crate::{DdsError, Matched, Topic};
use serde::de::DeserializeOwned;
use serde::Serialize;
use spindle_sst::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use spindle_views::client::Client;
use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use writer::WriterSlot;

/// Readers and writers one client may have at once (its member refuses more).
pub(crate) const MAX_ENDPOINTS: usize = 1024;
/// The largest sample a client writes or reads: 64 MiB (one control frame holds it;
/// see `spindle_views::wire::MAX_BODY`).
pub const MAX_CLIENT_SAMPLE: usize = 64 << 20;

/// How a client connects and how long it waits.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Members' control addresses, tried in order.
    pub contacts: Vec<SocketAddr>,
    /// How long one contact may take to answer a connect (default 5 s).
    pub connect_timeout: Duration,
    /// How long a topic, reader or writer call waits (default 30 s: the first
    /// endpoint of a topic at a member waits for a view change).
    pub request_timeout: Duration,
    /// How long a client tries the contacts after losing its member before it
    /// gives up (default 30 s).
    pub failover_timeout: Duration,
    /// Samples a writer may have unacknowledged; `write` waits past this (default 4096).
    pub max_unacked: usize,
    /// The group's secret file, if it has one (the members' `[security]
    /// secret_file`); `None`: the file `SPINDLE_SECRET_FILE` names, if set. With
    /// `identity`, the file holds that identity's key instead.
    pub secret_file: Option<std::path::PathBuf>,
    /// A named identity this client proves (with its key in `secret_file`), which
    /// the members' [`crate::AccessPolicy`] grants topics to; `None`: the group
    /// secret, with every right.
    pub identity: Option<String>,
    /// Credentials given as they are (certificates, say:
    /// `spindle_views::auth::Certificates`); they take the place of
    /// `secret_file` and `identity`. With certificates, the identity their
    /// certificate names is the one the policy grants topics to.
    pub credentials: Option<spindle_views::auth::Credentials>,
}

impl ClientConfig {
    /// The defaults with these contacts.
    pub fn new(contacts: Vec<SocketAddr>) -> ClientConfig {
        ClientConfig {
            contacts,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            failover_timeout: Duration::from_secs(30),
            max_unacked: 4096,
            secret_file: None,
            identity: None,
            credentials: None,
        }
    }
}

/// A client reader's place in its topic, for resuming after a move.
pub(crate) struct ReaderSlot {
    pub(crate) topic: String,
    pub(crate) level: Level,
    /// The topic keeps history (resume by `topic_seq`).
    pub(crate) history: bool,
    pub(crate) core: Arc<ReaderCore>,
    pub(crate) last_topic_seq: Option<u64>,
    /// The last sequence number seen per writer (by [`WriterId::key`]).
    pub(crate) last: HashMap<(u64, u32, bool), u64>,
    /// Writers seen before the last move whose next sample is not seen yet.
    pub(crate) resumed: HashSet<(u64, u32, bool)>,
    /// Live samples held while the history is fetched: (view, topic_seq, node,
    /// from history, bytes).
    pub(crate) held: Option<Vec<Held>>,
}

/// A live sample held while a reader's history is fetched: (view, topic_seq,
/// node, from history, bytes).
pub(crate) type Held = (u64, u64, u32, bool, Vec<u8>);

/// What the client's handles share with its receiving thread.
pub(crate) struct Handle {
    pub(crate) link: Client,
    pub(crate) cfg: ClientConfig,
    /// Topics used, for registering again after a move: name, type name, QoS.
    pub(crate) topics: Mutex<HashMap<String, (String, Qos)>>,
    pub(crate) readers: Mutex<HashMap<u32, ReaderSlot>>,
    pub(crate) writers: Mutex<HashMap<u32, Arc<WriterSlot>>>,
    next_endpoint: AtomicU32,
    /// Counts sessions: a writer posts only once registered on the current one.
    pub(crate) session: AtomicU64,
    pub(crate) failovers: AtomicU64,
    pub(crate) stop: AtomicBool,
    /// Why the client ended, once it did (no contact took it within the failover
    /// timeout, or it was closed).
    pub(crate) ended: Mutex<Option<ClientEnd>>,
}

impl Handle {
    /// A call to the member, answered.
    pub(crate) fn call(&self, call: &Call) -> Result<Reply, DdsError> {
        let bytes = self.link.request(&call.encode(), self.cfg.request_timeout)?;
        match wire::decode::<Reply>(&bytes).map_err(|_| DdsError::Protocol(crate::ProtocolError::Malformed))? {
            Reply::Refused(r) => Err(match r {
                Refusal::Topic(why) => DdsError::Topic { topic: call.subject().into(), why },
                Refusal::Qos(q) => DdsError::Qos(q),
                Refusal::Unavailable(u) => DdsError::Unavailable(u),
                Refusal::NoSuchEndpoint => DdsError::Protocol(crate::ProtocolError::Unexpected),
                Refusal::Denied(action) => DdsError::Denied { topic: call.subject().into(), action },
                Refusal::Malformed => DdsError::Protocol(crate::ProtocolError::Malformed),
            }),
            r => Ok(r),
        }
    }

    pub(crate) fn check(&self) -> Result<(), DdsError> {
        match *lock(&self.ended) {
            Some(why) => Err(DdsError::ClientEnded(why)),
            None => Ok(()),
        }
    }

    pub(crate) fn close_reader(&self, id: u32) {
        if lock(&self.readers).remove(&id).is_some() && self.check().is_ok() {
            let _ = self.call(&Call::Close { writer: false, id });
        }
    }
}

/// A client of a domain (see the module docs). Cheap to clone; the session ends
/// when the last clone and every reader and writer are dropped.
#[derive(Clone)]
pub struct DomainClient(Arc<Guard>);

/// Ends the client when the last handle goes.
pub(crate) struct Guard(pub(crate) Arc<Handle>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Release);
        lock(&self.0.ended).get_or_insert(ClientEnd::Closed);
    }
}

impl std::fmt::Debug for DomainClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DomainClient").field("id", &self.id()).field("member", &self.member()).finish()
    }
}

impl DomainClient {
    /// Connects to the first contact that takes the session and starts the thread
    /// that receives samples and acknowledgements.
    pub fn connect(cfg: ClientConfig) -> Result<DomainClient, DdsError> {
        let creds = match &cfg.credentials {
            Some(c) => Some(c.clone()),
            None => spindle_views::config::Security {
                secret_file: cfg.secret_file.clone(),
                identity: cfg.identity.clone(),
                ..Default::default()
            }
            .secret()?
            .map(Into::into),
        };
        let link = Client::connect_with(&cfg.contacts, cfg.connect_timeout, creds)?;
        let h = Arc::new(Handle {
            link,
            cfg,
            topics: Mutex::default(),
            readers: Mutex::default(),
            writers: Mutex::default(),
            next_endpoint: AtomicU32::new(0),
            session: AtomicU64::new(1),
            failovers: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            ended: Mutex::new(None),
        });
        let run = h.clone();
        std::thread::Builder::new()
            .name("dds-client".into())
            .spawn(move || pump::run(&run))
            .map_err(|e| DdsError::NoThread(e.kind()))?;
        Ok(DomainClient(Arc::new(Guard(h))))
    }

    fn h(&self) -> &Arc<Handle> {
        &self.0 .0
    }

    /// This client's id (random), which its samples' [`WriterId::client`] carries.
    pub fn id(&self) -> u64 {
        self.h().link.id()
    }

    /// The member serving this client, and its control address.
    pub fn member(&self) -> (NodeId, SocketAddr) {
        self.h().link.member()
    }

    /// How many times this client moved to another member.
    pub fn failovers(&self) -> u64 {
        self.h().failovers.load(Ordering::Relaxed)
    }

    /// Why the client ended, if it did.
    pub fn ended(&self) -> Option<ClientEnd> {
        *lock(&self.h().ended)
    }

    /// The topic `name` with serde sample type `T`: creates it with `qos`, or
    /// checks that the domain has it with this type and QoS.
    pub fn topic<T: Serialize + DeserializeOwned>(&self, name: &str, qos: Qos) -> Result<Topic<T>, DdsError> {
        self.open(name, Some(qos), sample::serde_codec::<T>())
    }

    /// [`DomainClient::topic`] for a `bytemuck::Pod` type.
    pub fn pod_topic<T: bytemuck::Pod>(&self, name: &str, qos: Qos) -> Result<Topic<T>, DdsError> {
        self.open(name, Some(qos), sample::pod_codec::<T>())
    }

    /// The topic `name` as the domain has it, if it has it with this serde type.
    pub fn find_topic<T: Serialize + DeserializeOwned>(&self, name: &str) -> Result<Topic<T>, DdsError> {
        self.open(name, None, sample::serde_codec::<T>())
    }

    /// A keyed topic (see [`crate::DomainParticipant::keyed_topic`]).
    pub fn keyed_topic<T: Serialize + DeserializeOwned + crate::Keyed>(
        &self,
        name: &str,
        qos: Qos,
    ) -> Result<Topic<T>, DdsError> {
        self.open(name, Some(qos), sample::keyed_codec::<T>())
    }

    /// The keyed topic `name` as the domain has it, if it has it with this type.
    pub fn find_keyed_topic<T: Serialize + DeserializeOwned + crate::Keyed>(
        &self,
        name: &str,
    ) -> Result<Topic<T>, DdsError> {
        self.open(name, None, sample::keyed_codec::<T>())
    }

    /// [`DomainClient::find_topic`] for a Pod type.
    pub fn find_pod_topic<T: bytemuck::Pod>(&self, name: &str) -> Result<Topic<T>, DdsError> {
        self.open(name, None, sample::pod_codec::<T>())
    }

    /// Topic `name` with its samples as raw bytes (the serialized sample; a keyed
    /// topic's without its instance prefix), whatever its type: for tools that do
    /// not know the type ([`Topic::type_name`] says what it is). Reading only: a
    /// raw writer on a keyed topic fails each write.
    pub fn raw_topic(&self, name: &str) -> Result<Topic<Vec<u8>>, DdsError> {
        let h = self.h();
        h.check()?;
        let call = Call::Topic { name: name.into(), type_name: String::new(), qos: None };
        match h.call(&call) {
            Ok(Reply::Topic { type_name, qos }) => {
                let codec = sample::raw_codec(&type_name);
                lock(&h.topics).insert(name.into(), (type_name, qos));
                Ok(Topic { name: name.into(), qos, codec, _t: PhantomData })
            }
            Ok(_) => Err(DdsError::Protocol(crate::ProtocolError::Unexpected)),
            Err(e) => Err(e),
        }
    }

    /// The domain as the member sees it: its view and topic table.
    pub fn domain(&self) -> Result<DomainInfo, DdsError> {
        match self.h().call(&Call::Domain)? {
            Reply::Domain { view, members, table } => Ok(DomainInfo {
                view: spindle_views::view::ViewId(view),
                members: members.into_iter().map(NodeId).collect(),
                table: TopicTable::decode(&table).map_err(|_| DdsError::Protocol(crate::ProtocolError::Malformed))?,
            }),
            _ => Err(DdsError::Protocol(crate::ProtocolError::Unexpected)),
        }
    }

    fn open<T>(&self, name: &str, qos: Option<Qos>, codec: Codec<T>) -> Result<Topic<T>, DdsError> {
        let h = self.h();
        h.check()?;
        let call = Call::Topic { name: name.into(), type_name: codec.type_name.clone(), qos };
        match h.call(&call)? {
            Reply::Topic { type_name, qos } if type_name == codec.type_name => {
                lock(&h.topics).insert(name.into(), (type_name, qos));
                Ok(Topic { name: name.into(), qos, codec, _t: PhantomData })
            }
            Reply::Topic { type_name, .. } => {
                let why = TopicError::TypeMismatch { domain: type_name, here: codec.type_name };
                Err(DdsError::Topic { topic: name.into(), why })
            }
            _ => Err(DdsError::Protocol(crate::ProtocolError::Unexpected)),
        }
    }

    fn endpoint_id(&self) -> Result<u32, DdsError> {
        let id = self.h().next_endpoint.fetch_add(1, Ordering::Relaxed);
        if id as usize >= MAX_ENDPOINTS {
            return Err(DdsError::Qos(QosError::TooManyEndpoints { max: MAX_ENDPOINTS as u32 }));
        }
        Ok(id)
    }

    /// A reader requesting `qos.level`, keeping `qos.history` untaken. For Volatile
    /// and Logged topics it first gets the history the member holds.
    pub fn create_reader<T>(&self, topic: &Topic<T>, qos: Qos) -> Result<DataReader<T>, DdsError> {
        qos.validate_reader()?;
        let h = self.h();
        h.check()?;
        let id = self.endpoint_id()?;
        let core = Arc::new(ReaderCore::new(id, &qos, topic.codec.key.is_some(), None));
        // The slot exists before the call: the history comes as pushes, maybe
        // before the reply.
        let slot = ReaderSlot {
            topic: topic.name.clone(),
            level: qos.level,
            history: topic.qos.level >= Level::Volatile,
            core: core.clone(),
            last_topic_seq: None,
            last: HashMap::new(),
            resumed: HashSet::new(),
            held: (topic.qos.level >= Level::Volatile).then(Vec::new),
        };
        lock(&h.readers).insert(id, slot);
        let call = Call::Reader { topic: topic.name.clone(), reader: id, level: qos.level, from: None };
        match h.call(&call) {
            Ok(Reply::Reader { lost, incompatible, history }) => {
                lock(&core.q).status.lost += lost;
                core.set_incompatible(incompatible_list(incompatible));
                if let Err(e) = pump::catch_up(h, id, &topic.name, history) {
                    lock(&h.readers).remove(&id);
                    return Err(e);
                }
            }
            Ok(_) => {
                lock(&h.readers).remove(&id);
                return Err(DdsError::Protocol(crate::ProtocolError::Unexpected));
            }
            Err(e) => {
                lock(&h.readers).remove(&id);
                return Err(e);
            }
        }
        let owner = Box::new(ClientOwner { c: self.0.clone(), topic: topic.name.clone() });
        Ok(DataReader { owner, core, codec: topic.codec.clone(), deadline: qos.deadline })
    }

    /// A writer offering `qos.level` (at most the topic's level).
    pub fn create_writer<T>(&self, topic: &Topic<T>, qos: Qos) -> Result<ClientWriter<T>, DdsError> {
        if qos.level > topic.qos.level {
            return Err(DdsError::Qos(QosError::AboveTopic { offered: qos.level, topic: topic.qos.level }));
        }
        let h = self.h();
        h.check()?;
        let id = self.endpoint_id()?;
        // A client's sample travels in one control frame: at most the topic's limit
        // and what a frame holds.
        let max = (topic.qos.max_sample_bytes as usize).min(MAX_CLIENT_SAMPLE);
        let slot = Arc::new(WriterSlot::new(id, &topic.name, qos.level, max));
        lock(&h.writers).insert(id, slot.clone());
        if let Err(e) = slot.register(h) {
            lock(&h.writers).remove(&id);
            return Err(e);
        }
        Ok(ClientWriter::new(self.0.clone(), slot, topic.codec.clone()))
    }

    /// How many writers and readers topic `name` has, members' and clients' (the
    /// member's [`crate::DomainParticipant::matched`]).
    pub fn matched(&self, name: &str) -> Result<Matched, DdsError> {
        match self.h().call(&Call::Matched { topic: name.into() })? {
            Reply::Matched { writers, readers, client_writers, client_readers } => {
                Ok(Matched { writers, readers, client_writers, client_readers })
            }
            _ => Err(DdsError::Protocol(crate::ProtocolError::Unexpected)),
        }
    }
}

/// The domain as a member sees it (see [`DomainClient::domain`]).
#[derive(Debug, Clone)]
pub struct DomainInfo {
    /// The view.
    pub view: spindle_views::view::ViewId,
    /// Its members.
    pub members: Vec<NodeId>,
    /// Its topics, their endpoints, and the replicated logs.
    pub table: TopicTable,
}

/// A client's reader (keeps the client alive).
struct ClientOwner {
    c: Arc<Guard>,
    topic: String,
}

impl Owner for ClientOwner {
    fn topic_name(&self) -> &str {
        &self.topic
    }
    fn catch_up_failed(&self) -> Option<CatchUpError> {
        None // a client reader counts what it could not have in `lost`
    }
    fn close(&self, core: &Arc<ReaderCore>) {
        self.c.0.close_reader(core.id);
    }
}

/// The member's list of incompatible writers as a reader status wants it.
pub(crate) fn incompatible_list(list: Vec<(u32, u32, Level)>) -> Vec<(WriterId, Level)> {
    list.into_iter().map(|(node, id, l)| (WriterId { node: NodeId(node), id, client: None }, l)).collect()
}
