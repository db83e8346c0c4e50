//! Stage 4: the ragged trim (Derecho TOCS §4.2; Spindle keeps it unchanged).
//!
//! Once the change is committed, each subgroup's leader (its lowest member not
//! suspected) waits until every live member is wedged, so their `received` counts are
//! final and visible, and publishes the cut: per sender, the minimum `received` over
//! the live members. Every member echoes the cut in its own row and delivers exactly
//! up to it, in the normal order, once every live member has echoed it; the rest is
//! discarded. Anything a member delivered before the wedge was received by every
//! member, so it lies below the cut.
//!
//! Waiting for every echo makes the trim uniform: if anyone delivered up to a cut, a
//! majority echoed it, so a later subgroup leader (whose live set is also a majority)
//! finds an echo and adopts the same cut. Without the wait the simulator finds a
//! leader that delivered and installed alone, cut off before its cut reached anyone,
//! while the others trimmed differently (seed 3721 of the first version).
//!
//! A new subgroup leader (the old one suspected) first waits until every live member
//! suspects the members before it, then adopts any cut a live member echoed: that
//! member may have delivered up to it already.
//!
//! Unordered subgroups deliver on receipt, so there is nothing to agree on: each
//! member's cut is what it received, and nothing is sent again (a message in flight
//! when its sender fails may reach only some members; see the crate docs).

use super::{Action, Cores, Engine, StopReason};
use smc::CutError;

impl Engine {
    pub(super) fn trim<C: Cores>(&mut self, cores: &mut C, out: &mut Vec<Action>) -> Result<(), StopReason> {
        let me_node = self.view.members()[self.me];
        for k in 0..self.specs.len() {
            if self.trimmed[k] || self.specs[k].member_rank(me_node).is_none() {
                continue;
            }
            if self.cuts[k].is_none() {
                let Some(cut) = self.find_cut(k, cores) else { continue };
                self.lay.write_cut(&self.row, k, &cut);
                self.lay.set_cut_ready(&self.row, k);
                self.dirty = true;
                self.cuts[k] = Some(cut);
            }
            let cut = self.cuts[k].clone().expect("set above");
            if !self.all_echoed(k) {
                continue;
            }
            match cores.with_core(k, |c| c.take_up_to_cut(&cut)) {
                Ok(batch) => {
                    self.trimmed[k] = true;
                    out.push(Action::Deliver { subgroup: k, batch });
                }
                Err(CutError::Delivering) => {} // a batch is still out: next step
                // The cut's leader did not count this node as live: it is being removed.
                Err(_) => return Err(StopReason::Removed),
            }
        }
        Ok(())
    }

    /// True once every live member of subgroup `k` has echoed a cut.
    fn all_echoed(&self, k: usize) -> bool {
        self.specs[k]
            .members
            .iter()
            .map(|n| self.view.rank_of(*n).expect("subgroup members are view members"))
            .filter(|r| *r != self.me && self.is_live(*r))
            .all(|r| self.lay.cut_ready(&self.table, r, k))
    }

    /// The cut of subgroup `k`, if it can be known now.
    fn find_cut<C: Cores>(&self, k: usize, cores: &mut C) -> Option<Vec<u64>> {
        let spec = &self.specs[k];
        let local = self.faults().local_cut;
        if spec.mode == smc::Mode::Unordered || local {
            return Some(cores.with_core(k, |c| c.received().to_vec()));
        }
        let ranks: Vec<usize> =
            spec.members.iter().map(|n| self.view.rank_of(*n).expect("subgroup members are view members")).collect();
        let leader = ranks.iter().copied().find(|r| self.is_live(*r)).expect("this node is live");
        // A cut some live member echoed came from a legitimate subgroup leader and
        // may have been delivered up to: take it, from the leader or anyone.
        if let Some(r) = std::iter::once(leader)
            .chain(ranks.iter().copied())
            .find(|r| *r != self.me && self.is_live(*r) && self.lay.cut_ready(&self.table, *r, k))
        {
            return Some(self.lay.read_cut(&self.table, r, k));
        }
        if leader != self.me {
            return None;
        }
        let lower = ranks.iter().take_while(|r| **r != self.me).fold(0u64, |m, r| m | 1 << r);
        let live: Vec<(usize, usize)> =
            ranks.iter().enumerate().filter(|(_, r)| self.is_live(**r)).map(|(i, r)| (i, *r)).collect();
        let wait = !self.faults().no_takeover_wait;
        if wait && live.iter().any(|(_, r)| *r != self.me && self.lay.suspected_of(&self.table, *r) & lower != lower) {
            return None;
        }
        if let Some((_, r)) = live.iter().find(|(_, r)| self.lay.cut_ready(&self.table, *r, k)) {
            return Some(self.lay.read_cut(&self.table, *r, k)); // echoed while we waited
        }
        if !live.iter().all(|(_, r)| self.table.flag(*r, self.lay.wedged)) {
            return None;
        }
        let senders = spec.senders.len();
        Some(cores.with_core(k, |c| {
            (0..senders).map(|s| live.iter().map(|(i, _)| c.member_received(*i, s)).min().unwrap_or(0)).collect()
        }))
    }
}
