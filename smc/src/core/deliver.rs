//! The delivery stage: what is stable (ordered) or received (unordered) handed out as
//! one batch, then `delivered` pushed once the upcall returned.

use super::*;
use crate::spec::HEADER;
use spindle_sst::table::RowArea;

/// The vectors a delivery pass works in (see [`SmcCore::take_deliverable`]).
#[derive(Debug, Default)]
pub(super) struct Scratch {
    /// Per sender: the count every member received (the stable prefix).
    pub(super) stable: Vec<u64>,
    /// Per sender: the pending entry the pass stands at.
    pub(super) cursor: Vec<usize>,
    /// Per sender: the delivered count once the batch is delivered.
    pub(super) upto: Vec<u64>,
}

/// The bytes of messages after which a batch is closed. A batch is one upcall on
/// the predicate thread, which also beats the heartbeat and sends: large messages
/// (an upcall may read every byte) go a few megabytes per pass, so a backlog of
/// them never holds the thread for long.
pub(crate) const BATCH_BYTES: usize = 4 << 20;

/// The fewest messages an ordered batch is cut to (see `SmcCore::batch_most`): a
/// window of up to this many is never cut. Cut to 64, batches of 1 KB messages
/// (windows of 256) lost a fifth of their rate, raw and DDS, shm and tcp.
pub(crate) const BATCH_MIN: usize = 256;

impl SmcCore {
    /// Takes what is deliverable now as one batch: everything, or as much as fills
    /// `BATCH_BYTES` (4 MiB; at least one message) or, ordered, a quarter of the
    /// window (at least 256 messages), the rest going in the next batch. Call
    /// [`SmcCore::finish`] with it after the upcall; until then no other batch is
    /// handed out.
    pub fn take_deliverable(&mut self) -> Option<Deliverable> {
        if self.delivering || self.wedged {
            return None;
        }
        let s = self.spec.senders.len() as u64;
        // The last batch's vector, emptied by `finish`: no allocation per batch.
        let mut msgs = std::mem::take(&mut self.spare);
        // The vectors of the pass are kept from pass to pass (the predicate thread
        // looks on every pass, most of which deliver little or nothing).
        let mut upto = std::mem::take(&mut self.scratch.upto);
        upto.clear();
        upto.extend_from_slice(&self.deliv);
        let mut next_seq = self.next_seq;
        match self.spec.mode {
            Mode::Ordered => {
                let mut stable = std::mem::take(&mut self.scratch.stable);
                stable.clear();
                stable.extend((0..s as usize).map(|r| {
                    (0..self.table.rows()).map(|m| self.table.counter_at(m, self.lay.received, r)).min().unwrap_or(0)
                }));
                #[cfg(any(test, loom))]
                if self.faults.deliver_unstable {
                    stable.clone_from(&self.recv);
                }
                let mut cursor = std::mem::take(&mut self.scratch.cursor);
                cursor.clear();
                cursor.resize(s as usize, 0);
                // Position (r, k) of `next_seq`, stepped without a division per message.
                let (mut r, mut k) = ((next_seq % s) as usize, next_seq / s);
                let mut bytes = 0;
                let most = self.batch_most();
                if s == 1 {
                    // One sender: its positions are its indices, in its entries' order.
                    self.take_one_sender(stable[0], most, &mut next_seq, &mut upto[0], &mut msgs);
                    k = stable[0];
                }
                while stable[r] > k && bytes < BATCH_BYTES && msgs.len() < most {
                    let before = msgs.len();
                    self.take_position(r, k, next_seq, &mut cursor, &mut upto, &mut msgs);
                    bytes += msgs.get(before).map_or(0, MsgRef::len);
                    next_seq += 1;
                    r += 1;
                    if r == s as usize {
                        (r, k) = (0, k + 1);
                    }
                }
                self.scratch.stable = stable;
                self.scratch.cursor = cursor;
            }
            Mode::Unordered => self.take_unordered(None, BATCH_BYTES, &mut upto, &mut next_seq, &mut msgs),
        }
        if upto == self.deliv {
            self.spare = msgs;
            self.scratch.upto = upto;
            return None;
        }
        Some(self.hand_out(msgs, upto, next_seq))
    }

