//! # dds: OMG-DDS-style topics over spindle groups
//!
//! A domain is one `views::Group`: every [`DomainParticipant`] of the domain is a
//! member. Each topic is a subgroup whose members are the participants that write
//! or read it, and whose senders are its writers (Spindle §4.6, as its DDS is built
//! over Derecho). Topics appear at run time: creating a topic, writer or reader edits
//! the domain's topic table, which is part of the view, so the change is a view
//! change with the same members and a new layout; samples in flight are neither
//! lost nor duplicated by it ([`table`]).
//!
//! QoS levels ([`qos`]): `Unordered` (delivered on receipt), `Ordered` (the default:
//! one total order across all writers of a topic, at every reader), `Volatile`
//! (ordered, history kept in memory, late joiners catch up with no gap and no
//! duplicate) and `Logged` (Volatile, plus a log file per member that a restarted
//! process recovers; [`log`]). A reader requesting more than a writer offers gets an
//! [`IncompatibleQos`] status, as does the writer.
//!
//! ```
//! use dds::{DomainParticipant, config::DdsConfig, qos::Qos};
//! use serde::{Deserialize, Serialize};
//! use std::time::Duration;
//! # let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
//! # let listen = format!("127.0.0.1:{port}").parse().unwrap();
//! # let name = format!("doc{}", std::process::id());
//!
//! #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
//! struct Reading { sensor: String, celsius: f32 }
//!
//! // One participant alone in its domain; others join with `.contact(addr)`.
//! let group = views::config::Config::builder(1, listen).name(&name).build().unwrap();
//! let p = DomainParticipant::new(DdsConfig::new(group)).unwrap();
//! let topic = p.topic::<Reading>("temperature", Qos::ordered()).unwrap();
//! let reader = p.create_reader(&topic, topic.qos()).unwrap();
//! let writer = p.create_writer(&topic, topic.qos()).unwrap();
//! writer.write(&Reading { sensor: "hall".into(), celsius: 21.5 }).unwrap();
//! let got = reader.take_n(1, Duration::from_secs(10));
//! assert_eq!(got[0].data.celsius, 21.5);
//! assert_eq!(got[0].info.writer.id, writer.id());
//! assert_eq!(got[0].info.seq, 1);
//! ```
//!
//! Pod types have a zero-serialization path: [`DomainParticipant::pod_topic`],
//! [`DataWriter::loan`] and [`DataReader::on_sample_in_place`].
//!
//! # How it fits together
//! - The domain's layout document is the [`table::TopicTable`]: participants (node
//!   and a random incarnation, so a restarted process sheds its old endpoints),
//!   topics (name, type, QoS) and their endpoints. Topic `t` has a subgroup in a view
//!   when a member writes it; subgroups are numbered by topic order, so a writer picks
//!   its subgroup in the view its send happens in (`Group::send_where`) and delivery
//!   callbacks are made per view (`GroupBuilder::deliver_by`).
//! - Each sample travels with a 16-byte header (writer number and its sequence
//!   number, source timestamp; [`sample`]). Delivery runs on the participant's
//!   predicate thread, under the topic's lock, in delivery order; it numbers samples
//!   (`topic_seq`), keeps the history (Volatile/Logged), appends to the log (Logged)
//!   and hands each sample to the local readers whose request the writer meets.
//! - A participant new to a Volatile or Logged topic holds the live samples back and
//!   fetches the history before the view it joined in from a member that had it all
//!   ([`catchup`]), then numbers the held samples from there: no gap, no duplicate.
//!
//! # What is left out
//! - Keys and instances (every topic is keyless: one stream), content filters,
//!   deadline, liveliness, lifespan, ownership and the other DCPS policies; one
//!   implicit publisher and subscriber per participant; no discovery across domains.
//! - The reader's history limit drops the oldest untaken samples (counted in
//!   [`ReaderStatus::lost`]) rather than pushing back on writers.
//! - A listener runs on the participant's delivery thread: it must not block nor
//!   write (a write can wait for that very thread).
//! - `topic_seq` of an Unordered topic is local arrival order; the four levels match
//!   only by level (no per-policy requested/offered beyond it).
//! - Logged: a log file per topic per node; a late joiner's catch-up from a log older
//!   than the members' memory reads the whole file; if the entire domain restarts,
//!   participants start from their own logs and the longest is the source for the
//!   others (logs that diverged are not reconciled).
//! - Stale endpoints of a node that failed and never came back stay in the table
//!   (they name no member, so they cost nothing but bytes; the table has 16 KB).
#![forbid(unsafe_code)]

