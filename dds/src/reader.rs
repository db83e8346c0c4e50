//! DataReader: samples to `take`/`read`, a blocking `wait`, listeners, and the
//! statuses (lost, rejected, incompatible QoS).

use crate::qos::{Level, Qos};
use crate::sample::{Codec, Sample, SampleInfo, WriterId, HEADER};
use crate::topic::{lock, TopicState};
use crate::{IncompatibleQos, Participant};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A sample's bytes (header and payload) as delivery hands them over: in their
/// slot, or in a buffer (history, catch-up).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Src<'a> {
    Slot(smc::Message<'a>),
    Bytes(&'a [u8]),
}

impl Src<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Src::Slot(m) => m.len(),
            Src::Bytes(b) => b.len(),
        }
    }
    pub(crate) fn word(&self, i: usize) -> u64 {
        match self {
            Src::Slot(m) => m.word(i),
            Src::Bytes(b) => u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("a whole word")),
        }
    }
    pub(crate) fn copy_all(self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        self.read_all(&mut v);
        v
    }
    /// Copies header and payload into `out`, which is as long as them.
    pub(crate) fn read_all(&self, out: &mut [u8]) {
        match self {
            Src::Slot(m) => m.read(out),
            Src::Bytes(b) => out.copy_from_slice(b),
        }
    }
    /// Copies the payload (after the header) into `out`, which is as long as it.
    pub(crate) fn read_payload(&self, out: &mut [u8]) {
        match self {
            Src::Slot(m) => m.read_at(HEADER, out),
            Src::Bytes(b) => out.copy_from_slice(&b[HEADER..]),
        }
    }
    pub(crate) fn payload_len(&self) -> usize {
        self.len() - HEADER
    }
}

/// A sample read where it lies (see [`DataReader::on_sample_in_place`]): valid
/// until the callback returns.
pub struct SampleRef<'a, T> {
    info: &'a SampleInfo,
    src: &'a Src<'a>,
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
        self.src.payload_len()
    }
    /// True for an empty sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Word `i` of the serialized sample (bytes `8i..8i+8`, little-endian), read in
    /// its slot without copying the rest.
    pub fn word(&self, i: usize) -> u64 {
        self.src.word(HEADER / 8 + i)
    }
    /// Decodes the sample (a Pod sample is one copy out of its slot).
    pub fn get(&self) -> Result<T, String> {
        let mut buf = vec![0u8; self.len()];
        self.src.read_payload(&mut buf);
        (self.codec.decode)(&buf)
    }
}

impl<T: bytemuck::Pod> SampleRef<'_, T> {
    /// Copies a Pod sample out of its slot into `out` without an intermediate buffer.
    pub fn read_pod(&self, out: &mut T) -> Result<(), String> {
        let want = std::mem::size_of::<T>();
        if self.len() != want {
            return Err(format!("{} bytes is not a {want}-byte sample", self.len()));
        }
        match self.src {
            Src::Slot(m) => m.read_at(HEADER, bytemuck::bytes_of_mut(out)),
            Src::Bytes(b) => bytemuck::bytes_of_mut(out).copy_from_slice(&b[HEADER..]),
        }
        Ok(())
    }
}

/// A reader's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReaderStatus {
    /// Samples that reached this reader (live and history).
    pub received: u64,
    /// Samples dropped because the queue held its history's limit untaken (the
    /// oldest go first).
    pub lost: u64,
    /// Samples that could not be decoded or stored, and other failures (history
    /// not received, log write failed).
    pub rejected: u64,
    /// Why the last one was rejected.
    pub last_rejected: Option<String>,
    /// Writers whose offer does not meet this reader's request.
    pub incompatible: IncompatibleQos,
}

struct Raw {
    info: SampleInfo,
    payload: Box<[u8]>,
}

type InPlaceFn = Box<dyn FnMut(&SampleInfo, &Src<'_>) + Send>;

struct Queue {
    samples: VecDeque<Raw>,
    status: ReaderStatus,
}

/// The type-erased side of a reader that delivery feeds.
pub(crate) struct ReaderCore {
    pub(crate) id: u32,
    pub(crate) level: Level,
    keep: usize,
    q: Mutex<Queue>,
    cond: Condvar,
    listener: Mutex<Option<InPlaceFn>>,
    /// Samples handed to a listener (counted apart: no queue lock per sample).
    taken_by_listener: sst::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for ReaderCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReaderCore").field("id", &self.id).field("level", &self.level).finish_non_exhaustive()
    }
}

impl ReaderCore {
    pub(crate) fn new(id: u32, qos: &Qos) -> ReaderCore {
        ReaderCore {
            id,
            level: qos.level,
            keep: qos.keep(),
            q: Mutex::new(Queue { samples: VecDeque::new(), status: ReaderStatus::default() }),
            cond: Condvar::new(),
            listener: Mutex::new(None),
            taken_by_listener: sst::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A sample for this reader: to its listener, or into its queue.
    pub(crate) fn offer(&self, info: &SampleInfo, src: Src<'_>) {
        if let Some(f) = lock(&self.listener).as_mut() {
            self.taken_by_listener.fetch_add(1, sst::sync::atomic::Ordering::Relaxed);
            f(info, &src);
            return;
        }
        let mut payload = vec![0u8; src.payload_len()].into_boxed_slice();
        src.read_payload(&mut payload);
        let mut q = lock(&self.q);
        q.status.received += 1;
        q.samples.push_back(Raw { info: *info, payload });
        if q.samples.len() > self.keep {
            q.samples.pop_front();
            q.status.lost += 1;
        }
        drop(q);
        self.cond.notify_all();
    }

    pub(crate) fn reject(&self, why: String) {
        let mut q = lock(&self.q);
        q.status.rejected += 1;
        q.status.last_rejected = Some(why);
    }

    pub(crate) fn set_incompatible(&self, bad: Vec<(WriterId, Level)>) {
        lock(&self.q).status.incompatible.update(bad);
    }
}

/// Reads samples of one topic (see [`crate::DomainParticipant::create_reader`]).
/// Dropping it removes it from the domain.
pub struct DataReader<T> {
    pub(crate) p: Arc<Participant>,
    pub(crate) topic: Arc<TopicState>,
    pub(crate) core: Arc<ReaderCore>,
    pub(crate) codec: Codec<T>,
}

impl<T> std::fmt::Debug for DataReader<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataReader").field("topic", &self.topic.name).field("id", &self.core.id).finish()
    }
}

