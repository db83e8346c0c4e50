//! Stage 3: proposals and commits (Derecho TOCS §4.1-4.2, leader failure in §4.3).
//!
//! The leader is the lowest rank this node does not suspect. It acts only once every
//! live row suspects every rank below it, so no member still follows an older leader
//! and every ack or commit echo a live member gave the old leader is visible here (a
//! member's echo is pushed before its suspicion of that leader, and pushes from one
//! node land in order).
//!
//! A proposal that any live member saw committed, or that a previous leader issued,
//! is adopted unchanged: it may have been committed and installed by someone, so
//! changing it could split the views. Only the leader's own uncommitted proposal may
//! be superseded (by a higher number) to take in new suspicions, joins and leaves.

use super::{Engine, StopReason};
use crate::membership::{Proposal, MAX_JOINS};

impl Engine {
    pub(super) fn lead_or_follow(&mut self) -> Result<(), StopReason> {
        if self.committed() > 0 {
            return Ok(());
        }
        // A commit is final: take it from any live row (members that installed the
        // next view no longer update this one, so waiting for them would never end).
        let seen_committed = self.live().map(|r| self.table.counter(r, self.lay.committed)).max().unwrap_or(0);
        if seen_committed > 0 {
            if let Some(p) = self.find_proposal(seen_committed) {
                self.adopt(&p);
                self.commit(p.no);
            }
            return Ok(());
        }
        let leader = self.leader_rank();
        if leader != self.me {
            self.follow(leader);
            return Ok(());
        }
        if !self.predecessors_abandoned() {
            return Ok(()); // someone may still follow an older leader
        }
        let top = self.live().map(|r| self.table.counter(r, self.lay.proposal)).max().unwrap_or(0);
        let current = if top > 0 {
            let Some(p) = self.find_proposal(top) else { return Ok(()) }; // a slot being rewritten: retry
            Some(p)
        } else {
            None
        };
        let p = match current {
            Some(p) if p.issuer != self.me => {
                self.adopt(&p);
                p
            }
            mine => match self.wanted(mine.as_ref())? {
                Some(fresh) => {
                    self.adopt(&fresh);
                    fresh
                }
                None => match mine {
                    Some(p) => p,
                    None => return Ok(()),
                },
            },
        };
        if self.others().all(|r| self.table.counter(r, self.lay.proposal) == p.no) {
            self.commit(p.no);
        }
        Ok(())
    }

    /// True once every other live row suspects every rank below this node, so no
    /// member still follows an older leader (the takeover wait; the proposal and the
    /// trim both start with it).
    pub(super) fn predecessors_abandoned(&self) -> bool {
        let lower = if self.faults().no_takeover_wait { 0 } else { (1u64 << self.me) - 1 };
        self.others().all(|r| self.lay.suspected_of(&self.table, r) & lower == lower)
    }

    /// A fresh proposal if the changes wanted differ from `mine` (or there is none).
    fn wanted(&self, mine: Option<&Proposal>) -> Result<Option<Proposal>, StopReason> {
        let leaving = self.live().filter(|r| self.table.flag(*r, self.lay.leaving)).fold(0u64, |m, r| m | 1 << r)
            | if self.leave { 1 << self.me } else { 0 };
        let all = if self.n() == 64 { u64::MAX } else { (1u64 << self.n()) - 1 };
        let mut removed = self.susp | leaving;
        let mut left = leaving & !self.susp;
        if removed == all {
            if self.live().count() == 1 {
                // The last member leaves: the group ends with it.
                return Err(StopReason::Left);
            }
            // Nobody would remain: the leader stays one more view, then goes alone.
            removed &= !(1 << self.me);
            left &= !(1 << self.me);
        }
        let joins: Vec<_> = self.joins.iter().take(MAX_JOINS).copied().collect();
        let layout = self.pending_doc.clone();
        if removed == 0 && joins.is_empty() && layout.is_none() {
            return Ok(None);
        }
        let no = self.live().map(|r| self.table.counter(r, self.lay.proposal)).max().unwrap_or(0) + 1;
        let fresh = Proposal { no, issuer: self.me, removed, left, joins, layout };
        Ok(match mine {
            Some(p)
                if (p.removed, p.left, &p.joins, &p.layout)
                    == (fresh.removed, fresh.left, &fresh.joins, &fresh.layout) =>
            {
                None
            }
            // Never drop a removal already proposed (a superset only).
            Some(p) if p.removed & !fresh.removed != 0 => None,
            _ => Some(fresh),
        })
    }

    fn follow(&mut self, leader: usize) {
        let lp = self.table.counter(leader, self.lay.proposal);
        if lp > self.my_proposal_no() {
            if let Some(p) = self.lay.read_proposal(&self.table, leader, lp) {
                self.adopt(&p);
            }
        }
    }

    /// A proposal numbered `no` from any live row holding it (this node's first).
    fn find_proposal(&self, no: u64) -> Option<Proposal> {
        std::iter::once(self.me)
            .chain(self.others())
            .filter(|r| self.table.counter(*r, self.lay.proposal) == no)
            .find_map(|r| self.lay.read_proposal(&self.table, r, no))
    }

    /// Holds `p` (copies it into this row and acks its number).
    fn adopt(&mut self, p: &Proposal) {
        if p.no > self.my_proposal_no() {
            self.lay.write_proposal(&self.row, p);
            self.doc_push = p.layout.as_ref().map(|d| (p.no, d.bytes().len()));
            self.row.advance(self.lay.proposal, p.no).expect("proposal numbers only grow");
            self.dirty = true;
        }
    }

    fn commit(&mut self, no: u64) {
        if no > self.committed() {
            self.row.advance(self.lay.committed, no).expect("commits only grow");
            self.dirty = true;
        }
    }
}