pub mod catchup;
pub mod config;
mod error;
pub mod log;
pub mod qos;
pub mod reader;
pub mod sample;
mod sink;
pub mod table;
mod topic;
pub mod writer;

pub use error::DdsError;
pub use reader::{DataReader, ReaderStatus, SampleRef};
pub use sample::{Sample, SampleInfo, WriterId};
pub use writer::{DataWriter, Loan};

use config::DdsConfig;
use qos::{Level, Qos};
use sink::ReaderCore;
use sample::Codec;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sst::sync::atomic::{AtomicU32, AtomicU64};
use sst::transport::NodeId;
use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use table::{DdsLayout, Edit, Endpoint, TopicTable};
use sst::sync::lock;
use topic::TopicState;
use views::group::{Group, GroupBuilder, InPlaceBatch};
use views::layout::EditError;
use views::view::View;

/// Writers (for a reader) or readers (for a writer) whose QoS does not match: the
/// requested level is above the offered one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IncompatibleQos {
    /// Distinct incompatible peers seen so far.
    pub total_count: u64,
    /// The incompatible peers of the current view, with their level.
    pub current: Vec<(WriterId, Level)>,
    seen: HashSet<WriterId>,
}

impl IncompatibleQos {
    pub(crate) fn update(&mut self, bad: Vec<(WriterId, Level)>) {
        for (id, _) in &bad {
            if self.seen.insert(*id) {
                self.total_count += 1;
            }
        }
        self.current = bad;
    }
}

/// What the domain's delivery and request handlers share with the participant.
#[derive(Debug)]
pub(crate) struct Shared {
    me: NodeId,
    topics: Mutex<HashMap<String, Arc<TopicState>>>,
    group: OnceLock<Weak<Group>>,
    catch_up_timeout: Duration,
}

/// A participant's state, shared by its topics, writers and readers.
#[derive(Debug)]
pub(crate) struct Participant {
    pub(crate) group: Arc<Group>,
    shared: Arc<Shared>,
    cfg: DdsConfig,
    incarnation: u64,
    next_endpoint: AtomicU32,
}

/// A member of a domain (see the crate docs). Cheap to clone; the domain membership
/// ends when the last clone and every writer and reader are dropped.
#[derive(Debug, Clone)]
pub struct DomainParticipant(Arc<Participant>);

