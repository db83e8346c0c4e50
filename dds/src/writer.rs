//! DataWriter: serializes (or copies a Pod) into a slot of the topic's subgroup,
//! behind a 16-byte header; loans for Pod topics.

use crate::qos::Level;
use crate::sample::{header, Codec, HEADER};
use crate::topic::TopicState;
use crate::{DdsError, IncompatibleQos, Participant};
use sst::sync::atomic::{AtomicU64, Ordering};
use sst::sync::lock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Writes samples of one topic (see [`crate::DomainParticipant::create_writer`]).
/// Dropping it waits (up to 5 s) until its samples are delivered here, then
/// removes it from the domain.
pub struct DataWriter<T> {
    pub(crate) p: Arc<Participant>,
    pub(crate) topic: Arc<TopicState>,
    pub(crate) id: u32,
    pub(crate) level: Level,
    pub(crate) codec: Codec<T>,
    pub(crate) seq: AtomicU64,
    pub(crate) buf: Mutex<Vec<u8>>,
}

impl<T> std::fmt::Debug for DataWriter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataWriter").field("topic", &self.topic.name).field("id", &self.id).finish()
    }
}

impl<T> DataWriter<T> {
    /// Sends `payload` (already serialized) as this writer's next sample.
    fn send_bytes(&self, payload: &[u8]) -> Result<u64, DdsError> {
        self.send_built(payload.len(), |s| s.write(0, payload))
    }

    /// Sends a `len`-byte serialized sample that `build` writes in place.
    fn send_built(&self, len: usize, build: impl Fn(&mut SampleSlot<'_, '_>)) -> Result<u64, DdsError> {
        let max = self.topic.qos.max_sample_bytes as usize;
        if len > max {
            return Err(DdsError::TooLarge { len, max });
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let [h0, h1] = header(self.id, seq, SystemTime::now());
        self.p.group.send_where(
            |v| self.topic.subgroup_in(v),
            HEADER + len,
            |slot| {
                slot.write_word(0, h0);
                slot.write_word(1, h1);
                build(&mut SampleSlot { slot, len });
            },
        )?;
        Ok(seq)
    }

    /// Writes one sample; returns its sequence number. Waits while the window is
    /// full or a view change is under way.
    pub fn write(&self, sample: &T) -> Result<u64, DdsError> {
        let mut buf = lock(&self.buf);
        (self.codec.encode)(sample, &mut buf).map_err(DdsError::Encode)?;
        self.send_bytes(&buf)
    }

    /// Readers whose request this writer's offer does not meet.
    pub fn incompatible_qos(&self) -> IncompatibleQos {
        lock(&self.topic.writer_incompatible).get(&self.id).cloned().unwrap_or_default()
    }

    /// Waits up to `timeout` until every sample written so far is delivered at this
    /// participant (for ordered levels: stable and delivered everywhere it goes).
    pub fn wait_for_delivery(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let last = self.seq.load(Ordering::Relaxed);
        let mut g = lock(&self.topic.inner);
        loop {
            if g.writers.get(&self.id).map_or(true, |w| w.delivered >= last) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.p.group.stopped().is_some() {
                return false;
            }
            g = self
                .topic
                .delivered
                .wait_timeout(g, left.min(Duration::from_millis(100)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
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
        self.send_built(len, build)
    }
}

/// A sample being written in place (see [`DataWriter::write_in_place`]). Offsets are
/// within the sample.
pub struct SampleSlot<'a, 'b> {
    slot: &'a mut smc::runtime::SendSlot<'b>,
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
        self.writer.send_bytes(bytemuck::bytes_of(&self.value))
    }
}

impl<T> Drop for DataWriter<T> {
    fn drop(&mut self) {
        if self.p.group.stopped().is_none() {
            self.wait_for_delivery(Duration::from_secs(5));
        }
        lock(&self.topic.inner).writers.remove(&self.id);
        self.p.remove_endpoint(&self.topic.name, true, self.id);
    }
}
