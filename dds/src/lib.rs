#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod catchup;
pub mod client;
pub mod config;
mod error;
pub mod log;
pub mod logs;
pub mod qos;
pub mod reader;
pub mod sample;
mod serve;
mod sink;
pub mod table;
mod topic;
pub mod writer;

pub use client::{ClientConfig, ClientLog, ClientTail, ClientWriter, DomainClient};
pub use error::DdsError;
pub use reader::{DataReader, ReaderStatus, SampleRef};
pub use sample::{Sample, SampleInfo, WriterId};
pub use writer::{DataWriter, Loan, SampleSlot};

use config::DdsConfig;
use qos::{Level, Qos};
use sample::Codec;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sink::ReaderCore;
use sst::sync::atomic::{AtomicU32, AtomicU64};
use sst::sync::lock;
use sst::transport::NodeId;
use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use table::{DdsLayout, Edit, Endpoint, TopicTable};
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
    /// Notes one incompatible peer (a client writer seen by its sample).
    pub(crate) fn add(&mut self, id: WriterId, level: Level) {
        if self.seen.insert(id) {
            self.total_count += 1;
        }
        if !self.current.iter().any(|(w, _)| *w == id) {
            self.current.push((id, level));
        }
    }

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
}

/// A member of a domain (see the crate docs). Cheap to clone; the domain membership
/// ends when the last clone and every writer and reader are dropped.
#[derive(Debug, Clone)]
pub struct DomainParticipant(Arc<Participant>);

