//! DataWriter: serializes (or copies a Pod) into a slot of the topic's subgroup,
//! behind a 16-byte header (and, on a keyed topic, the instance prefix); loans
//! for Pod topics; disposals; bounded and non-blocking writes.

use crate::instance::{prefix, InstanceHandle, Keyed, Kind, PREFIX};
use crate::participant::state::Participant;
use crate::qos::{Level, Qos, DEFAULT_MAX_BLOCKING};
use crate::sample::{header_word, Codec, HEADER};
use crate::status::DeadlineMissed;
use crate::topic::TopicState;
use crate::{DdsError, IncompatibleQos};
use spindle_sst::sync::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod batch;
mod common;
mod flusher;
mod pending;
mod room;
pub(crate) mod sending;

pub use common::Writer;
pub use sending::Batching;
use sending::Sending;

/// Writes samples of one topic (see [`crate::DomainParticipant::create_writer`]).
/// Dropping it sends what writer batching holds and waits (up to 5 s) until its
/// samples are delivered here, then removes it from the domain (a table edit, up
/// to 2 s more); its instances then have no writer of it at every reader.
pub struct DataWriter<T> {
    pub(crate) p: Arc<Participant>,
    pub(crate) topic: Arc<TopicState>,
    pub(crate) id: u32,
    pub(crate) level: Level,
    pub(crate) codec: Codec<T>,
    pub(crate) buf: Mutex<Vec<u8>>,
    /// Held while a sample is sent (its number is taken only once it is). Shared
    /// with the topic, which empties its cache when a view starts.
    sending: Arc<Mutex<Sending>>,
    /// What the pack flusher's reminders point at (made at the first one).
    flush_target: std::sync::OnceLock<Arc<flusher::Target>>,
    /// `write_batch`'s samples, laid out (its buffers kept from call to call).
    batch: Mutex<batch::Encoded>,
    max_block: Duration,
    /// With an offered deadline: each instance's last write, and periods counted.
    deadline: Option<(Duration, Mutex<Offered>)>,
}

/// A writer's offered-deadline bookkeeping.
#[derive(Debug, Default)]
struct Offered {
    last: HashMap<InstanceHandle, (Instant, u64)>,
    missed: DeadlineMissed,
}

/// How long a write waits: for room, and for a view with the topic.
#[derive(Clone, Copy)]
struct Wait {
    room: Option<Duration>,
    view: Option<Duration>,
}

impl<T> std::fmt::Debug for DataWriter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataWriter").field("topic", &self.topic.name).field("id", &self.id).finish()
    }
}

impl<T> DataWriter<T> {
    pub(crate) fn new(p: Arc<Participant>, topic: Arc<TopicState>, id: u32, qos: Qos, codec: Codec<T>) -> Self {
        let sending = Arc::new(Mutex::new(Sending::new()));
        topic.note_sender(&sending);
        DataWriter {
            p,
            topic,
            id,
            level: qos.level,
            codec,
            buf: Mutex::new(Vec::new()),
            sending,
            flush_target: Default::default(),
            batch: Mutex::default(),
            max_block: qos.max_blocking_time.unwrap_or(DEFAULT_MAX_BLOCKING),
            deadline: qos.deadline.map(|d| (d, Mutex::default())),
        }
    }

    fn waits(&self) -> Wait {
        Wait { room: Some(self.max_block), view: None }
    }

    /// Sends `payload` (already serialized) as this writer's next sample.
    fn send_bytes(&self, payload: &[u8], wait: Wait) -> Result<u64, DdsError> {
        self.send_body(None, payload, wait)
    }

    /// Sends `body` (behind `prefix` on a keyed topic) as this writer's next
    /// sample, or adds it to the open pack if batching is on.
    fn send_body(&self, prefix: Option<[u64; 2]>, body: &[u8], wait: Wait) -> Result<u64, DdsError> {
        let mut one = lock(&self.sending);
        if one.batching != Batching::Off {
            if let Some(seq) = self.join_pack(&mut one, prefix, body, wait)? {
                return Ok(seq);
            }
        }
        let at = if prefix.is_some() { PREFIX } else { 0 };
        self.send_built_in(&mut one, at + body.len(), wait, |s| {
            if let Some([p0, p1]) = prefix {
                s.write_word(0, p0);
                s.write_word(1, p1);
            }
            s.write(at, body);
        })
    }

