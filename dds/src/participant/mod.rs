//! A participant's internals: table edits, topic states, endpoints, its
//! replicated logs, and the group's callbacks (delivery, view start, rejoin).

mod logs;
mod start;
pub(crate) mod state;

pub(crate) use start::start;
pub(crate) use state::{Participant, Shared};

use crate::error::{Awaited, CatchUpError, Stop, TopicError};
use crate::qos::{Level, Qos, QosError};
use crate::queue::{FilterFn, ReaderCore};
use crate::sample::Codec;
use crate::table::{self, Edit, Endpoint, TopicTable};
use crate::topic::TopicState;
use crate::{catchup, instance, reader, sample, DataReader, DdsError, Topic};
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use spindle_views::group::InPlaceBatch;
use spindle_views::layout::EditError;
use spindle_views::view::View;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

impl Participant {
    pub(crate) fn edit(&self, e: &Edit, what: &str) -> Result<View, DdsError> {
        let topic = |why| DdsError::Topic { topic: what.into(), why };
        // The typed cause first, from this member's table (the group's layout
        // interface carries only text).
        if let Err(why) = self.table()?.apply(e) {
            return Err(topic(why));
        }
        self.group.edit_layout(&e.encode(), self.cfg.setup_timeout).map_err(|err| match err {
            EditError::TooLarge(bytes) => topic(TopicError::TableFull { bytes }),
            EditError::Invalid(_) | EditError::Static => match self.table().map(|t| t.apply(e)) {
                Ok(Err(why)) => topic(why),
                _ => topic(TopicError::Refused),
            },
            EditError::NotApplied(_) => match self.stop() {
                Some(stop) => DdsError::Stopped(stop),
                None => DdsError::TimedOut { what: Awaited::TableChange, waited: self.cfg.setup_timeout },
            },
        })
    }

    /// Why this participant stopped, if it did.
    pub(crate) fn stop(&self) -> Option<Stop> {
        self.group.stopped()?;
        Some(match self.group.removal() {
            Some(r) => Stop::Removed(r),
            None if self.leaving.load(spindle_sst::sync::atomic::Ordering::Acquire) => Stop::Left,
            None => Stop::Failed,
        })
    }

    pub(crate) fn make_topic<T>(&self, name: &str, qos: Qos, codec: Codec<T>) -> Result<Topic<T>, DdsError> {
        self.create_topic(name, &codec.type_name, qos)?;
        Ok(Topic { name: name.into(), qos, codec, _t: PhantomData })
    }

    /// Creates topic `name`, or checks that the domain has it with this type and QoS.
    pub(crate) fn create_topic(&self, name: &str, type_name: &str, qos: Qos) -> Result<(), DdsError> {
        qos.validate_topic().map_err(|e| DdsError::Topic { topic: name.into(), why: TopicError::Qos(e) })?;
        self.edit(&Edit::CreateTopic { name: name.into(), type_name: type_name.into(), qos }, name)?;
        Ok(())
    }

    /// This member's state of topic `entry`, with its proxy writer (or reader) for
    /// the clients it serves listed in the table (an edit, the first time).
    pub(crate) fn proxy(&self, entry: &table::TopicEntry, writer: bool) -> Result<Arc<TopicState>, DdsError> {
        let state = self.state_of(&entry.name, entry.qos, instance::is_keyed(&entry.type_name))?;
        lock(&state.inner).engine.set_proxied();
        let table = self.table()?;
        let list = table.topic(&entry.name).map(|t| if writer { &t.writers } else { &t.readers });
        if !list.is_some_and(|l| l.iter().any(|e| e.node == self.shared.me().0 && e.id == sample::PROXY)) {
            // The proxy writer offers the topic's level (each client sample carries its
            // writer's own); the proxy reader requests the least, so it takes everything.
            let level = if writer { entry.qos.level } else { Level::Unordered };
            self.add_endpoint(&entry.name, writer, sample::PROXY, level)?;
        }
        Ok(state)
    }

