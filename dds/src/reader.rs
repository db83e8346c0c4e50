//! DataReader: samples to `take`/`read` (by state and instance), a blocking
//! `wait`, conditions for WaitSets, listeners, an async stream, and the statuses
//! (lost, rejected, incompatible QoS, deadlines, liveliness).

use crate::error::{CatchUpError, CodecError};
use crate::instance::{InstanceHandle, InstanceState, Keyed, StateMask};
use crate::participant::state::Participant;
use crate::queue::{Raw, ReaderCore};
use crate::sample::{Codec, Sample, SampleInfo};
use crate::sink::Src;
pub use crate::status::ReaderStatus;
use crate::status::Rejection;
use crate::topic::TopicState;
use crate::waitset::{ReadCondition, StatusCondition, StatusKind};
use crate::{DdsError, IncompatibleQos, InstanceCounts};
use spindle_sst::sync::lock;
use spindle_views::group::Group;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

#[cfg(feature = "async")]
mod stream;
#[cfg(feature = "async")]
pub use stream::SampleStream;

/// A sample read where it lies (see [`DataReader::on_sample_in_place`]): valid
/// until the callback returns.
pub struct SampleRef<'a, T> {
    info: &'a SampleInfo,
    src: &'a Src<'a>,
    /// Where the serialized sample starts in `src`.
    at: usize,
    codec: &'a Codec<T>,
}

impl<T> std::fmt::Debug for SampleRef<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SampleRef").field("info", self.info).field("len", &self.len()).finish()
    }
}

impl<T> SampleRef<'_, T> {
    /// Its info.
    pub fn info(&self) -> &SampleInfo {
        self.info
    }
    /// The serialized sample's length in bytes.
    pub fn len(&self) -> usize {
        self.src.len() - self.at
    }
    /// True for an empty sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Word `i` of the serialized sample (bytes `8i..8i+8`, little-endian), read in
    /// its slot without copying the rest; `None` past the sample's end.
    pub fn word(&self, i: usize) -> Option<u64> {
        let end = i.checked_add(1)?.checked_mul(8)?;
        (end <= self.len()).then(|| self.src.word(self.at / 8 + i))
    }
    /// Copies the serialized sample's bytes from byte `at` (a multiple of 8) into
    /// `out`, straight out of its slot or its writer's arena (for samples of any
    /// size: one copy, no buffer in between).
    ///
    /// Panics if `at + out.len()` passes the end of the sample.
    pub fn read_bytes(&self, at: usize, out: &mut [u8]) {
        assert!(at % 8 == 0 && at + out.len() <= self.len(), "read {at}+{} of a {}-byte sample", out.len(), self.len());
        self.src.read_at(self.at + at, out);
    }
    /// Decodes the sample (a Pod sample is one copy out of its slot).
    pub fn get(&self) -> Result<T, CodecError> {
        let mut buf = vec![0u8; self.len()];
        self.src.read_at(self.at, &mut buf);
        (self.codec.decode)(&buf)
    }
}

impl<T: bytemuck::Pod> SampleRef<'_, T> {
    /// Copies a Pod sample out of its slot into `out` without an intermediate buffer.
    pub fn read_pod(&self, out: &mut T) -> Result<(), CodecError> {
        let want = std::mem::size_of::<T>();
        if self.len() != want {
            return Err(CodecError::Size { len: self.len(), want });
        }
        self.src.read_at(self.at, bytemuck::bytes_of_mut(out));
        Ok(())
    }
}

/// Reads samples of one topic (see [`crate::DomainParticipant::create_reader`] and
/// [`crate::DomainClient::create_reader`]). Dropping it removes it from the domain
/// (a table edit: it waits up to 2 s for the domain to take it, then gives up with
/// a warning; the domain drops the endpoint at the participant's next change).
pub struct DataReader<T> {
    pub(crate) owner: Box<dyn Owner>,
    pub(crate) core: Arc<ReaderCore>,
    pub(crate) codec: Codec<T>,
    pub(crate) deadline: Option<Duration>,
}

/// Whose reader it is (a member participant's or a client's): what its statuses
/// and its end need.
pub(crate) trait Owner: Send + Sync {
    fn topic_name(&self) -> &str;
    fn catch_up_failed(&self) -> Option<CatchUpError>;
    /// The reader is dropped: take it out of the topic.
    fn close(&self, core: &Arc<ReaderCore>);
    /// Waits for `done` by running the node's passes on this thread, where the
    /// group is latency first (`spindle_views::group::Group::wait_running_passes`);
    /// `None`: wait the usual way.
    fn wait_running_passes(&self, _deadline: Instant, _done: &mut dyn FnMut() -> bool) -> Option<bool> {
        None
    }
    /// The member's group, for a WaitSet's wait to run its passes.
    fn group(&self) -> Option<Weak<Group>> {
        None
    }
}

/// A member participant's reader.
pub(crate) struct MemberOwner {
    pub(crate) p: Arc<Participant>,
    pub(crate) topic: Arc<TopicState>,
}

