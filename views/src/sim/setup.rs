//! A view's setup, modelled on the runtime's (`group::epoch`, "Members late to a new
//! view"): a node that installs a view takes no turns until it has met every member it
//! does not suspect, or until `setup_steps` after it arrived; the ones it has not met
//! start out suspected. A meeting is a link both ways (a tcp connection): it needs
//! both nodes alive and in this view's setup at once. Writes go only over links made.
//! While a node runs the view, a member it met that is still in its setup is pending,
//! held silent by the failure detector only `setup_steps` after this node began to run
//! (the deadline that member's setup ends by).
//!
//! The fault `sequential_setup` models the tcp setup before the fix: each node links
//! to its lower peers one at a time in id order, then to the higher ones, so a lower
//! peer that never comes uses up the deadline of every peer after it.

use super::{GroupSim, SimNode};
use spindle_sst::transport::NodeId;

/// A node's setup of its current view.
#[derive(Debug, Clone)]
pub(super) struct Setup {
    /// The step it arrived.
    arrived: u64,
    /// Node indices it waits for (members of the view it does not suspect).
    peers: Vec<usize>,
}

impl GroupSim {
    /// Node `i` installed a view: it sets it up now, waiting for every member but
    /// `suspects`.
    pub(super) fn begin_setup(&mut self, i: usize, suspects: &[NodeId]) {
        let node = &mut self.nodes[i];
        let peers: Vec<usize> = node
            .view()
            .members()
            .iter()
            .filter(|n| **n != node.id && !suspects.contains(n))
            .map(|n| n.0 as usize)
            .collect();
        node.linked = vec![false; self.links.len()];
        node.setup = Some(Setup { arrived: self.step, peers });
    }

    fn in_setup_of(&self, j: usize, view: u64) -> Option<&Setup> {
        let n = &self.nodes[j];
        n.setup.as_ref().filter(|_| n.active() && n.view().id().0 == view)
    }

    /// With `sequential_setup`: may `a` (the lower id) link to `b` now? Only once `a`
    /// has linked every peer below it and `b` every peer below `a`.
    fn in_turn(&self, a: usize, b: usize) -> bool {
        #[cfg(test)]
        if self.faults.sequential_setup {
            let done_below = |x: usize, limit: usize| {
                let s = self.nodes[x].setup.as_ref().expect("in setup");
                s.peers.iter().filter(|p| **p < limit).all(|p| self.nodes[x].linked[*p])
            };
            return done_below(a, a) && done_below(b, a);
        }
        let _ = (a, b);
        true
    }

    /// One step of every setup: make the links that can be made, then end the setups
    /// that have every link or reached their deadline.
    pub(super) fn setups(&mut self) {
        for i in 0..self.nodes.len() {
            let Some(s) = self.nodes[i].setup.clone() else { continue };
            if !self.nodes[i].active() {
                continue;
            }
            let view = self.nodes[i].view().id().0;
            for &j in &s.peers {
                if self.nodes[i].linked[j] {
                    continue;
                }
                let Some(theirs) = self.in_setup_of(j, view) else { continue };
                if !theirs.peers.contains(&i) || !self.in_turn(i.min(j), i.max(j)) {
                    continue;
                }
                self.nodes[i].linked[j] = true;
                self.nodes[j].linked[i] = true;
            }
            let all = s.peers.iter().all(|p| self.nodes[i].linked[*p]);
            if all || self.step >= s.arrived + self.cfg.setup_steps {
                self.end_setup(i, &s);
            }
        }
    }

    fn end_setup(&mut self, i: usize, s: &Setup) {
        let missing: Vec<NodeId> =
            s.peers.iter().filter(|p| !self.nodes[i].linked[**p]).map(|p| NodeId(*p as u32)).collect();
        if !missing.is_empty() {
            self.trace_node(i, || format!("setup ends without {missing:?}: suspected"));
        }
        let node: &mut SimNode = &mut self.nodes[i];
        for m in missing {
            node.engine.suspect(m);
        }
        node.setup = None;
        node.running_since = self.step;
    }

    /// True if running node `i` holds `p` silent because `p` is still in the setup
    /// of `i`'s view past the grace (none with `no_setup_grace`).
    pub(super) fn held_silent(&self, i: usize, p: usize) -> bool {
        let view = self.nodes[i].view().id().0;
        if self.in_setup_of(p, view).is_none() || !self.nodes[i].linked[p] {
            return false;
        }
        #[cfg(test)]
        if self.faults.no_setup_grace {
            return true;
        }
        self.step >= self.nodes[i].running_since + self.cfg.setup_steps
    }

    /// [`super::Fault::CrashSetupLeader`]: once some member sets up a new view, its
    /// leader (the lowest-ranked alive member) crashes, whether it has reached the
    /// setup or not.
    pub(super) fn fire_setup_leader_crash(&mut self) {
        let Some(w) = (0..self.nodes.len()).find(|i| self.nodes[*i].active() && self.nodes[*i].setup.is_some()) else {
            return;
        };
        let view = self.nodes[w].view().clone();
        if let Some(l) = view.members().iter().map(|n| n.0 as usize).find(|n| self.nodes[*n].alive) {
            self.armed_setup -= 1;
            self.trace_node(l, || "crashes (leader of a view being set up)".into());
            self.crash(l, false);
        }
    }

    /// The availability check at a minority stop of node `i` (see
    /// [`super::invariants::availability`]).
    pub(super) fn check_availability(&self, i: usize) -> Result<(), String> {
        let view = self.nodes[i].view();
        let members: Vec<usize> = view.members().iter().map(|n| n.0 as usize).collect();
        // A member on either side of a partition counts as faulty: suspicion of it
        // spreads by gossip to members it was never cut off from.
        let severed = |j: usize| members.iter().any(|k| self.severed[j][*k] || self.severed[*k][j]);
        // So does one that stopped as a minority before (that stop passed this check,
        // so the faults had taken its majority) or left. One that was removed does
        // not: under crash faults only a wrong suspicion removes a live member.
        let gone = |j: usize| {
            use crate::engine::StopReason::{Left, Minority};
            matches!(self.nodes[j].stopped, Some(Minority { .. } | Left))
        };
        let faulty: Vec<NodeId> = members
            .iter()
            .filter(|j| **j != i && (!self.nodes[**j].alive || severed(**j) || gone(**j)))
            .map(|j| NodeId(*j as u32))
            .collect();
        super::invariants::availability::check(view, self.nodes[i].id, &faulty)
    }
}