    /// The send lock, taken after what batching holds is sent (so that whatever
    /// is sent under it goes out, and is numbered, after those samples).
    fn sending(&self, wait: Wait) -> Result<std::sync::MutexGuard<'_, Sending>, DdsError> {
        let mut one = lock(&self.sending);
        self.flush_held(&mut one, wait)?;
        Ok(one)
    }

    /// Sends a `len`-byte serialized sample that `build` writes in place.
    fn send_built(&self, len: usize, wait: Wait, build: impl Fn(&mut SampleSlot<'_, '_>)) -> Result<u64, DdsError> {
        self.send_built_in(&mut *self.sending(wait)?, len, wait, build)
    }

    /// [`DataWriter::send_built`] under the send lock, `one`, with no pack open.
    fn send_built_in(
        &self,
        one: &mut Sending,
        len: usize,
        wait: Wait,
        build: impl Fn(&mut SampleSlot<'_, '_>),
    ) -> Result<u64, DdsError> {
        let max = self.topic.qos.max_sample_bytes as usize;
        if len > max {
            return Err(DdsError::TooLarge { len, max });
        }
        // The number is taken only once the sample is sent: a write that found no
        // room leaves no gap in the writer's sequence.
        let Sending { sent, clock, cache, .. } = one;
        let seq = *sent + 1;
        let (h0, h1) = (header_word(self.id, seq), clock.now_ns());
        self.p.group.send_cached(
            cache,
            |v| self.topic.subgroup_in(v),
            HEADER + len,
            |slot| {
                slot.write_words(0, &[h0, h1]);
                build(&mut SampleSlot { slot, len });
            },
            wait.room,
            wait.view,
        )?;
        *sent = seq;
        Ok(seq)
    }

    /// Encodes `sample` and sends it as `kind` (a keyed topic's prefix first).
    fn send_sample(&self, sample: &T, kind: Kind, wait: Wait) -> Result<u64, DdsError> {
        let mut buf = lock(&self.buf);
        buf.clear();
        (self.codec.encode)(sample, &mut buf)?;
        if self.codec.key.is_none() {
            self.noted(InstanceHandle::NIL);
            return self.send_bytes(&buf, wait);
        }
        let h = self.codec.instance_of(sample)?;
        self.send_keyed(h, kind, &buf, wait)
    }

    /// Sends `body` behind a keyed prefix naming instance `h` and `kind`.
    fn send_keyed(&self, h: InstanceHandle, kind: Kind, body: &[u8], wait: Wait) -> Result<u64, DdsError> {
        let seq = self.send_body(Some(prefix(h, kind)), body, wait)?;
        self.noted(h);
        Ok(seq)
    }

    /// Writes one sample; returns its sequence number. Waits while the window is
    /// full, up to the writer's [`Qos::max_blocking_time`] (then
    /// [`DdsError::NoRoom`], nothing sent), and while a view change is under way
    /// (up to the group's send timeout).
    pub fn write(&self, sample: &T) -> Result<u64, DdsError> {
        self.send_sample(sample, Kind::Data, self.waits())
    }

    /// Writes one sample if it can be sent at once: [`DdsError::NoRoom`] if the
    /// window is full, [`DdsError::Send`] (`NotReady`) during a view change.
    /// Never blocks.
    pub fn try_write(&self, sample: &T) -> Result<u64, DdsError> {
        self.send_sample(sample, Kind::Data, Wait { room: Some(Duration::ZERO), view: Some(Duration::ZERO) })
    }

    /// Writes one sample, waiting for room without blocking a thread: the task
    /// sleeps and tries again as this writer's samples are delivered here (or
    /// every millisecond at most, for Unordered topics). Waits through view
    /// changes like `write`, but never past the writer's max_blocking_time for
    /// room. Any executor.
    pub async fn write_async(&self, sample: &T) -> Result<u64, DdsError> {
        let until = Instant::now() + self.max_block;
        loop {
            let seen = self.topic.delivered_count();
            match self.send_sample(sample, Kind::Data, Wait { room: Some(Duration::ZERO), view: None }) {
                Err(DdsError::NoRoom(_)) if Instant::now() < until => {
                    room::RoomFuture::new(&self.topic, seen).await;
                }
                Err(DdsError::NoRoom(_)) => return Err(DdsError::NoRoom(self.max_block)),
                other => return other,
            }
        }
    }

    /// Disposes the instance `sample`'s key names (only its key counts; readers
    /// get it with `valid_data` false): as DDS's `dispose(instance_data)`. Keyed
    /// topics only.
    pub fn dispose(&self, sample: &T) -> Result<u64, DdsError> {
        self.keyed()?;
        self.send_sample(sample, Kind::Dispose, self.waits())
    }

    /// Unregisters this writer from the instance `sample`'s key names: once no
    /// writer has it registered, readers see it with no writers. Keyed topics only.
    pub fn unregister(&self, sample: &T) -> Result<u64, DdsError> {
        self.keyed()?;
        self.send_sample(sample, Kind::Unregister, self.waits())
    }

    /// The instance of `sample` (its key's handle; `NIL` on an unkeyed topic).
    pub fn instance_of(&self, sample: &T) -> Result<InstanceHandle, DdsError> {
        Ok(self.codec.instance_of(sample)?)
    }

    fn keyed(&self) -> Result<(), DdsError> {
        match self.codec.key {
            Some(_) => Ok(()),
            None => Err(DdsError::NotKeyed(self.topic.name.clone())),
        }
    }

    /// Notes a write of instance `h` for the offered deadline.
    fn noted(&self, h: InstanceHandle) {
        if let Some((period, o)) = &self.deadline {
            let mut o = lock(o);
            o.count(*period);
            o.last.insert(h, (Instant::now(), 0));
        }
    }

    /// Deadline periods this writer missed: each whole period an instance it
    /// wrote went without a write (with an offered [`Qos::deadline`]).
    pub fn offered_deadline_missed(&self) -> DeadlineMissed {
        self.deadline.as_ref().map_or_else(DeadlineMissed::default, |(period, o)| {
            let mut o = lock(o);
            o.count(*period);
            o.missed
        })
    }

    /// Readers whose request this writer's offer does not meet.
    pub fn incompatible_qos(&self) -> IncompatibleQos {
        lock(&self.topic.writer_incompatible).get(&self.id).cloned().unwrap_or_default()
    }

    /// Waits up to `timeout` until every sample written so far is delivered at this
    /// participant (for ordered levels: stable and delivered everywhere it goes),
    /// sending first what writer batching holds ([`DataWriter::set_batching`];
    /// false if that fails).
    pub fn wait_for_delivery(&self, timeout: Duration) -> bool {
        let last = {
            let mut one = lock(&self.sending);
            if self.flush_held(&mut one, self.waits()).is_err() {
                return false;
            }
            one.sent
        };
        self.topic.wait_own(
            timeout,
            Duration::from_millis(100),
            |e| e.delivered(self.id).map_or(true, |d| d >= last),
            || self.p.group.stopped().is_some(),
        )
    }

    /// The writer's number in its participant.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The level it offers.
    pub fn level(&self) -> Level {
        self.level
    }
}