    /// Unordered delivery: every pending message with index below `cut[r]` (all of
    /// them without a cut), per sender in sender order, until the messages taken
    /// hold `most` bytes.
    pub(super) fn take_unordered(
        &self,
        cut: Option<&[u64]>,
        most: usize,
        upto: &mut [u64],
        next_seq: &mut u64,
        msgs: &mut Vec<MsgRef>,
    ) {
        let mut bytes = 0;
        for (r, pending) in self.pending.iter().enumerate() {
            let limit = cut.map_or(u64::MAX, |c| c[r]);
            let slots = self.table.area(self.sender_row[r], self.lay.slots);
            for e in pending.iter().take_while(|e| e.first < limit) {
                if bytes >= most {
                    return;
                }
                if e.plain() {
                    // A run may have been delivered in part, and may be cut.
                    let from = e.first.max(upto[r]);
                    let k = self.push_run(r, &slots, e, from, e.end.min(limit), *next_seq, (&mut bytes, most), msgs);
                    *next_seq += k - from;
                    upto[r] = k;
                    continue;
                }
                let before = msgs.len();
                self.push_refs(r, *e, e.first, *next_seq, msgs);
                if msgs.len() > before {
                    bytes += msgs[before..].iter().map(MsgRef::len).sum::<usize>();
                    *next_seq += 1;
                }
                upto[r] = e.end.min(limit);
            }
        }
    }

    /// The most messages an ordered batch takes: a quarter of the window (at least
    /// [`BATCH_MIN`]). A sender's slots come back only once every member delivered
    /// what they held, and a member says so after the batch's upcall; a batch of a
    /// whole window's messages, behind a slow upcall (a DDS topic's), left the
    /// sender with a full window until it ended. With batches of a quarter the
    /// delivered count goes out four times per window.
    fn batch_most(&self) -> usize {
        (self.spec.window / 4).max(BATCH_MIN)
    }

    /// Ordered delivery with one sender, whose index is the global sequence: the
    /// entries below `stable`, until `BATCH_BYTES` or `most` messages; `upto` and
    /// `next_seq` advance.
    fn take_one_sender(&self, stable: u64, most: usize, next_seq: &mut u64, upto: &mut u64, msgs: &mut Vec<MsgRef>) {
        let mut bytes = 0;
        let slots = self.table.area(self.sender_row[0], self.lay.slots);
        for e in self.pending[0].iter() {
            // A run of messages or nulls may have been delivered in part.
            let k = e.first.max(*next_seq);
            if k >= stable || bytes >= BATCH_BYTES || msgs.len() >= most {
                break;
            }
            if e.plain() {
                let to = e.end.min(stable).min(k + (most - msgs.len()) as u64);
                *next_seq = self.push_run(0, &slots, e, k, to, k, (&mut bytes, BATCH_BYTES), msgs);
            } else if e.kind != EntryKind::Null {
                let before = msgs.len();
                self.push_refs(0, *e, k, k, msgs);
                bytes += msgs.get(before).map_or(0, MsgRef::len);
                *next_seq = k + 1;
            } else {
                // Each index of a null run is a position, delivered as nothing.
                *next_seq = e.end.min(stable);
            }
            *upto = *next_seq;
        }
    }

    /// Ordered delivery of position `(r, k)` (global sequence `seq`): a message goes
    /// into `msgs`, a null is passed over; `upto[r]` and the pending cursor advance.
    #[inline]
    pub(super) fn take_position(
        &self,
        r: usize,
        k: u64,
        seq: u64,
        cursor: &mut [usize],
        upto: &mut [u64],
        msgs: &mut Vec<MsgRef>,
    ) {
        let e = self.pending[r][cursor[r]];
        debug_assert!(e.first <= k && k < e.end, "pending entry covers the next index");
        self.push_refs(r, e, k, seq, msgs);
        upto[r] = k + 1;
        if k + 1 == e.end {
            cursor[r] += 1;
        }
    }