    /// The domain's table in the current view.
    pub(crate) fn table(&self) -> Result<TopicTable, DdsError> {
        let view = self.group.view().ok_or_else(|| DdsError::Stopped(self.stop().unwrap_or(Stop::Left)))?;
        TopicTable::decode(view.layout().bytes()).map_err(|_| DdsError::Protocol(crate::ProtocolError::Malformed))
    }

    /// [`Participant::find`], waiting up to `within` for the topic to appear.
    pub(crate) fn find_within<T>(&self, name: &str, codec: Codec<T>, within: Duration) -> Result<Topic<T>, DdsError> {
        let has = |v: &View| TopicTable::decode(v.layout().bytes()).is_ok_and(|t| t.topic(name).is_some());
        if !self.group.wait_for_view(within, has) {
            if let Some(stop) = self.stop() {
                return Err(DdsError::Stopped(stop));
            }
            return Err(DdsError::TimedOut { what: Awaited::Topic(name.into()), waited: within });
        }
        self.find(name, codec)
    }

    pub(crate) fn find<T>(&self, name: &str, codec: Codec<T>) -> Result<Topic<T>, DdsError> {
        let table = self.table()?;
        let topic = |why| DdsError::Topic { topic: name.into(), why };
        let entry = table.topic(name).ok_or_else(|| topic(TopicError::NoSuchTopic))?;
        if entry.type_name != codec.type_name {
            let (domain, here) = (entry.type_name.clone(), codec.type_name.clone());
            return Err(topic(TopicError::TypeMismatch { domain, here }));
        }
        Ok(Topic { name: name.into(), qos: entry.qos, codec, _t: PhantomData })
    }

    /// How many client writers and readers `node` serves on topic `name` (0, 0 if
    /// it does not answer).
    pub(crate) fn client_endpoints(&self, node: NodeId, name: &str) -> (usize, usize) {
        if node == self.shared.me() {
            return lock(&self.shared.topics).get(name).map_or((0, 0), |t| lock(&t.inner).engine.client_counts());
        }
        let ask = catchup::Ask::ClientEndpoints { topic: name.into() };
        let body = crate::wire::encode(&ask);
        let reply = self.group.request_service(crate::wire::SERVICE, node, &body, Duration::from_secs(1));
        match reply.map(|b| crate::wire::decode(&b)) {
            Ok(Ok(catchup::Answer::Endpoints { writers, readers })) => (writers as usize, readers as usize),
            _ => (0, 0),
        }
    }

    /// A number for a new endpoint: the lowest a dropped one freed, or a new one.
    pub(crate) fn endpoint_id(&self) -> Result<u32, DdsError> {
        let mut free = lock(&self.free_endpoints);
        if let Some((i, _)) = free.iter().enumerate().min_by_key(|(_, id)| **id) {
            return Ok(free.swap_remove(i));
        }
        drop(free);
        let id = self.next_endpoint.fetch_add(1, spindle_sst::sync::atomic::Ordering::Relaxed);
        if id >= sample::MAX_WRITERS {
            return Err(DdsError::Qos(QosError::TooManyEndpoints { max: sample::MAX_WRITERS }));
        }
        Ok(id)
    }

    /// A reader of `topic` (see [`crate::DomainParticipant::create_reader`]).
    pub(crate) fn reader<T>(
        self: &Arc<Self>,
        topic: &Topic<T>,
        qos: Qos,
        filter: Option<FilterFn>,
    ) -> Result<DataReader<T>, DdsError> {
        qos.validate_reader()?;
        let keyed = topic.codec.key.is_some();
        let state = self.state_of(&topic.name, topic.qos, keyed)?;
        let id = self.endpoint_id()?;
        let core = Arc::new(ReaderCore::new(id, &qos, keyed, filter));
        state.add_reader(core.clone());
        let owner = Box::new(reader::MemberOwner { p: self.clone(), topic: state });
        let r = DataReader { owner, core, codec: topic.codec.clone(), deadline: qos.deadline };
        self.add_endpoint(&topic.name, false, id, qos.level)?;
        Ok(r)
    }