impl<T: Keyed> DataWriter<T> {
    /// Disposes the instance with `key` (no sample needed): readers show the
    /// disposal with their last sample of the instance (`valid_data` false), or
    /// only change its state if they never had one. Topics keyed by
    /// [`Keyed::key`] ([`crate::DomainParticipant::keyed_topic`]) only.
    pub fn dispose_key(&self, key: &T::Key) -> Result<u64, DdsError> {
        self.send_key(key, Kind::DisposeKey)
    }

    /// Unregisters this writer from the instance with `key` (as
    /// [`DataWriter::dispose_key`]).
    pub fn unregister_key(&self, key: &T::Key) -> Result<u64, DdsError> {
        self.send_key(key, Kind::UnregisterKey)
    }

    fn send_key(&self, key: &T::Key, kind: Kind) -> Result<u64, DdsError> {
        let bytes = key_bytes::<T>(&self.codec, &self.topic.name, key)?;
        self.send_keyed(InstanceHandle::of_key_bytes(&bytes), kind, &bytes, self.waits())
    }
}

/// The serialized `key` of topic `topic`, if it is keyed by [`Keyed::key`].
pub(crate) fn key_bytes<T: Keyed>(codec: &Codec<T>, topic: &str, key: &T::Key) -> Result<Vec<u8>, DdsError> {
    if codec.key.is_none() {
        return Err(DdsError::NotKeyed(topic.into()));
    }
    if codec.pod {
        return Err(DdsError::KeyedByBytes(topic.into()));
    }
    Ok(postcard::to_stdvec(key).map_err(crate::error::CodecError::Serde)?)
}

