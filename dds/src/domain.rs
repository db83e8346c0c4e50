//! A [`DomainParticipant`]'s calls: topics, writers, readers, matching, logs.

use crate::access::Action;
use crate::error::{Awaited, Stop, TopicError};
use crate::instance::Keyed;
use crate::qos::{Qos, QosError};
use crate::table::{Edit, Endpoint, TopicTable};
use crate::{filter, logs, sample, DataReader, DataWriter, DdsError, DomainParticipant, Matched, Topic};
use serde::de::DeserializeOwned;
use serde::Serialize;
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use std::time::Duration;

impl DomainParticipant {
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

    /// [`DomainParticipant::find_topic`], waiting up to `within` for another
    /// participant to create it (woken by view changes, no polling).
    pub fn find_topic_within<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
        within: Duration,
    ) -> Result<Topic<T>, DdsError> {
        self.0.find_within(name, sample::serde_codec::<T>(), within)
    }

    /// A keyed topic (see [`crate::instance`]): its samples are instances by
    /// [`Keyed::key`], with history per instance. Creates it with `qos`, or checks
    /// that the domain has it with this type and QoS.
    pub fn keyed_topic<T: Serialize + DeserializeOwned + Keyed>(
        &self,
        name: &str,
        qos: Qos,
    ) -> Result<Topic<T>, DdsError> {
        self.0.make_topic(name, qos, sample::keyed_codec::<T>())
    }

    /// The keyed topic `name` as the domain has it, if it has it with this type.
    pub fn find_keyed_topic<T: Serialize + DeserializeOwned + Keyed>(&self, name: &str) -> Result<Topic<T>, DdsError> {
        self.0.find(name, sample::keyed_codec::<T>())
    }

    /// A keyed Pod topic: bytes `key` of each sample name its instance.
    pub fn keyed_pod_topic<T: bytemuck::Pod>(
        &self,
        name: &str,
        qos: Qos,
        key: std::ops::Range<usize>,
    ) -> Result<Topic<T>, DdsError> {
        let (start, end, size) = (key.start, key.end, std::mem::size_of::<T>());
        let codec = sample::keyed_pod_codec::<T>(key)
            .ok_or_else(|| DdsError::Topic { topic: name.into(), why: TopicError::KeyRange { start, end, size } })?;
        self.0.make_topic(name, qos, codec)
    }

    /// A writer offering `qos.level` (at most the topic's level). Returns once the
    /// domain's view has it as a sender.
    pub fn create_writer<T>(&self, topic: &Topic<T>, qos: Qos) -> Result<DataWriter<T>, DdsError> {
        if qos.level > topic.qos.level {
            return Err(DdsError::Qos(QosError::AboveTopic { offered: qos.level, topic: topic.qos.level }));
        }
        qos.validate_writer()?;
        let p = &self.0;
        may(p, &topic.name, Action::Publish)?;
        let state = p.state_of(&topic.name, topic.qos, topic.codec.key.is_some())?;
        let id = p.endpoint_id()?;
        lock(&state.inner).engine.add_writer(id, qos.level);
        let w = DataWriter::new(p.clone(), state, id, qos, topic.codec.clone());
        p.add_endpoint(&topic.name, true, id, qos.level)?;
        Ok(w)
    }

    /// A reader requesting `qos.level`, keeping `qos.history` untaken. It first gets
    /// the history this participant holds (Volatile/Logged), or catches up from the
    /// other members if it is new in the topic. Returns once the domain's view has it.
    pub fn create_reader<T>(&self, topic: &Topic<T>, qos: Qos) -> Result<DataReader<T>, DdsError> {
        may(&self.0, &topic.name, Action::Subscribe)?;
        self.0.reader(topic, qos, None)
    }

    /// A reader that receives only the samples `filter` passes (a content filter:
    /// the other samples are dropped at this participant before they are queued,
    /// so its history limits count passing samples only; state changes of
    /// instances always pass). `filter` runs on the delivery thread: keep it short.
    pub fn create_reader_filtered<T: 'static>(
        &self,
        topic: &Topic<T>,
        qos: Qos,
        filter: impl Fn(&T) -> bool + Send + Sync + 'static,
    ) -> Result<DataReader<T>, DdsError> {
        may(&self.0, &topic.name, Action::Subscribe)?;
        self.0.reader(topic, qos, Some(filter::by_closure(&topic.codec, filter)))
    }

    /// A reader that receives only the samples the filter expression `expr`
    /// passes (see [`filter`]: `"celsius > 30 AND room <> 'attic'"`), for serde
    /// types. A field the type does not have, or a literal of the wrong kind, is
    /// [`DdsError::Filter`].
    pub fn create_reader_where<T: Serialize + DeserializeOwned + Send + Sync + 'static>(
        &self,
        topic: &Topic<T>,
        qos: Qos,
        expr: &str,
    ) -> Result<DataReader<T>, DdsError> {
        let e = filter::Expr::parse::<T>(expr).map_err(|why| DdsError::Filter { expr: expr.into(), why })?;
        self.create_reader_filtered(topic, qos, move |t| e.matches(t))
    }

    /// Lists this member's proxy reader of `topic` (and, with `writers`, its
    /// proxy writer) for the clients it serves (see [`crate::client`]) now, in a view
    /// change, so that clients' readers (and writers) on it cost none later.
    /// Without this, the first client reader or writer of the topic at this member
    /// makes the change. A proxy writer makes this member a sender of the topic,
    /// which costs the topic's order a little while it has nothing to send (null
    /// sends): list it only where clients write.
    pub fn serve_clients<T>(&self, topic: &Topic<T>, writers: bool) -> Result<(), DdsError> {
        let table = self.0.table()?;
        let entry = table
            .topic(&topic.name)
            .cloned()
            .ok_or_else(|| DdsError::Topic { topic: topic.name.clone(), why: TopicError::NoSuchTopic })?;
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
    /// `readers` readers (see [`DomainParticipant::matched`]); returns the counts.
    /// Woken by view changes (members' endpoints); clients' endpoints, which
    /// change no view, are counted again every 100 ms.
    pub fn wait_for_matched(
        &self,
        name: &str,
        writers: usize,
        readers: usize,
        within: Duration,
    ) -> Result<Matched, DdsError> {
        let deadline = std::time::Instant::now() + within;
        loop {
            let now = self.matched(name);
            if let Some(m) = now.filter(|m| m.writers >= writers && m.readers >= readers) {
                return Ok(m);
            }
            if let Some(stop) = self.0.stop() {
                return Err(DdsError::Stopped(stop));
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                let what = Awaited::Matched { topic: name.into(), writers, readers };
                return Err(DdsError::TimedOut { what, waited: within });
            }
            let seen = self.0.group.view().map(|v| v.id());
            self.0.group.wait_for_view(left.min(Duration::from_millis(100)), |v| Some(v.id()) != seen);
        }
    }

    /// The replicated log `name` (see [`logs`]): creates it with `qos` (a change of
    /// the domain's table, a view change), or checks that the domain has it with
    /// this QoS; returns once this participant runs its member of it.
    pub fn create_log(&self, name: &str, qos: logs::LogQos) -> Result<logs::ReplicatedLog, DdsError> {
        qos.validate().map_err(|e| DdsError::Topic { topic: name.into(), why: TopicError::Qos(e) })?;
        let view = self.0.edit(&Edit::CreateLog { name: name.into(), qos }, name)?;
        self.0.log_handle(name, &view)
    }

    /// The replicated log `name` as the domain has it (an error if it has none).
    pub fn find_log(&self, name: &str) -> Result<logs::ReplicatedLog, DdsError> {
        let view = self.0.group.view().ok_or_else(|| DdsError::Stopped(self.0.stop().unwrap_or(Stop::Left)))?;
        self.0.log_handle(name, &view)
    }

    /// Leaves the domain gracefully (a view change removes this participant once
    /// everything it is owed is delivered); waits up to `within`.
    pub fn leave(&self, within: Duration) -> Result<(), DdsError> {
        self.0.leaving.store(true, spindle_sst::sync::atomic::Ordering::Release);
        if self.0.group.leave(within) {
            Ok(())
        } else {
            Err(DdsError::TimedOut { what: Awaited::Leave, waited: within })
        }
    }
}

/// Whether this member may do `action` to `topic` itself: a member that proves
/// itself with a certificate is held to the access policy as the identity its
/// certificate names, as its clients are; one that holds the group secret, or
/// any member without a policy, may do everything.
fn may(p: &crate::participant::Participant, topic: &str, action: Action) -> Result<(), DdsError> {
    let (Some(policy), Some(me)) = (&p.cfg.access, p.group.certificate_identity()) else { return Ok(()) };
    match policy.allows(Some(me), topic, action) {
        true => Ok(()),
        false => Err(DdsError::Denied { topic: topic.into(), action }),
    }
}