/// The endpoints a topic has among the current members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Matched {
    /// Writers.
    pub writers: usize,
    /// Readers.
    pub readers: usize,
}

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
    /// Its type name as participants compare it.
    pub fn type_name(&self) -> &str {
        &self.codec.type_name
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
            me: NodeId(cfg.group.node_id),
            topics: Mutex::new(HashMap::new()),
            group: OnceLock::new(),
            catch_up_timeout: cfg.catch_up_timeout,
        });
        let (s1, s2) = (shared.clone(), shared.clone());
        let group = GroupBuilder::new(cfg.group.clone())
            .layout(DdsLayout)
            .deliver_by(move |view, k, _spec| deliverer(&s1, view, k))
            .on_request(move |body| catchup::answer(&s2, body))
            .start()?;
        let group = Arc::new(group);
        let _ = shared.group.set(Arc::downgrade(&group));
        let p = Participant { group, shared, cfg, incarnation: incarnation(), next_endpoint: AtomicU32::new(0) };
        p.edit(&Edit::Hello { node: p.shared.me.0, incarnation: p.incarnation }, "participant")?;
        Ok(DomainParticipant(Arc::new(p)))
    }

    /// This participant's node id.
    pub fn node(&self) -> NodeId {
        self.0.shared.me
    }

    /// The domain's group (views, members, metrics).
    pub fn group(&self) -> &Group {
        &self.0.group
    }

    /// The topic `name` with serde sample type `T` (postcard on the wire): creates
    /// it with `qos`, or checks that the domain has it with this type and QoS.
    pub fn topic<T: Serialize + DeserializeOwned>(&self, name: &str, qos: Qos) -> Result<Topic<T>, DdsError> {
        self.0.make_topic(name, qos, sample::serde_codec::<T>())
    }

    /// Like [`DomainParticipant::topic`] for a `bytemuck::Pod` type, sent as its
    /// bytes (no serialization; loans and in-place reads).
    pub fn pod_topic<T: bytemuck::Pod>(&self, name: &str, qos: Qos) -> Result<Topic<T>, DdsError> {
        self.0.make_topic(name, qos, sample::pod_codec::<T>())
    }

    /// The topic `name` as the domain has it, if it has it with this serde type.
    pub fn find_topic<T: Serialize + DeserializeOwned>(&self, name: &str) -> Result<Topic<T>, DdsError> {
        self.0.find(name, sample::serde_codec::<T>())
    }

    /// [`DomainParticipant::find_topic`] for a Pod type.
    pub fn find_pod_topic<T: bytemuck::Pod>(&self, name: &str) -> Result<Topic<T>, DdsError> {
        self.0.find(name, sample::pod_codec::<T>())
    }

    /// A writer offering `qos.level` (at most the topic's level). Returns once the
    /// domain's view has it as a sender.
    pub fn create_writer<T>(&self, topic: &Topic<T>, qos: Qos) -> Result<DataWriter<T>, DdsError> {
        if qos.level > topic.qos.level {
            return Err(DdsError::Qos(format!(
                "a writer cannot offer {:?} on topic `{}` of level {:?}",
                qos.level, topic.name, topic.qos.level
            )));
        }
        let p = &self.0;
        let state = p.state(topic)?;
        let id = p.endpoint_id()?;
        lock(&state.inner).writers.insert(id, topic::WriterStatus { level: qos.level, ..Default::default() });
        let w = DataWriter {
            p: p.clone(),
            topic: state,
            id,
            level: qos.level,
            codec: topic.codec.clone(),
            seq: AtomicU64::new(0),
            buf: Mutex::new(Vec::new()),
            cache: AtomicU64::new(0),
        };
        p.add_endpoint(&topic.name, true, id, qos.level)?;
        Ok(w)
    }

    /// A reader requesting `qos.level`, keeping `qos.history` untaken. It first gets
    /// the history this participant holds (Volatile/Logged), or catches up from the
    /// other members if it is new in the topic. Returns once the domain's view has it.
    pub fn create_reader<T>(&self, topic: &Topic<T>, qos: Qos) -> Result<DataReader<T>, DdsError> {
        let p = &self.0;
        let state = p.state(topic)?;
        let id = p.endpoint_id()?;
        let core = Arc::new(ReaderCore::new(id, &qos));
        state.add_reader(core.clone());
        let r = DataReader { p: p.clone(), topic: state, core, codec: topic.codec.clone() };
        p.add_endpoint(&topic.name, false, id, qos.level)?;
        Ok(r)
    }

    /// How many writers and readers of topic `name` the current view has, counting
    /// only endpoints of its members; `None` if the domain has no such topic (or this
    /// participant stopped).
    pub fn matched(&self, name: &str) -> Option<Matched> {
        let view = self.0.group.view()?;
        let table = TopicTable::decode(view.layout().bytes()).ok()?;
        let t = table.topic(name)?;
        let live = |list: &[Endpoint]| list.iter().filter(|e| view.members().iter().any(|m| m.0 == e.node)).count();
        Some(Matched { writers: live(&t.writers), readers: live(&t.readers) })
    }

    /// Waits up to `within` until topic `name` has at least `writers` writers and
    /// `readers` readers among the members (see [`DomainParticipant::matched`]).
    pub fn wait_for_matched(&self, name: &str, writers: usize, readers: usize, within: Duration) -> bool {
        let met = || self.matched(name).is_some_and(|m| m.writers >= writers && m.readers >= readers);
        let deadline = std::time::Instant::now() + within;
        loop {
            if met() {
                return true;
            }
            if self.0.group.stopped().is_some() || std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Leaves the domain gracefully (a view change removes this participant once
    /// everything it is owed is delivered); waits up to `within`.
    pub fn leave(&self, within: Duration) -> bool {
        self.0.group.leave(within)
    }
}

impl Participant {
    fn edit(&self, e: &Edit, what: &str) -> Result<View, DdsError> {
        self.group.edit_layout(&e.encode(), self.cfg.setup_timeout).map_err(|err| match err {
            EditError::Invalid(why) => DdsError::Topic { topic: what.into(), why },
            EditError::TooLarge(n) => {
                DdsError::Topic { topic: what.into(), why: format!("the topic table would take {n} bytes") }
            }
            other => DdsError::NotApplied(other.to_string()),
        })
    }

    fn make_topic<T>(&self, name: &str, qos: Qos, codec: Codec<T>) -> Result<Topic<T>, DdsError> {
        qos.validate_topic().map_err(|why| DdsError::Topic { topic: name.into(), why })?;
        self.edit(&Edit::CreateTopic { name: name.into(), type_name: codec.type_name.clone(), qos }, name)?;
        Ok(Topic { name: name.into(), qos, codec, _t: PhantomData })
    }

    fn find<T>(&self, name: &str, codec: Codec<T>) -> Result<Topic<T>, DdsError> {
        let view = self.group.view().ok_or_else(|| DdsError::NotApplied("this participant stopped".into()))?;
        let table = TopicTable::decode(view.layout().bytes()).map_err(DdsError::NotApplied)?;
        let entry =
            table.topic(name).ok_or_else(|| DdsError::Topic { topic: name.into(), why: "no such topic".into() })?;
        if entry.type_name != codec.type_name {
            return Err(DdsError::Topic {
                topic: name.into(),
                why: format!("the domain has type `{}`, this is `{}`", entry.type_name, codec.type_name),
            });
        }
        Ok(Topic { name: name.into(), qos: entry.qos, codec, _t: PhantomData })
    }

    fn endpoint_id(&self) -> Result<u32, DdsError> {
        let id = self.next_endpoint.fetch_add(1, sst::sync::atomic::Ordering::Relaxed);
        if id >= sample::MAX_WRITERS {
            return Err(DdsError::Qos(format!("at most {} writers and readers per participant", sample::MAX_WRITERS)));
        }
        Ok(id)
    }

    /// This participant's state of `topic` (opening its log for Logged).
    fn state<T>(&self, topic: &Topic<T>) -> Result<Arc<TopicState>, DdsError> {
        let mut topics = lock(&self.shared.topics);
        if let Some(s) = topics.get(&topic.name) {
            return Ok(s.clone());
        }
        let log = (topic.qos.level == Level::Logged).then(|| (self.log_path(&topic.name), self.cfg.fsync));
        let s = Arc::new(TopicState::open(&topic.name, topic.qos, self.shared.me, log)?);
        topics.insert(topic.name.clone(), s.clone());
        Ok(s)
    }

    /// `<log_dir>/<domain>/<topic, made file-safe>-<hash>.<node>.log`.
    fn log_path(&self, topic: &str) -> PathBuf {
        let safe: String = topic.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        let hash = sst::hash::digest(topic.as_bytes()) & 0xffff_ffff;
        self.cfg.log_dir.join(&self.cfg.group.name).join(format!("{safe}-{hash:08x}.{}.log", self.shared.me.0))
    }

    fn add_endpoint(&self, topic: &str, writer: bool, id: u32, level: Level) -> Result<(), DdsError> {
        let endpoint = Endpoint { node: self.shared.me.0, id, level };
        let e = Edit::AddEndpoint { topic: topic.into(), incarnation: self.incarnation, writer, endpoint };
        if let Err(err) = self.edit(&e, topic) {
            self.forget(topic, writer, id);
            return Err(err);
        }
        Ok(())
    }

    /// Removes an endpoint from the topic state (and the domain's table).
    pub(crate) fn remove_endpoint(&self, topic: &str, writer: bool, id: u32) {
        self.forget(topic, writer, id);
        if self.group.stopped().is_some() {
            return;
        }
        let e = Edit::RemoveEndpoint { topic: topic.into(), writer, node: self.shared.me.0, id };
        if let Err(err) = self.group.edit_layout(&e.encode(), Duration::from_secs(2)) {
            tracing::warn!(topic, id, %err, "could not remove an endpoint from the topic table");
        }
    }

    fn forget(&self, topic: &str, writer: bool, id: u32) {
        if let Some(s) = lock(&self.shared.topics).get(topic) {
            let mut g = lock(&s.inner);
            if writer {
                g.writers.remove(&id);
            } else {
                g.readers.retain(|r| r.id != id);
            }
            if g.writers.is_empty() && g.readers.is_empty() {
                // Out of the topic: the next entry catches up on what it missed.
                g.last_view = None;
            }
        }
    }
}

type DeliverFn = Box<dyn FnMut(&InPlaceBatch<'_>) + Send>;

/// The delivery callback of subgroup `k` of `view`: its topic's state, if this
/// participant has one (else the samples go to nobody; an endpoint of a dead
/// incarnation of this node, removed by the `Hello` edit).
fn deliverer(shared: &Arc<Shared>, view: &View, k: usize) -> Option<DeliverFn> {
    let table = TopicTable::decode(view.layout().bytes()).ok()?;
    let (ti, spec) = table.subgroups(view).into_iter().nth(k)?;
    let entry = &table.topics[ti];
    let state = lock(&shared.topics).get(&entry.name).cloned()?;
    let vid = view.id();
    if let Some(others) = state.enter_view(vid, entry, &spec.members) {
        let (sh, st) = (shared.clone(), state.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("dds-catch-up-{}", entry.name.chars().take(16).collect::<String>()))
            .spawn(move || catchup::run(sh, st, vid, others));
        if let Err(e) = spawned {
            state.finish_catch_up(Vec::new(), None, Some(format!("no thread for the catch-up: {e}")));
        }
    }
    Some(Box::new(move |b: &InPlaceBatch<'_>| state.deliver_batch(vid, b)))
}