impl<T: bytemuck::Pod> DataWriter<T> {
    /// Lends a zeroed sample to fill; [`Loan::write`] sends it. For Pod topics only
    /// ([`crate::DomainParticipant::pod_topic`]). The memory rule of this project
    /// forbids references into shared slots, so the loan is filled in a private
    /// buffer and `write` copies it into the slot once, with word stores, as a raw
    /// group send does; no serialization happens.
    pub fn loan(&self) -> Result<Loan<'_, T>, DdsError> {
        if !self.codec.pod {
            return Err(DdsError::NotPod(self.topic.name.clone()));
        }
        if self.codec.key.is_some() {
            return Err(DdsError::Keyed(self.topic.name.clone()));
        }
        Ok(Loan { writer: self, value: T::zeroed() })
    }

    /// Writes a `len`-byte sample that `build` fills straight where readers will read
    /// it: a ring slot, or, past [`crate::Qos::slot_sample_bytes`], this writer's
    /// arena, which every member maps on shm (a true zero-copy loan of any size: the
    /// bytes are written once, by `build`, and read in place). For Pod topics; a
    /// sample's bytes are the value's, so readers use [`SampleRef::read_bytes`]
    /// (any length) or [`SampleRef::read_pod`] (exactly `size_of::<T>()`).
    /// `build` may run more than once when a view change interrupts the send.
    ///
    /// [`SampleRef::read_bytes`]: crate::reader::SampleRef::read_bytes
    /// [`SampleRef::read_pod`]: crate::reader::SampleRef::read_pod
    pub fn write_in_place(&self, len: usize, build: impl Fn(&mut SampleSlot<'_, '_>)) -> Result<u64, DdsError> {
        if !self.codec.pod {
            return Err(DdsError::NotPod(self.topic.name.clone()));
        }
        if self.codec.key.is_some() {
            return Err(DdsError::Keyed(self.topic.name.clone()));
        }
        self.send_built(len, self.waits(), build)
    }
}

/// A sample being written in place (see [`DataWriter::write_in_place`]). Offsets are
/// within the sample.
pub struct SampleSlot<'a, 'b> {
    slot: &'a mut spindle_smc::runtime::SendSlot<'b>,
    len: usize,
}

impl std::fmt::Debug for SampleSlot<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SampleSlot").field("len", &self.len).finish()
    }
}

impl SampleSlot<'_, '_> {
    /// Writes `data` at byte `at` (a multiple of 8) of the sample.
    pub fn write(&mut self, at: usize, data: &[u8]) {
        assert!(at + data.len() <= self.len, "write {at}+{} outside a {}-byte sample", data.len(), self.len);
        self.slot.write(HEADER + at, data);
    }
    /// Stores word `i` of the sample (bytes `8i..8i+8`, little-endian).
    pub fn write_word(&mut self, i: usize, value: u64) {
        assert!(i * 8 < self.len.div_ceil(8) * 8, "word {i} outside a {}-byte sample", self.len);
        self.slot.write_word(HEADER / 8 + i, value);
    }
    /// The sample's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for an empty sample.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A sample lent by [`DataWriter::loan`]: fill it through `Deref`, then `write` it.
pub struct Loan<'a, T: bytemuck::Pod> {
    writer: &'a DataWriter<T>,
    value: T,
}

impl<T: bytemuck::Pod> std::fmt::Debug for Loan<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loan").field("topic", &self.writer.topic.name).finish()
    }
}

impl<T: bytemuck::Pod> std::ops::Deref for Loan<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: bytemuck::Pod> std::ops::DerefMut for Loan<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: bytemuck::Pod> Loan<'_, T> {
    /// Sends the sample; returns its sequence number.
    pub fn write(self) -> Result<u64, DdsError> {
        self.writer.send_bytes(bytemuck::bytes_of(&self.value), self.writer.waits())
    }
}

impl<T> Drop for DataWriter<T> {
    fn drop(&mut self) {
        if self.p.group.stopped().is_none() {
            self.wait_for_delivery(Duration::from_secs(5));
        }
        lock(&self.topic.inner).engine.remove_writer(self.id);
        self.p.remove_endpoint(&self.topic.name, true, self.id);
    }
}

impl Offered {
    /// Counts the periods missed up to now.
    fn count(&mut self, period: Duration) {
        let now = Instant::now();
        for (h, (at, counted)) in self.last.iter_mut() {
            let periods = (now.duration_since(*at).as_nanos() / period.as_nanos().max(1)) as u64;
            if periods > *counted {
                self.missed.total_count += periods - *counted;
                self.missed.last_instance = *h;
                *counted = periods;
            }
        }
    }
}