impl Owner for MemberOwner {
    fn topic_name(&self) -> &str {
        &self.topic.name
    }
    fn catch_up_failed(&self) -> Option<CatchUpError> {
        *lock(&self.topic.catch_up_failed)
    }
    fn close(&self, core: &Arc<ReaderCore>) {
        lock(&self.topic.inner).engine.remove_readers(|r| Arc::ptr_eq(&r.handle, core));
        self.p.remove_endpoint(&self.topic.name, false, core.id);
    }
    fn wait_running_passes(&self, deadline: Instant, done: &mut dyn FnMut() -> bool) -> Option<bool> {
        self.p.group.wait_running_passes(deadline, done)
    }
    fn group(&self) -> Option<Weak<Group>> {
        Some(Arc::downgrade(&self.p.group))
    }
}

impl<T> std::fmt::Debug for DataReader<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataReader").field("topic", &self.owner.topic_name()).field("id", &self.core.id).finish()
    }
}

impl<T: Send + 'static> DataReader<T> {
    /// Decodes collected samples; one that does not decode is skipped and counted
    /// in [`ReaderStatus::rejected`].
    fn decode(&self, raws: Vec<Raw>) -> Vec<Sample<T>> {
        let mut out = Vec::with_capacity(raws.len());
        let mut bad = Vec::new();
        for raw in raws {
            match (self.codec.decode)(&raw.payload) {
                Ok(data) => out.push(Sample { data, info: raw.info }),
                Err(why) => bad.push(Rejection::Undecodable { seq: raw.info.seq, writer: raw.info.writer, why }),
            }
        }
        for why in bad {
            self.core.reject(why);
        }
        out
    }

    /// Removes and returns every sample waiting, in delivery order.
    pub fn take(&self) -> Vec<Sample<T>> {
        self.take_up_to(usize::MAX)
    }

    /// Removes and returns the first `max` samples waiting (fewer if fewer wait),
    /// in delivery order; the others stay for the next take. One that does not
    /// decode is skipped (and counts toward `max`) and counted in
    /// [`ReaderStatus::rejected`].
    pub fn take_up_to(&self, max: usize) -> Vec<Sample<T>> {
        self.decode(self.core.collect(max, StateMask::ANY, None, true))
    }

    /// Returns every sample waiting without removing them, and marks them read:
    /// what `take` would return, each with [`SampleInfo::sample_state`] `Read` if
    /// an earlier `read` returned it.
    pub fn read(&self) -> Vec<Sample<T>> {
        self.read_matching(usize::MAX, StateMask::ANY)
    }

    /// Takes up to `max` samples in the states `mask` wants.
    pub fn take_matching(&self, max: usize, mask: StateMask) -> Vec<Sample<T>> {
        self.decode(self.core.collect(max, mask, None, true))
    }

    /// Reads (without removing, marking read) up to `max` samples in the states
    /// `mask` wants.
    pub fn read_matching(&self, max: usize, mask: StateMask) -> Vec<Sample<T>> {
        self.decode(self.core.collect(max, mask, None, false))
    }

    /// Takes the samples of one instance (an error if this reader never had a
    /// sample of it).
    pub fn take_instance(&self, instance: InstanceHandle) -> Result<Vec<Sample<T>>, DdsError> {
        self.known(instance)?;
        Ok(self.decode(self.core.collect(usize::MAX, StateMask::ANY, Some(instance), true)))
    }

    /// Reads the samples of one instance (an error if this reader never had a
    /// sample of it).
    pub fn read_instance(&self, instance: InstanceHandle) -> Result<Vec<Sample<T>>, DdsError> {
        self.known(instance)?;
        Ok(self.decode(self.core.collect(usize::MAX, StateMask::ANY, Some(instance), false)))
    }

    fn known(&self, instance: InstanceHandle) -> Result<InstanceState, DdsError> {
        self.core
            .instance_state(instance)
            .ok_or_else(|| DdsError::UnknownInstance { topic: self.topic_name().into(), instance })
    }

    /// The state of an instance this reader had a sample of.
    pub fn instance_state(&self, instance: InstanceHandle) -> Result<InstanceState, DdsError> {
        self.known(instance)
    }

    /// What this reader counted of an instance it had a sample of: samples
    /// received, from the history, and replaced untaken (see [`InstanceCounts`]
    /// for what a late joiner's `KeepLast(n)` keeps across its seam).
    pub fn instance_counts(&self, instance: InstanceHandle) -> Result<InstanceCounts, DdsError> {
        self.core
            .instance_counts(instance)
            .ok_or_else(|| DdsError::UnknownInstance { topic: self.topic_name().into(), instance })
    }

    /// The instance of `sample` (its key's handle; `NIL` on an unkeyed topic),
    /// whether this reader knows it or not.
    pub fn instance_of(&self, sample: &T) -> Result<InstanceHandle, DdsError> {
        Ok(self.codec.instance_of(sample)?)
    }

    /// Waits up to `timeout` until a sample is waiting; true if one is. Sleeps,
    /// unless the group is latency first (`spindle_views::config::Config::latency_first`):
    /// then this thread runs the node's passes while it waits, spinning up to 1 ms
    /// before it sleeps.
    pub fn wait(&self, timeout: Duration) -> bool {
        self.wait_until(Instant::now() + timeout)
    }

    fn wait_until(&self, deadline: Instant) -> bool {
        let core = &self.core;
        // Already there: no clock read, no borrow.
        if core.has_samples() {
            return true;
        }
        match self.owner.wait_running_passes(deadline, &mut || core.has_samples()) {
            Some(true) => true,
            Some(false) => core.has_samples(),
            None => core.wait_nonempty(deadline.saturating_duration_since(Instant::now())),
        }
    }

    /// Waits up to `timeout` until `n` samples in all were taken; returns them:
    /// at most `n` (samples past the `n`th stay waiting for the next take).
    pub fn take_n(&self, n: usize, timeout: Duration) -> Vec<Sample<T>> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        while out.len() < n {
            if !self.wait_until(deadline) {
                break;
            }
            out.extend(self.take_up_to(n - out.len()));
        }
        out
    }

    /// A condition for a [`crate::waitset::WaitSet`]: true while this reader holds
    /// a sample `mask` wants.
    pub fn read_condition(&self, mask: StateMask) -> ReadCondition {
        ReadCondition { core: self.core.clone(), mask, group: self.owner.group() }
    }

    /// A condition for a [`crate::waitset::WaitSet`]: true when one of `kinds`
    /// changed since it last fired.
    pub fn status_condition(&self, kinds: &[StatusKind]) -> StatusCondition {
        StatusCondition::new(self.core.clone(), kinds, self.deadline)
    }

    /// The samples as a `futures::Stream`, in delivery order (they are taken).
    /// Its task sleeps while none wait: delivery wakes it. Usable from any
    /// executor.
    #[cfg(feature = "async")]
    pub fn stream(&self) -> SampleStream<'_, T> {
        SampleStream::new(self)
    }

    /// Calls `f` with each sample as it is delivered, decoded, instead of queueing it
    /// (samples already waiting stay for [`DataReader::take`]). Runs on the domain's
    /// delivery thread, under the topic's lock: it must not block, nor write to a
    /// topic, nor wait for a writer's delivery (each waits for this very thread);
    /// hand such work to another thread. Reading statuses and taking is fine.
    pub fn on_data_available(&self, mut f: impl FnMut(Sample<T>) + Send + 'static) {
        let codec = self.codec.clone();
        let core = self.core.clone();
        self.core.set_listener(Some(Box::new(move |info: &SampleInfo, src: &Src<'_>, at: usize| {
            let mut buf = vec![0u8; src.len() - at];
            src.read_at(at, &mut buf);
            match (codec.decode)(&buf) {
                Ok(data) => f(Sample { data, info: *info }),
                Err(why) => core.reject(Rejection::Undecodable { seq: info.seq, writer: info.writer, why }),
            }
        })));
    }

    /// Calls `f` with each sample where it lies (its slot, for live samples), with
    /// no copy until the callback reads it ([`SampleRef::word`],
    /// [`SampleRef::read_pod`], [`SampleRef::get`]). Same rules as
    /// [`DataReader::on_data_available`].
    pub fn on_sample_in_place(&self, mut f: impl FnMut(&SampleRef<'_, T>) + Send + 'static) {
        let codec = self.codec.clone();
        self.core.set_listener(Some(Box::new(move |info: &SampleInfo, src: &Src<'_>, at: usize| {
            f(&SampleRef { info, src, at, codec: &codec });
        })));
    }

    /// Removes the listener; samples queue again.
    pub fn clear_listener(&self) {
        self.core.set_listener(None);
    }

    /// The statuses so far (deadlines counted up to now).
    pub fn status(&self) -> ReaderStatus {
        let mut s = self.core.status();
        s.received += self.core.taken_by_listener();
        s
    }

    /// Writers whose offer does not meet this reader's request (their samples are
    /// not delivered to it).
    pub fn incompatible_qos(&self) -> IncompatibleQos {
        lock(&self.core.q).status.incompatible.clone()
    }

    /// Why the late join's history did not arrive, if it did not (a member's
    /// reader; a client's reader reports what it could not have in
    /// [`ReaderStatus::lost`]).
    pub fn catch_up_failed(&self) -> Result<(), DdsError> {
        match self.owner.catch_up_failed() {
            None => Ok(()),
            Some(why) => Err(DdsError::CatchUp { topic: self.topic_name().into(), why }),
        }
    }

    /// The topic's name.
    pub fn topic_name(&self) -> &str {
        self.owner.topic_name()
    }

    /// The reader's number in its participant (or client).
    pub fn id(&self) -> u32 {
        self.core.id
    }
}

impl<T: Keyed + Send + 'static> DataReader<T> {
    /// The handle of the instance with `key`, if this reader had a sample of it.
    pub fn lookup_instance(&self, key: &T::Key) -> Result<Option<InstanceHandle>, DdsError> {
        let h = InstanceHandle::of_key(key)?;
        Ok(self.core.instance_state(h).map(|_| h))
    }
}

impl<T> Drop for DataReader<T> {
    fn drop(&mut self) {
        self.owner.close(&self.core);
    }
}
