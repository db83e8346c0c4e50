//! Several samples in one call: consecutive small samples go out packed into one
//! multicast message (a pack; see [`crate::sample`]), so the multicast's cost per
//! message is paid once for all of them.

use super::sending::WORD;
use super::DataWriter;
use crate::instance::{prefix, InstanceHandle, Kind};
use crate::sample::{header_word, HEADER};
use crate::DdsError;
use spindle_sst::sync::lock;
use std::ops::Range;

/// The samples of one call laid out as a pack holds them, one after the other:
/// each one's length word, its header (filled in when it is sent) and its body
/// (an instance prefix first on a keyed topic), padded to a whole word. Kept by
/// the writer from call to call, so that its buffers are allocated once.
#[derive(Debug, Default)]
pub(super) struct Encoded {
    bytes: Vec<u8>,
    parts: Vec<Part>,
}

#[derive(Debug)]

struct Part {
    /// Where it starts in `bytes` (its length word) and where the next one does.
    at: Range<usize>,
    /// Its body in `bytes`.
    body: Range<usize>,
    instance: InstanceHandle,
}

impl<T> DataWriter<T> {
    /// Writes `samples` in order, as [`DataWriter::write`] would one by one, but
    /// packs consecutive samples that fit a slot together into one message of the
    /// topic: far fewer messages for small samples, so a higher rate. Each sample
    /// keeps its own number (returned, as the range from the first sample's to
    /// the last's: contiguous unless another thread writes through this writer at
    /// the same time) and reaches every reader as if written alone; the samples
    /// of one call share its source timestamp. Waits for room like `write`. A
    /// sample that does not encode or is too large fails the call before anything
    /// is sent; a send that fails (no room within the writer's wait, say) leaves
    /// the samples before it sent.
    ///
    /// ```no_run
    /// # fn f(w: &spindle_dds::DataWriter<u64>) -> Result<(), spindle_dds::DdsError> {
    /// let numbers = w.write_batch(&[1, 2, 3, 4])?;
    /// assert_eq!(numbers.end - numbers.start, 4);
    /// # Ok(()) }
    /// ```
    pub fn write_batch(&self, samples: &[T]) -> Result<Range<u64>, DdsError> {
        let mut enc = lock(&self.batch);
        self.encode_all(samples, &mut enc)?;
        let mut numbers: Option<Range<u64>> = None;
        let budget = self.topic.qos.max_msg();
        // The writer's clock, as `write` stamps (its lock is taken again per pack).
        let now = lock(&self.sending).clock.now_ns();
        let mut i = 0;
        while i < enc.parts.len() {
            // As many as fit one slot, from `i` on.
            let start = enc.parts[i].at.start;
            let mut j = i;
            while j < enc.parts.len() && WORD + enc.parts[j].at.end - start <= budget {
                j += 1;
            }
            let sent = if j <= i + 1 {
                // One alone (or one too large for a pack): sent as `write` sends it.
                let body = &enc.bytes[enc.parts[i].body.clone()];
                let seq = self.send_built(body.len(), self.waits(), |s| s.write(0, body))?;
                j = i + 1;
                seq..seq + 1
            } else {
                self.send_pack(&mut enc, i..j, now)?
            };
            numbers = Some(numbers.map_or(sent.clone(), |n| n.start..sent.end));
            for p in &enc.parts[i..j] {
                self.noted(p.instance);
            }
            i = j;
        }
        Ok(numbers.unwrap_or_else(|| {
            let next = lock(&self.sending).sent + 1;
            next..next
        }))
    }

    /// Lays every sample out as a pack would hold it (each checked against the
    /// topic's limit) before anything is sent.
    fn encode_all(&self, samples: &[T], enc: &mut Encoded) -> Result<(), DdsError> {
        let max = self.topic.qos.max_sample_bytes as usize;
        enc.bytes.clear();
        enc.parts.clear();
        for s in samples {
            let instance = self.codec.instance_of(s)?;
            let at = enc.bytes.len();
            enc.bytes.resize(at + WORD + HEADER, 0);
            if self.codec.key.is_some() {
                for w in prefix(instance, Kind::Data) {
                    enc.bytes.extend_from_slice(&w.to_le_bytes());
                }
            }
            // Straight into the layout: no copy through the writer's buffer.
            (self.codec.encode)(s, &mut enc.bytes)?;
            let body = at + WORD + HEADER..enc.bytes.len();
            if body.len() > max {
                return Err(DdsError::TooLarge { len: body.len(), max });
            }
            enc.bytes[at..at + WORD].copy_from_slice(&((HEADER + body.len()) as u64).to_le_bytes());
            enc.bytes.resize(enc.bytes.len().div_ceil(WORD) * WORD, 0);
            enc.parts.push(Part { at: at..enc.bytes.len(), body, instance });
        }
        Ok(())
    }

    /// Sends samples `which` of `enc` as one pack, numbered on from this writer's
    /// last number, stamped `now` (nanoseconds since the epoch); returns their
    /// numbers.
    fn send_pack(&self, enc: &mut Encoded, which: Range<usize>, now: u64) -> Result<Range<u64>, DdsError> {
        let wait = self.waits();
        let mut one = self.sending(wait)?;
        let first = one.sent + 1;
        for (k, p) in enc.parts[which.clone()].iter().enumerate() {
            let h = p.at.start + WORD;
            enc.bytes[h..h + 8].copy_from_slice(&header_word(self.id, first + k as u64).to_le_bytes());
            enc.bytes[h + 8..h + 16].copy_from_slice(&now.to_le_bytes());
        }
        let parts = &enc.bytes[enc.parts[which.start].at.start..enc.parts[which.end - 1].at.end];
        let n = which.len();
        one.send_parts(&self.p.group, |v| self.topic.subgroup_in(v), n as u32, parts, wait.room, wait.view)?;
        Ok(first..first + n as u64)
    }
}