impl<T: Send + 'static> DataReader<T> {
    fn decode(&self, raw: &Raw, status: &mut ReaderStatus) -> Option<Sample<T>> {
        match (self.codec.decode)(&raw.payload) {
            Ok(data) => Some(Sample { data, info: raw.info }),
            Err(why) => {
                status.rejected += 1;
                status.last_rejected = Some(format!(
                    "sample {} of {} does not decode as {}: {why}",
                    raw.info.seq, raw.info.writer, self.codec.type_name
                ));
                None
            }
        }
    }

    /// Removes and returns every sample waiting, in delivery order. One that does
    /// not decode is skipped and counted in [`ReaderStatus::rejected`].
    pub fn take(&self) -> Vec<Sample<T>> {
        let mut q = lock(&self.core.q);
        let raws: Vec<Raw> = q.samples.drain(..).collect();
        raws.iter().filter_map(|r| self.decode(r, &mut q.status)).collect()
    }

    /// Returns every sample waiting without removing them.
    pub fn read(&self) -> Vec<Sample<T>> {
        let mut q = lock(&self.core.q);
        let mut status = std::mem::take(&mut q.status);
        let out = q.samples.iter().filter_map(|r| self.decode(r, &mut status)).collect();
        q.status = status;
        out
    }

    /// Waits up to `timeout` until a sample is waiting; true if one is. Sleeps,
    /// never spins.
    pub fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut q = lock(&self.core.q);
        while q.samples.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            q = self.core.cond.wait_timeout(q, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        true
    }

    /// Waits up to `timeout` until `n` samples in all were taken; returns them.
    pub fn take_n(&self, n: usize, timeout: Duration) -> Vec<Sample<T>> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        while out.len() < n {
            if !self.wait(deadline.saturating_duration_since(Instant::now())) {
                break;
            }
            out.extend(self.take());
        }
        out
    }

    /// Calls `f` with each sample as it is delivered, decoded, instead of queueing it
    /// (samples already waiting stay for [`DataReader::take`]). Runs on the domain's
    /// delivery thread, under the topic's lock: it must not block, nor write to a
    /// topic, nor wait for a writer's delivery (each waits for this very thread);
    /// hand such work to another thread. Reading statuses and taking is fine.
    pub fn on_data_available(&self, mut f: impl FnMut(Sample<T>) + Send + 'static) {
        let codec = self.codec.clone();
        let core = self.core.clone();
        *lock(&self.core.listener) = Some(Box::new(move |info: &SampleInfo, src: &Src<'_>| {
            let mut buf = vec![0u8; src.payload_len()];
            src.read_payload(&mut buf);
            match (codec.decode)(&buf) {
                Ok(data) => f(Sample { data, info: *info }),
                Err(why) => core.reject(format!("sample {} of {}: {why}", info.seq, info.writer)),
            }
        }));
    }

    /// Calls `f` with each sample where it lies (its slot, for live samples), with
    /// no copy until the callback reads it ([`SampleRef::word`],
    /// [`SampleRef::read_pod`], [`SampleRef::get`]). Same rules as
    /// [`DataReader::on_data_available`].
    pub fn on_sample_in_place(&self, mut f: impl FnMut(&SampleRef<'_, T>) + Send + 'static) {
        let codec = self.codec.clone();
        *lock(&self.core.listener) = Some(Box::new(move |info: &SampleInfo, src: &Src<'_>| {
            f(&SampleRef { info, src, codec: &codec });
        }));
    }

    /// Removes the listener; samples queue again.
    pub fn clear_listener(&self) {
        *lock(&self.core.listener) = None;
    }

    /// The counters so far.
    pub fn status(&self) -> ReaderStatus {
        let mut s = lock(&self.core.q).status.clone();
        s.received += self.core.taken_by_listener.load(sst::sync::atomic::Ordering::Relaxed);
        s
    }

    /// Writers whose offer does not meet this reader's request (their samples are
    /// not delivered to it).
    pub fn incompatible_qos(&self) -> IncompatibleQos {
        lock(&self.core.q).status.incompatible.clone()
    }

    /// Why the late join's history did not arrive, if it did not.
    pub fn catch_up_failed(&self) -> Option<String> {
        lock(&self.topic.catch_up_failed).clone()
    }

    /// The topic's name.
    pub fn topic_name(&self) -> &str {
        &self.topic.name
    }
}

impl<T> Drop for DataReader<T> {
    fn drop(&mut self) {
        lock(&self.topic.inner).readers.retain(|r| !Arc::ptr_eq(r, &self.core));
        self.p.remove_endpoint(&self.topic.name, false, self.core.id);
    }
}
