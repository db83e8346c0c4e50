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
        let max = self.topic.qos.max_sample_bytes as usize;
        if payload.len() > max {
            return Err(DdsError::TooLarge { len: payload.len(), max });
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let [h0, h1] = header(self.id, seq, SystemTime::now());
        self.p.group.send_where(
            |v| self.topic.subgroup_in(v),
            HEADER + payload.len(),
            |slot| {
                slot.write_word(0, h0);
                slot.write_word(1, h1);
                slot.write(HEADER, payload);
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