/// The endpoints a topic has: the current members' and their clients'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Matched {
    /// Writers (clients' included).
    pub writers: usize,
    /// Readers (clients' included).
    pub readers: usize,
    /// Of the writers, those of clients.
    pub client_writers: usize,
    /// Of the readers, those of clients.
    pub client_readers: usize,
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
            me: OnceLock::new(),
            topics: Mutex::new(HashMap::new()),
            group: OnceLock::new(),
            participant: OnceLock::new(),
            catch_up_timeout: cfg.catch_up_timeout,
            logs: logs::Logs::default(),
            log_dir: cfg.log_dir.clone(),
        });
        let (s1, s2, s3) = (shared.clone(), shared.clone(), shared.clone());
        let (s4, s5, s6) = (shared.clone(), shared.clone(), shared.clone());
        let group = GroupBuilder::new(cfg.group.clone())
            .layout(DdsLayout)
            .deliver_by(move |view, k, _spec| deliverer(&s1, view, k))
            .on_rejoin(move |_| rejoined(&s3))
            .on_request(move |body| match tailwind::service::wire::log_of(body) {
                Some(log) => s2.logs.answer(log, body),
                None => catchup::answer(&s2, body),
            })
            .regions_by(logs::regions)
            .on_view_start(move |v, t| {
                let group = s4.group.get().and_then(Weak::upgrade);
                for why in s4.logs.ensure(v, t.local_id(), &s4.log_dir, group.as_ref()) {
                    tracing::error!(%why, "a log member could not start");
                }
                s4.logs.view_starts(v, t);
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
        let p = Participant { group, shared, cfg, incarnation: incarnation(), next_endpoint: AtomicU32::new(0) };
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
        let state = p.state_of(&topic.name, topic.qos)?;
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
        };
        p.add_endpoint(&topic.name, true, id, qos.level)?;
        Ok(w)
    }

    /// A reader requesting `qos.level`, keeping `qos.history` untaken. It first gets
    /// the history this participant holds (Volatile/Logged), or catches up from the
    /// other members if it is new in the topic. Returns once the domain's view has it.
    pub fn create_reader<T>(&self, topic: &Topic<T>, qos: Qos) -> Result<DataReader<T>, DdsError> {
        qos.validate_reader().map_err(DdsError::Qos)?;
        let p = &self.0;
        let state = p.state_of(&topic.name, topic.qos)?;
        let id = p.endpoint_id()?;
        let core = Arc::new(ReaderCore::new(id, &qos));
        state.add_reader(core.clone());
        let owner = Box::new(reader::MemberOwner { p: p.clone(), topic: state });
        let r = DataReader { owner, core, codec: topic.codec.clone() };
        p.add_endpoint(&topic.name, false, id, qos.level)?;
        Ok(r)
    }

    /// Lists this member's proxy reader of `topic` (and, with `writers`, its
    /// proxy writer) for the clients it serves (see [`client`]) now, in a view
    /// change, so that clients' readers (and writers) on it cost none later.
    /// Without this, the first client reader or writer of the topic at this member
    /// makes the change. A proxy writer makes this member a sender of the topic,
    /// which costs the topic's order a little while it has nothing to send (null
    /// sends): list it only where clients write.
    pub fn serve_clients<T>(&self, topic: &Topic<T>, writers: bool) -> Result<(), DdsError> {
        let view = self.0.group.view().ok_or_else(|| DdsError::NotApplied("this participant stopped".into()))?;
        let table = TopicTable::decode(view.layout().bytes()).map_err(DdsError::NotApplied)?;
        let entry = table
            .topic(&topic.name)
            .cloned()
            .ok_or_else(|| DdsError::Topic { topic: topic.name.clone(), why: "no such topic".into() })?;
        if writers {
            self.0.proxy(&entry, true)?;
        }
        self.0.proxy(&entry, false)?;
        Ok(())
    }

    /// How many writers and readers topic `name` has: the endpoints of the current
    /// view's members, and those of the clients they serve (each member that lists
    /// a proxy endpoint on the topic is asked how many, over the control plane; one
    /// that does not answer within a second counts none). `None` if the domain has
    /// no such topic (or this participant stopped).
    pub fn matched(&self, name: &str) -> Option<Matched> {
        let view = self.0.group.view()?;
        let table = TopicTable::decode(view.layout().bytes()).ok()?;
        let t = table.topic(name)?;
        let member = |n: u32| view.members().iter().any(|m| m.0 == n);
        let live = |list: &[Endpoint]| list.iter().filter(|e| e.id != sample::PROXY && member(e.node)).count();
        let mut m = Matched { writers: live(&t.writers), readers: live(&t.readers), ..Matched::default() };
        let mut proxies: Vec<u32> = t
            .writers
            .iter()
            .chain(&t.readers)
            .filter(|e| e.id == sample::PROXY && member(e.node))
            .map(|e| e.node)
            .collect();
        proxies.sort_unstable();
        proxies.dedup();
        for node in proxies {
            let (w, r) = self.0.client_endpoints(NodeId(node), name);
            m.client_writers += w;
            m.client_readers += r;
        }
        m.writers += m.client_writers;
        m.readers += m.client_readers;
        Some(m)
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

    /// The replicated log `name` (see [`logs`]): creates it with `qos` (a change of
    /// the domain's table, a view change), or checks that the domain has it with
    /// this QoS; returns once this participant runs its member of it.
    pub fn create_log(&self, name: &str, qos: logs::LogQos) -> Result<logs::ReplicatedLog, DdsError> {
        qos.validate().map_err(|why| DdsError::Topic { topic: name.into(), why })?;
        let view = self.0.edit(&Edit::CreateLog { name: name.into(), qos }, name)?;
        self.0.log_handle(name, &view)
    }

    /// The replicated log `name` as the domain has it (an error if it has none).
    pub fn find_log(&self, name: &str) -> Result<logs::ReplicatedLog, DdsError> {
        let view = self.0.group.view().ok_or_else(|| DdsError::NotApplied("this participant stopped".into()))?;
        self.0.log_handle(name, &view)
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
        self.create_topic(name, &codec.type_name, qos)?;
        Ok(Topic { name: name.into(), qos, codec, _t: PhantomData })
    }

    /// Creates topic `name`, or checks that the domain has it with this type and QoS.
    pub(crate) fn create_topic(&self, name: &str, type_name: &str, qos: Qos) -> Result<(), DdsError> {
        qos.validate_topic().map_err(|why| DdsError::Topic { topic: name.into(), why })?;
        self.edit(&Edit::CreateTopic { name: name.into(), type_name: type_name.into(), qos }, name)?;
        Ok(())
    }

    /// This member's state of topic `entry`, with its proxy writer (or reader) for
    /// the clients it serves listed in the table (an edit, the first time).
    pub(crate) fn proxy(&self, entry: &table::TopicEntry, writer: bool) -> Result<Arc<TopicState>, DdsError> {
        let state = self.state_of(&entry.name, entry.qos)?;
        lock(&state.inner).clients.proxied = true;
        let view = self.group.view().ok_or_else(|| DdsError::NotApplied("this participant stopped".into()))?;
        let table = TopicTable::decode(view.layout().bytes()).map_err(DdsError::NotApplied)?;
        let list = table.topic(&entry.name).map(|t| if writer { &t.writers } else { &t.readers });
        if !list.is_some_and(|l| l.iter().any(|e| e.node == self.shared.me().0 && e.id == sample::PROXY)) {
            // The proxy writer offers the topic's level (each client sample carries its
            // writer's own); the proxy reader requests the least, so it takes everything.
            let level = if writer { entry.qos.level } else { Level::Unordered };
            self.add_endpoint(&entry.name, writer, sample::PROXY, level)?;
        }
        Ok(state)
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

    /// How many client writers and readers `node` serves on topic `name` (0, 0 if
    /// it does not answer).
    fn client_endpoints(&self, node: NodeId, name: &str) -> (usize, usize) {
        if node == self.shared.me() {
            return lock(&self.shared.topics).get(name).map_or((0, 0), |t| lock(&t.inner).clients.counts());
        }
        let ask = catchup::Ask::ClientEndpoints { topic: name.into() };
        let Ok(body) = postcard::to_stdvec(&ask) else { return (0, 0) };
        match self.group.request(node, &body, Duration::from_secs(1)).map(|b| postcard::from_bytes(&b)) {
            Ok(Ok(catchup::Answer::Endpoints { writers, readers })) => (writers as usize, readers as usize),
            _ => (0, 0),
        }
    }

    fn endpoint_id(&self) -> Result<u32, DdsError> {
        let id = self.next_endpoint.fetch_add(1, sst::sync::atomic::Ordering::Relaxed);
        if id >= sample::MAX_WRITERS {
            return Err(DdsError::Qos(format!("at most {} writers and readers per participant", sample::MAX_WRITERS)));
        }
        Ok(id)
    }

    /// This participant's state of topic `name` (opening its log for Logged).
    fn state_of(&self, name: &str, qos: Qos) -> Result<Arc<TopicState>, DdsError> {
        let mut topics = lock(&self.shared.topics);
        if let Some(s) = topics.get(name) {
            return Ok(s.clone());
        }
        let log = (qos.level == Level::Logged).then(|| (self.log_path(name), self.cfg.fsync));
        let s = Arc::new(TopicState::open(name, qos, self.shared.me(), log)?);
        topics.insert(name.into(), s.clone());
        Ok(s)
    }

    /// `<log_dir>/<domain>/<topic, made file-safe>-<hash>.<node>.log`.
    fn log_path(&self, topic: &str) -> PathBuf {
        let safe: String = topic.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        let hash = sst::hash::digest(topic.as_bytes()) & 0xffff_ffff;
        self.cfg.log_dir.join(&self.cfg.group.name).join(format!("{safe}-{hash:08x}.{}.log", self.shared.me().0))
    }

    fn add_endpoint(&self, topic: &str, writer: bool, id: u32, level: Level) -> Result<(), DdsError> {
        let endpoint = Endpoint { node: self.shared.me().0, id, level };
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
        let e = Edit::RemoveEndpoint { topic: topic.into(), writer, node: self.shared.me().0, id };
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
            if g.writers.is_empty() && g.readers.is_empty() && !g.clients.proxied {
                // Out of the topic: the next entry catches up on what it missed.
                g.last_view = None;
            }
        }
    }
}