    /// Adds where the messages of entry `e` of sender `r` sit to `msgs`: one, the
    /// pack's in order (all at `index` and `seq`), or none for a null run.
    #[inline]
    fn push_refs(&self, r: usize, e: Entry, index: u64, seq: u64, msgs: &mut Vec<MsgRef>) {
        let len = e.len as usize;
        let row = self.sender_row[r];
        // A run's later messages have their lengths in their slots; its first one,
        // like any single entry, in the entry (no area to locate).
        if e.plain() && index > e.first {
            let slots = self.table.area(row, self.lay.slots);
            self.push_run(r, &slots, &e, index, index + 1, seq, (&mut 0, usize::MAX), msgs);
            return;
        }
        let (area, at, large) = match e.kind {
            EntryKind::Null => return,
            EntryKind::Large => (self.lay.arena, e.at as usize, true),
            EntryKind::Slot => (self.lay.slots, e.at as usize * self.lay.slot_bytes + HEADER, false),
        };
        let one = |at, len| MsgRef::new(r, index, seq, row, at, len, large);
        if e.pack == 0 {
            return msgs.push(one(at, len));
        }
        // A pack: each message's length word, then its payload. The layout was
        // checked when the entry was received; the bounds are kept here all the
        // same (a sender that rewrote its slot since gets its messages cut, not a
        // read outside the pack).
        let slots = self.table.area(row, area);
        let (mut off, end) = (0usize, len);
        for _ in 0..e.pack {
            if off + 8 > end {
                break;
            }
            let n = (slots.word((at + off) / 8) as usize).min(end - off - 8);
            msgs.push(one(at + off + 8, n));
            off += 8 + n.div_ceil(8) * 8;
        }
    }

    /// Adds the messages `from..to` of run `e` of sender `r` (its slots are
    /// `slots`), at sequence numbers from `seq` on, while the bytes taken
    /// (`budget.0`) are below `budget.1`; returns the index after the last one
    /// added.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn push_run(
        &self,
        r: usize,
        slots: &RowArea<'_>,
        e: &Entry,
        from: u64,
        to: u64,
        seq: u64,
        budget: (&mut usize, usize),
        msgs: &mut Vec<MsgRef>,
    ) -> u64 {
        debug_assert!(e.plain() && e.first <= from && to <= e.end, "a part of a run");
        let (window, slot_bytes, row) = (self.spec.window, self.lay.slot_bytes, self.sender_row[r]);
        let (bytes, most) = budget;
        let mut slot = (e.at as usize + (from - e.first) as usize) % window;
        let mut k = from;
        while k < to && *bytes < most {
            let at = slot * slot_bytes;
            // Checked when the entry was received; kept inside a slot's message all
            // the same (a sender that rewrote its slot since gets its message cut,
            // not a read outside the slot).
            let len = match k == e.first {
                true => e.len as usize,
                false => ((slots.word(at / 8) >> 32) as usize).min(self.spec.max_msg),
            };
            msgs.push(MsgRef::new(r, k, seq + (k - from), row, at + HEADER, len, false));
            *bytes += len;
            k += 1;
            slot = if slot + 1 == window { 0 } else { slot + 1 };
        }
        k
    }

    /// Marks a batch as out (until [`SmcCore::finish`]) and wraps it for the upcall.
    pub(super) fn hand_out(&mut self, msgs: Vec<MsgRef>, upto: Vec<u64>, next_seq: u64) -> Deliverable {
        self.delivering = true;
        let batch = Batch { table: self.table.clone(), slots: self.lay.slots, arena: self.lay.arena, msgs };
        Deliverable { batch, upto, next_seq }
    }

    /// The push that publishes this node's `delivered` vector.
    pub fn delivered_push(&self) -> spindle_sst::Push {
        self.row.push(self.lay.delivered.range())
    }

    /// Records a batch as delivered (its upcall has returned) and pushes `delivered`.
    pub fn finish(&mut self, d: Deliverable, pushes: &mut Pushes) {
        debug_assert!(self.delivering, "finish without take_deliverable");
        for r in 0..self.deliv.len() {
            let done = self.pending[r].partition_point(|e| e.end <= d.upto[r]);
            self.pending[r].drain(..done);
            self.row.advance_at(self.lay.delivered, r, d.upto[r]).expect("delivered only grows");
        }
        let n = d.batch.len() as u64;
        self.stats.messages_delivered += n;
        if n > 0 {
            self.stats.deliver_batches.record(n);
        }
        let mut spare = d.batch.msgs;
        spare.clear();
        self.spare = spare;
        self.scratch.upto = std::mem::replace(&mut self.deliv, d.upto);
        self.next_seq = d.next_seq;
        self.delivering = false;
        pushes.push(self.row.push(self.lay.delivered.range()));
    }

    // ------------------------------------------------------------------ the pass
}
