//! Writer batching: with it on ([`DataWriter::set_batching`]), each write joins
//! the writer's open pack (see [`crate::sample`]), numbered and stamped as it
//! joins, and the pack goes out as one multicast message when the next sample
//! does not fit it, at [`DataWriter::flush`], before any other send of the
//! writer, and when the writer waits for delivery or is dropped.

use super::{DataWriter, Sending, Wait};
use crate::sample::{header_word, pack_word, HEADER};
use crate::DdsError;
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::sync::lock;

/// A pack's first word, and each sample's length word.
const WORD: usize = 8;

/// The samples written since the last send, laid out as their pack holds them:
/// each one's length word, its header and its body, padded to a whole word.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    bytes: Vec<u8>,
    n: u32,
}

impl Pending {
    fn push(&mut self, header: [u64; 2], prefix: Option<[u64; 2]>, body: &[u8]) {
        let [h0, h1] = header;
        let words = match prefix {
            Some([p0, p1]) => [HEADER as u64 + 2 * WORD as u64 + body.len() as u64, h0, h1, p0, p1],
            None => [(HEADER + body.len()) as u64, h0, h1, 0, 0],
        };
        let words = &words[..if prefix.is_some() { 5 } else { 3 }];
        let at = self.bytes.len();
        let head = at + words.len() * WORD;
        // Sized once (the padding zeroed with it), then filled.
        self.bytes.resize((head + body.len()).div_ceil(WORD) * WORD, 0);
        for (i, w) in words.iter().enumerate() {
            self.bytes[at + i * WORD..at + (i + 1) * WORD].copy_from_slice(&w.to_le_bytes());
        }
        self.bytes[head..head + body.len()].copy_from_slice(body);
        self.n += 1;
    }
}

impl<T> DataWriter<T> {
    /// Turns writer batching on or off (off by default). With it on, [`write`] and
    /// a [`Loan`]'s write (and, on a keyed topic, `dispose` and `unregister`) do
    /// not send: each sample joins the writer's open pack, which goes out as one
    /// message of the topic once the next sample does not fit in a slot beside
    /// it, at [`DataWriter::flush`], before any other send of this writer
    /// ([`write_batch`], [`write_in_place`], a sample too large for a pack), and
    /// when the writer waits for delivery or is dropped. Small samples then cost
    /// the multicast one message per pack instead of one each (a 1 KB slot holds
    /// six samples of 128 B), at the price of latency: **a sample waits in the
    /// writer until something above sends its pack**; no timer does. For bursts
    /// of small samples whose writer flushes at the end of each.
    ///
    /// A write returns the sample's number when it joins the pack (numbers stay
    /// dense and in the order of the writes). Sending a full pack waits for room
    /// as `write` does; if that fails (no room within the writer's wait, the
    /// group stopped), the write that needed the room fails and takes no number,
    /// and the pack stays, to go out at the next send that succeeds. Turning
    /// batching off sends the pack first (and fails, still on, if that fails).
    ///
    /// ```no_run
    /// # fn f(w: &spindle_dds::DataWriter<u64>) -> Result<(), spindle_dds::DdsError> {
    /// w.set_batching(true)?;
    /// for t in 0..1_000u64 {
    ///     w.write(&t)?;
    /// }
    /// w.flush()?;
    /// # Ok(()) }
    /// ```
    ///
    /// [`write`]: DataWriter::write
    /// [`Loan`]: crate::Loan
    /// [`write_batch`]: DataWriter::write_batch
    /// [`write_in_place`]: DataWriter::write_in_place
    pub fn set_batching(&self, on: bool) -> Result<(), DdsError> {
        let mut one = lock(&self.sending);
        if !on {
            self.flush_held(&mut one, self.waits())?;
        }
        one.batching = on;
        Ok(())
    }

    /// Sends the samples that batching holds, as one message (waiting for room as
    /// `write` does); `Ok` at once if there are none.
    pub fn flush(&self) -> Result<(), DdsError> {
        self.flush_held(&mut lock(&self.sending), self.waits())
    }

    /// How many written samples batching holds, not yet sent.
    pub fn unsent(&self) -> usize {
        lock(&self.sending).pending.n as usize
    }

    /// Adds a `body` (behind `prefix` on a keyed topic) to the open pack, sending
    /// the pack first if the sample does not fit beside it; its number, or `None`
    /// once the pack is sent if the sample does not fit a pack even alone (then it
    /// goes out by itself). Kept out of line: the path of a writer that does not
    /// batch only tests whether to call it.
    #[inline(never)]
    pub(super) fn join_pack(
        &self,
        one: &mut Sending,
        prefix: Option<[u64; 2]>,
        body: &[u8],
        wait: Wait,
    ) -> Result<Option<u64>, DdsError> {
        let len = prefix.map_or(0, |_| 2 * WORD) + body.len();
        let max = self.topic.qos.max_sample_bytes as usize;
        if len > max {
            return Err(DdsError::TooLarge { len, max });
        }
        let part = WORD + (HEADER + len).div_ceil(WORD) * WORD;
        let budget = self.topic.qos.max_msg();
        if WORD + part > budget {
            self.flush_held(one, wait)?;
            return Ok(None);
        }
        if WORD + one.pending.bytes.len() + part > budget {
            self.flush_held(one, wait)?;
        }
        let seq = self.seq.load(Ordering::Relaxed) + one.pending.n as u64 + 1;
        let header = [header_word(self.id, seq), one.clock.now_ns()];
        one.pending.push(header, prefix, body);
        Ok(Some(seq))
    }

    /// Sends the open pack, if any: its samples become this writer's last sent.
    pub(super) fn flush_held(&self, one: &mut Sending, wait: Wait) -> Result<(), DdsError> {
        let Sending { cache, pending, .. } = one;
        let n = pending.n;
        if n == 0 {
            return Ok(());
        }
        let bytes = &pending.bytes;
        self.p.group.send_cached(
            cache,
            |v| self.topic.subgroup_in(v),
            WORD + bytes.len(),
            |slot| {
                slot.write_word(0, pack_word(n));
                slot.write(WORD, bytes);
            },
            wait.room,
            wait.view,
        )?;
        self.seq.store(self.seq.load(Ordering::Relaxed) + n as u64, Ordering::Relaxed);
        pending.bytes.clear();
        pending.n = 0;
        Ok(())
    }
}
