//! The view-change side of the core (Derecho TOCS §4.2): the wedge that freezes it,
//! the counts the ragged trim is computed from, delivery exactly up to a cut, and
//! this node's own discarded messages for sending again.

use super::{parse_header, Deliverable, SmcCore};
use crate::spec::{Mode, HEADER};
use thiserror::Error;

impl SmcCore {
    /// Freezes the core for a view change: no more reservations, nulls, sends,
    /// receipts or stable deliveries in this view, so `received` stays what was last
    /// pushed; sets the `wedged` flag (push [`SmcCore::wedged_push`] to tell the
    /// others, after every earlier push). What remains is delivered with
    /// [`SmcCore::take_up_to_cut`].
    pub fn wedge(&mut self) {
        self.wedged = true;
        if let Some(s) = &self.send {
            s.wedge();
        }
        self.row.set(self.lay.wedged);
    }

    /// The push that publishes the `wedged` flag.
    pub fn wedged_push(&self) -> spindle_sst::Push {
        self.row.push(self.lay.wedged.range())
    }

    /// True once member `rank` has wedged.
    pub fn member_wedged(&self, rank: usize) -> bool {
        self.table.flag(rank, self.lay.wedged)
    }

    /// This node's `received` counts per sender (indices), for the ragged trim.
    pub fn received(&self) -> &[u64] {
        &self.recv
    }

    /// This node's `delivered` counts per sender (indices).
    pub fn delivered(&self) -> &[u64] {
        &self.deliv
    }

    /// Member `rank`'s `delivered` counts summed over every sender: how many of
    /// this view's messages it delivered, as its row says here.
    pub fn member_delivered_total(&self, rank: usize) -> u64 {
        (0..self.deliv.len()).map(|r| self.table.counter_at(rank, self.lay.delivered, r)).sum()
    }

    /// Member `rank`'s `received` count for sender `r`.
    pub fn member_received(&self, rank: usize, r: usize) -> u64 {
        self.table.counter_at(rank, self.lay.received, r)
    }

    /// After a wedge: the batch of every undelivered message with index below
    /// `cut[r]` for its sender `r`, in round-robin order (ordered mode) or per sender
    /// (unordered). Indices at or beyond the cut are discarded. Errors if this node
    /// lacks an index below the cut (the cut must come from received counts).
    pub fn take_up_to_cut(&mut self, cut: &[u64]) -> Result<Deliverable, CutError> {
        let s = self.spec.senders.len();
        if cut.len() != s {
            return Err(CutError::Length { want: s, got: cut.len() });
        }
        if let Some(r) = (0..s).find(|&r| self.recv[r] < cut[r]) {
            return Err(CutError::Missing { sender: r, have: self.recv[r], cut: cut[r] });
        }
        if self.delivering {
            return Err(CutError::Delivering);
        }
        let mut msgs = Vec::new();
        let mut upto = self.deliv.clone();
        let mut next_seq = self.next_seq;
        if self.spec.mode == Mode::Unordered {
            // Per sender, in sender order: unordered delivery promises no more.
            self.take_unordered(Some(cut), usize::MAX, &mut upto, &mut next_seq, &mut msgs);
            return Ok(self.hand_out(msgs, upto, next_seq));
        }
        let mut cursor = vec![0usize; s];
        let mut remaining: u64 = (0..s).map(|r| cut[r].saturating_sub(self.deliv[r])).sum();
        while remaining > 0 {
            let r = (next_seq % s as u64) as usize;
            let k = next_seq / s as u64;
            next_seq += 1;
            if k < upto[r] || k >= cut[r] {
                continue;
            }
            self.take_position(r, k, next_seq - 1, &mut cursor, &mut upto, &mut msgs);
            remaining -= 1;
        }
        Ok(self.hand_out(msgs, upto, next_seq))
    }

    /// This node's own messages with index `cut` or later, in order: the ones a view
    /// change discarded, which the runtime sends again in the next view. Takes in a
    /// message published meanwhile first. Every such message is still in its slot,
    /// since a slot is only reused once its message was delivered everywhere.
    pub fn own_messages_from(&mut self, cut: u64) -> Vec<Vec<u8>> {
        self.absorb();
        let w = self.spec.window as u64;
        let me = self.table.my_rank();
        let mut out = Vec::new();
        for e in self.committed.saturating_sub(w)..self.committed {
            let base = (e % w) as usize * self.lay.slot_bytes;
            let (data, _) = parse_header(self.table.word(me, self.lay.slots, base / 8));
            let first = self.table.word(me, self.lay.slots, base / 8 + 1);
            if let (Some(len), true) = (data, first >= cut) {
                let mut buf = vec![0u8; len];
                match self.own_large(e) {
                    // A large message's room is freed only once it is delivered
                    // everywhere too, so its payload is still there.
                    Some((at, _)) => self.table.read_bytes(me, self.lay.arena, at, &mut buf),
                    None => self.table.read_bytes(me, self.lay.slots, base + HEADER, &mut buf),
                }
                out.push(buf);
            }
        }
        out
    }

    /// After [`SmcCore::wedge`]: true once every entry a sender claimed is taken
    /// in (takes in what was published since). A sender that claimed before the
    /// wedge publishes without waiting for anything, so this comes true soon; until
    /// it does, [`SmcCore::own_messages_from`] would miss that message and the ones
    /// after it.
    pub fn claims_settled(&mut self) -> bool {
        self.absorb();
        self.send.as_ref().map_or(true, |s| s.claimed() == self.committed)
    }

    /// True while a delivery batch is out (between take and finish).
    pub fn is_delivering(&self) -> bool {
        self.delivering
    }
}

/// A cut this node cannot deliver to.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CutError {
    /// One count per sender is needed.
    #[error("cut has {got} entries, the subgroup has {want} senders")]
    Length {
        /// Senders.
        want: usize,
        /// Entries given.
        got: usize,
    },
    /// This node has not received up to the cut.
    #[error("sender {sender}: have {have} indices, cut is {cut}")]
    Missing {
        /// Sender rank.
        sender: usize,
        /// Received here.
        have: u64,
        /// The cut.
        cut: u64,
    },
    /// A batch is still being delivered.
    #[error("a delivery batch is still open")]
    Delivering,
}