/// This participant was removed from the domain and is back: every topic catches
/// up on what it missed at its next view, and the endpoints are listed again if
/// the table lost them (a thread of its own: this runs while the view is being
/// installed, and the edits need the next view).
fn rejoined(shared: &Arc<Shared>) {
    for t in lock(&shared.topics).values() {
        t.rejoined();
    }
    shared.logs.rejoined();
    let Some(p) = shared.participant.get().cloned() else { return };
    let spawned = std::thread::Builder::new().name("dds-rejoined".into()).spawn(move || {
        if let Some(p) = p.upgrade() {
            p.announce_again();
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(%e, "no thread to list this participant's endpoints again");
    }
}

impl Drop for Participant {
    fn drop(&mut self) {
        // Before the group goes: the logs' workers stop while it still runs.
        self.shared.logs.stop("the participant is gone");
    }
}

impl Participant {
    /// Lists this participant and its endpoints in the domain's table again where
    /// the table lacks them (each edit is a no-op where it has them).
    fn announce_again(&self) {
        let mut edits = vec![Edit::Hello { node: self.shared.me().0, incarnation: self.incarnation }];
        for (name, t) in lock(&self.shared.topics).iter() {
            let g = lock(&t.inner);
            let me = self.shared.me().0;
            let mut add = |writer, id, level| {
                let endpoint = Endpoint { node: me, id, level };
                edits.push(Edit::AddEndpoint { topic: name.clone(), incarnation: self.incarnation, writer, endpoint });
            };
            for (id, w) in &g.writers {
                add(true, *id, w.level);
            }
            for r in &g.readers {
                add(false, r.id, r.level);
            }
        }
        for e in edits {
            if let Err(err) = self.edit(&e, "participant") {
                tracing::warn!(%err, "could not list an endpoint again after a rejoin");
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
