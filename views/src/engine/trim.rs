//! Stage 4: the ragged trim (Derecho TOCS §4.2; Spindle keeps it unchanged).
//!
//! Every member publishes, with `wedged`, what it received of every subgroup it is
//! in (final once wedged). Once the change is committed, the view's leader (the same
//! one that leads the change) waits until every live member is wedged and publishes
//! the cut of every subgroup: per sender, the minimum `received` over the subgroup's
//! live members. Every member of the view, in a subgroup or not, echoes all the cuts
//! in its own row; a subgroup member delivers exactly up to its subgroup's cut, in the
//! normal order, once every live member of the view has echoed the same cut; the rest
//! is discarded. Anything a member delivered before the wedge was received by every
//! member, so it lies below the cut.
//!
//! One decider per change, and a wait for every live member of the view, is what makes
//! the trim uniform. If anyone delivered up to a cut, every member it did not suspect
//! echoed that cut, and those are a majority of the view (a member with fewer live
//! stops); a later leader also sees a majority live, so one of them shows it the echo
//! and it adopts the same cut. Two earlier designs failed in the simulator: without
//! the wait, a leader delivered and installed alone, cut off before its cut reached
//! anyone (seed 3721 of the first version); with a decider per subgroup and a wait for
//! the subgroup's members only, a partition between two members of a subgroup left
//! each of them deciding alone while both still saw a majority of the view (seed
//! 24429 after the setup model went in).
//!
//! A new leader (the old one suspected) first waits until every live member suspects
//! the ranks before it, then adopts any cut a live member echoed: that member may have
//! delivered up to it already. Echoes are compared word for word, so a member never
//! delivers on an echo of some other cut.
//!
//! Unordered subgroups deliver on receipt, so there is nothing to agree on: each
//! member's cut is what it received, and nothing is sent again (a message in flight
//! when its sender fails may reach only some members; see the crate docs).

use super::{Action, Cores, Engine, StopReason};
use spindle_smc::CutError;

impl Engine {
    pub(super) fn trim<C: Cores>(&mut self, cores: &mut C, out: &mut Vec<Action>) -> Result<(), StopReason> {
        if self.specs.is_empty() {
            return Ok(());
        }
        if self.cuts[0].is_none() {
            let Some(cuts) = self.find_cuts() else { return Ok(()) };
            for (k, cut) in cuts.into_iter().enumerate() {
                self.lay.write_cut(&self.row, k, &cut);
                self.lay.set_cut_ready(&self.row, k);
                self.cuts[k] = Some(cut);
            }
            self.dirty = true;
        }
        let me_node = self.view.members()[self.me];
        for k in 0..self.specs.len() {
            if self.trimmed[k] || self.specs[k].member_rank(me_node).is_none() || !self.all_echoed(k) {
                continue;
            }
            let agreed = self.cuts[k].clone().expect("set above");
            let unordered = self.specs[k].mode == spindle_smc::Mode::Unordered;
            let local = unordered || self.faults().local_cut;
            let cut = if local { cores.with_core(k, |c| c.received().to_vec()) } else { agreed };
            match cores.with_core(k, |c| c.take_up_to_cut(&cut)) {
                Ok(batch) => {
                    self.trimmed[k] = true;
                    out.push(Action::Deliver { subgroup: k, batch });
                }
                Err(CutError::Delivering) => {} // a batch is still out: next step
                // The leader did not count this node as live: it is being removed.
                Err(_) => return Err(StopReason::Removed),
            }
        }
        Ok(())
    }

    /// True if row `r` has echoed the cuts (all subgroups' are set at once, but a
    /// member that crashed mid-write may have set only some of the flags).
    pub(super) fn echoed_by(&self, r: usize) -> bool {
        (0..self.specs.len()).all(|k| self.lay.cut_ready(&self.table, r, k))
    }

    /// True once every other live member of the view echoed the cut of subgroup `k`
    /// that this node echoed.
    fn all_echoed(&self, k: usize) -> bool {
        let mine = self.cuts[k].as_ref().expect("echoed before");
        self.others().all(|r| self.lay.cut_ready(&self.table, r, k) && self.lay.read_cut(&self.table, r, k) == *mine)
    }

    /// Every subgroup's cut, if it can be known now.
    fn find_cuts(&self) -> Option<Vec<Vec<u64>>> {
        let leader = self.leader_rank();
        // A cut some live member echoed came from a legitimate leader and may have
        // been delivered up to: take it, from the leader or anyone.
        let read = |r: usize| (0..self.specs.len()).map(|k| self.lay.read_cut(&self.table, r, k)).collect();
        if let Some(r) = std::iter::once(leader).chain(self.others()).find(|r| *r != self.me && self.echoed_by(*r)) {
            return Some(read(r));
        }
        if leader != self.me {
            return None;
        }
        if !self.predecessors_abandoned() {
            return None; // someone may still follow an older leader
        }
        if !self.live().all(|r| self.table.flag(r, self.lay.wedged)) {
            return None;
        }
        let cuts = (0..self.specs.len())
            .map(|k| {
                let live: Vec<usize> = self.specs[k]
                    .members
                    .iter()
                    .map(|n| self.view.rank_of(*n).expect("subgroup members are view members"))
                    .filter(|r| self.is_live(*r))
                    .collect();
                let received: Vec<Vec<u64>> = live.iter().map(|r| self.lay.read_received(&self.table, *r, k)).collect();
                (0..self.specs[k].senders.len()).map(|s| received.iter().map(|v| v[s]).min().unwrap_or(0)).collect()
            })
            .collect();
        Some(cuts)
    }
}
