//! Stage 1: failure suspicion, gossip and the majority rule (Derecho TOCS §4.1).
//!
//! Suspicions are ORed across every row not suspected and never retracted. A
//! suspected row is frozen: this engine never reads it again, and the driver cuts the
//! node off at the transport so that none of its later writes land here.

use super::{Action, Engine, StopReason};

impl Engine {
    /// Adds ranks to this node's suspicions (and its row).
    pub(super) fn add_suspects(&mut self, mask: u64) {
        let mask = mask & !(1 << self.me);
        if mask & !self.susp != 0 {
            self.susp |= mask;
            self.row.store_word(self.lay.suspected, 0, self.susp);
            self.dirty = true;
        }
    }

    /// Gossip to a fixed point; then the checks that make this node stop.
    pub(super) fn gossip(&mut self, out: &mut Vec<Action>) -> Result<(), StopReason> {
        loop {
            let seen = self.others().fold(0u64, |m, r| m | self.lay.suspected_of(&self.table, r));
            if seen & (1 << self.me) != 0 {
                return Err(StopReason::Removed);
            }
            if seen & !self.susp == 0 {
                break;
            }
            self.add_suspects(seen);
        }
        let fresh = self.susp & !self.cut_off;
        if fresh != 0 {
            self.cut_off |= fresh;
            out.extend(self.ranks(fresh).into_iter().map(Action::Disconnect));
        }
        let live = self.live().count();
        if self.majority && 2 * live <= self.n() {
            return Err(StopReason::Minority { live, members: self.n(), lost: self.ranks(self.susp) });
        }
        Ok(())
    }
}
