//! Writer batching: with it on ([`DataWriter::set_batching`]), each write joins
//! the writer's open pack (see [`crate::sample`]), numbered and stamped as it
//! joins, and the pack goes out as one multicast message when the next sample
//! does not fit it, at [`DataWriter::flush`], before any other send of the
//! writer, when the writer waits for delivery or is dropped, and, with a delay,
//! by the process's flusher thread once the delay has passed (`super::flusher`).

use super::sending::{Batching, Sending, WORD};
use super::{flusher, DataWriter, Wait};
use crate::sample::{header_word, HEADER};
use crate::DdsError;
use spindle_sst::sync::lock;
use std::sync::Arc;
use std::time::Instant;

impl<T> DataWriter<T> {
    /// Sets how this writer batches (off by default). With batching, [`write`]
    /// and a [`Loan`]'s write (and, on a keyed topic, `dispose` and
    /// `unregister`) do not send: each sample joins the writer's open pack,
    /// which goes out as one message of the topic once the next sample does not
    /// fit in a slot beside it, at [`DataWriter::flush`], before any other send
    /// of this writer ([`write_batch`], [`write_in_place`], a sample too large
    /// for a pack), when the writer waits for delivery or is dropped, and with
    /// [`Batching::Within`] once its delay has passed (a thread of the process
    /// looks at packs whose delay is up; it sleeps while no pack waits). Small
    /// samples then cost the multicast one message per pack instead of one each
    /// (a 1 KB slot holds six samples of 128 B), at the price of latency: a
    /// sample waits in the writer up to the delay, or with
    /// [`Batching::UntilFlushed`] **until something above sends its pack**.
    ///
    /// A write returns the sample's number when it joins the pack (numbers stay
    /// dense and in the order of the writes). Sending a full pack waits for room
    /// as `write` does; if that fails (no room within the writer's wait, the
    /// group stopped), the write that needed the room fails and takes no number,
    /// and the pack stays, to go out at the next send that succeeds
    /// ([`DataWriter::try_write`] and [`DataWriter::write_async`] join the pack
    /// too, and find no room only when a full pack cannot be sent at once; the
    /// flusher thread never waits for room, and tries again a delay later).
    /// A change of the setting sends the open pack first (and fails, with the
    /// setting unchanged, if that fails). Clients' writers do not batch.
    ///
    /// ```no_run
    /// # fn f(w: &spindle_dds::DataWriter<u64>) -> Result<(), spindle_dds::DdsError> {
    /// use spindle_dds::Batching;
    /// use std::time::Duration;
    /// w.set_batching(Batching::Within(Duration::from_millis(1)))?;
    /// for t in 0..1_000u64 {
    ///     w.write(&t)?;
    /// }
    /// w.flush()?; // the last pack now, not within the millisecond
    /// # Ok(()) }
    /// ```
    ///
    /// [`write`]: DataWriter::write
    /// [`Loan`]: crate::Loan
    /// [`write_batch`]: DataWriter::write_batch
    /// [`write_in_place`]: DataWriter::write_in_place
    pub fn set_batching(&self, batching: Batching) -> Result<(), DdsError> {
        let mut one = lock(&self.sending);
        self.flush_held(&mut one, self.waits())?;
        if let Batching::Within(_) = batching {
            flusher::start()?;
        }
        one.batching = batching;
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
        if one.pending.n == 0 {
            if let Batching::Within(delay) = one.batching {
                let now = Instant::now();
                one.pending.opened_at = Some(now);
                if !one.reminded {
                    let target = self.flush_target.get_or_init(|| {
                        Arc::new(flusher::Target {
                            p: Arc::downgrade(&self.p),
                            topic: Arc::downgrade(&self.topic),
                            sending: Arc::downgrade(&self.sending),
                        })
                    });
                    one.reminded = flusher::remind(now, delay, target);
                }
            }
        }
        let seq = one.sent + one.pending.n as u64 + 1;
        let header = [header_word(self.id, seq), one.clock.now_ns()];
        one.pending.push(header, prefix, body);
        Ok(Some(seq))
    }

    /// Sends the open pack, if any: its samples become this writer's last sent.
    pub(super) fn flush_held(&self, one: &mut Sending, wait: Wait) -> Result<(), DdsError> {
        Ok(one.send_pack(&self.p.group, |v| self.topic.subgroup_in(v), wait.room, wait.view)?)
    }
}