    /// This participant's state of topic `name` (opening its log for Logged).
    pub(crate) fn state_of(&self, name: &str, qos: Qos, keyed: bool) -> Result<Arc<TopicState>, DdsError> {
        let mut topics = lock(&self.shared.topics);
        if let Some(s) = topics.get(name) {
            return Ok(s.clone());
        }
        let log = (qos.level == Level::Logged).then(|| (self.log_path(name), self.cfg.fsync));
        let s = TopicState::open(name, qos, keyed, self.shared.me(), log)?;
        topics.insert(name.into(), s.clone());
        Ok(s)
    }

    /// `<log_dir>/<domain>/<topic, made file-safe>-<hash>.<node>.log`.
    pub(crate) fn log_path(&self, topic: &str) -> PathBuf {
        let safe: String = topic.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        let hash = spindle_sst::hash::digest(topic.as_bytes()) & 0xffff_ffff;
        self.cfg.log_dir.join(&self.cfg.group.name).join(format!("{safe}-{hash:08x}.{}.log", self.shared.me().0))
    }

    pub(crate) fn add_endpoint(&self, topic: &str, writer: bool, id: u32, level: Level) -> Result<(), DdsError> {
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
        match self.group.edit_layout(&e.encode(), Duration::from_secs(2)) {
            // Out of the table (its samples all delivered before): the number is free.
            Ok(_) => lock(&self.free_endpoints).push(id),
            Err(err) => tracing::warn!(topic, id, %err, "could not remove an endpoint from the topic table"),
        }
    }

    fn forget(&self, topic: &str, writer: bool, id: u32) {
        if let Some(s) = lock(&self.shared.topics).get(topic) {
            let e = &mut lock(&s.inner).engine;
            if writer {
                e.remove_writer(id);
            } else {
                e.remove_readers(|r| r.id == id);
            }
            // Out of the topic: the next entry catches up on what it missed.
            e.leave_if_idle();
        }
    }
}

/// This participant was removed from the domain and is back: every topic catches
/// up on what it missed at its next view, and the endpoints are listed again if
/// the table lost them (a thread of its own: this runs while the view is being
/// installed, and the edits need the next view).
pub(crate) fn rejoined(shared: &Arc<Shared>) {
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
        // The group stops here and now, not wherever its last handle goes: a view
        // hook or a catch-up holds one for a moment, and the participant's end
        // would then not wait for the group's (its logs written, its files gone).
        self.group.shutdown();
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
            for (id, level) in g.engine.writers() {
                add(true, id, level);
            }
            for r in g.engine.readers() {
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
pub(crate) fn deliverer(shared: &Arc<Shared>, view: &View, k: usize) -> Option<DeliverFn> {
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
            tracing::error!(%e, topic = %entry.name, "no thread for a late join's catch-up");
            state.finish_catch_up(Vec::new(), None, &[], Some(CatchUpError::NoThread));
        }
    }
    Some(Box::new(move |b: &InPlaceBatch<'_>| state.deliver_batch(vid, b)))
}

/// A view starts: every topic this participant has learns which writers are
/// alive (see [`TopicState::view_started`]), and its local writers let go of the
/// views before ([`TopicState::let_go_of_views`]).
pub(crate) fn view_started(shared: &Shared, view: &View) {
    let Ok(table) = TopicTable::decode(view.layout().bytes()) else { return };
    let topics: Vec<Arc<TopicState>> = lock(&shared.topics).values().cloned().collect();
    for t in topics {
        if let Some(entry) = table.topic(&t.name) {
            t.view_started(entry, view.members());
        }
        t.let_go_of_views();
    }
}
