//! The simulator's faults: crashes (torn or not), leader and subgroup-leader crashes
//! during a change, joins, leaves, partitions, and the simulated failure detector.

use super::{Fault, GroupSim};
use crate::engine::JoinRefusal;
use crate::membership::Joiner;
use spindle_sst::transport::NodeId;

impl GroupSim {
    pub(super) fn crash(&mut self, i: usize, torn: bool) {
        self.nodes[i].alive = false;
        for t in 0..self.links[i].len() {
            let q = &mut self.links[i][t].queue;
            if torn && !q.is_empty() {
                let keep = self.rng.below(q.len() as u64) as usize;
                q.truncate(keep + 1);
                let last = q.back_mut().expect("kept one");
                let words = self.rng.below(last.words.len() as u64 + 1) as usize;
                last.words.truncate(words);
            }
        }
    }

    pub(super) fn fire_faults(&mut self) {
        if self.armed_trim > 0 {
            let trimming =
                (0..self.nodes.len()).find(|i| self.nodes[*i].active() && self.nodes[*i].engine.is_trimming());
            if let Some(w) = trimming {
                self.armed_trim -= 1;
                let specs = &self.nodes[w].specs;
                let suspects = self.nodes[w].engine.suspects();
                let leader = specs.last().and_then(|s| {
                    s.members
                        .iter()
                        .map(|n| n.0 as usize)
                        .find(|n| self.nodes[*n].active() && !suspects.contains(&NodeId(*n as u32)))
                });
                if let Some(l) = leader {
                    self.crash(l, true);
                }
            }
        }
        if self.armed_setup > 0 {
            self.fire_setup_leader_crash();
        }
        if self.armed > 0 {
            let wedged = (0..self.nodes.len()).find(|i| self.nodes[*i].active() && self.nodes[*i].engine.is_wedged());
            if let Some(w) = wedged {
                self.armed -= 1;
                let leader =
                    self.nodes[w].view().members().iter().map(|n| n.0 as usize).find(|n| {
                        self.nodes[*n].active() && !self.nodes[w].engine.suspects().contains(&NodeId(*n as u32))
                    });
                if let Some(l) = leader {
                    self.crash(l, true);
                }
            }
        }
        for f in 0..self.cfg.faults.len() {
            if self.fired[f] {
                continue;
            }
            let fault = self.cfg.faults[f];
            let due = match fault {
                Fault::Crash { at, .. }
                | Fault::Join { at }
                | Fault::Leave { at }
                | Fault::Partition { at }
                | Fault::Edit { at } => self.step >= at,
                Fault::CrashLeaderMidChange { after }
                | Fault::CrashTrimLeader { after }
                | Fault::CrashSetupLeader { after } => self.step >= after,
            };
            if !due {
                continue;
            }
            self.fired[f] = true;
            let live: Vec<usize> = (0..self.nodes.len()).filter(|i| self.nodes[*i].active()).collect();
            if live.is_empty() {
                continue;
            }
            let pick = live[self.rng.below(live.len() as u64) as usize];
            match fault {
                Fault::Crash { torn, .. } => self.crash(pick, torn),
                Fault::CrashSetupLeader { .. } => {
                    // The first failure starts the change (a member other than the
                    // leader, when there is one); the leader fails during its setup.
                    let view = self.nodes[pick].view().clone();
                    let other = view.members().iter().skip(1).map(|n| n.0 as usize).find(|n| self.nodes[*n].alive);
                    let torn = self.rng.chance(50);
                    self.crash(other.unwrap_or(pick), torn);
                    self.armed_setup += 1;
                }
                Fault::CrashTrimLeader { .. } => {
                    self.armed_trim += 1;
                    let id = NodeId((self.nodes.len() + self.pending_joins.len()) as u32);
                    self.pending_joins.push(id);
                }
                Fault::CrashLeaderMidChange { .. } => {
                    self.armed += 1;
                    let id = NodeId((self.nodes.len() + self.pending_joins.len()) as u32);
                    self.pending_joins.push(id);
                }
                Fault::Join { .. } => {
                    let id = NodeId((self.nodes.len() + self.pending_joins.len()) as u32);
                    self.pending_joins.push(id);
                }
                Fault::Leave { .. } => self.nodes[pick].engine.leave(),
                Fault::Edit { .. } => {
                    let e = self.nodes[pick].id.0.to_le_bytes().to_vec();
                    self.trace(|| format!("{} asks to join subgroup 1", NodeId(pick as u32)));
                    let node = &mut self.nodes[pick];
                    if !node.edits.contains(&e) {
                        node.engine.request_edit(&e);
                        node.edits.push(e);
                    }
                }
                Fault::Partition { .. } => {
                    let view = self.nodes[pick].view().clone();
                    self.trace(|| "partition".into());
                    let m = view.members();
                    let size = self.rng.below(m.len().div_ceil(2) as u64) as usize; // a strict minority
                    let side: Vec<usize> = m.iter().take(size.max(1).min(m.len() - 1)).map(|n| n.0 as usize).collect();
                    if m.len() < 2 {
                        continue;
                    }
                    for a in 0..self.nodes.len() {
                        for b in 0..self.nodes.len() {
                            if side.contains(&a) != side.contains(&b) {
                                self.severed[a][b] = true;
                                self.links[a][b].cut = true;
                                self.links[a][b].queue.clear();
                            }
                        }
                    }
                }
            }
        }
    }

    /// Join requests go to a random member, which may redirect once.
    pub(super) fn ask_to_join(&mut self) {
        let Some(&j) = self.pending_joins.first() else { return };
        let live: Vec<usize> = (0..self.nodes.len()).filter(|i| self.nodes[*i].active()).collect();
        if live.is_empty() || !self.rng.chance(5) {
            return;
        }
        let mut at = live[self.rng.below(live.len() as u64) as usize];
        for _ in 0..2 {
            match self.nodes[at].engine.request_join(Joiner { node: j, addr: None }) {
                Err(JoinRefusal::Redirect(l)) if self.nodes[l.0 as usize].active() => at = l.0 as usize,
                _ => return,
            }
        }
    }

    /// The simulated failure detector: suspect peers unreachable for long enough.
    pub(super) fn detect(&mut self) {
        let n = self.nodes.len();
        for i in 0..n {
            if !self.nodes[i].running() {
                continue; // no detector during setup
            }
            for p in 0..n {
                if self.nodes[i].engine.peer_done(NodeId(p as u32)) {
                    continue; // it finished its part of this view's change and moved on (as the runtime's detector)
                }
                let unreachable = p != i && (!self.nodes[p].active() || self.links[p][i].cut || self.held_silent(i, p));
                let since = &mut self.nodes[i].unreachable_since[p];
                match (unreachable, *since) {
                    (false, _) => *since = None,
                    (true, None) => *since = Some(self.step),
                    (true, Some(t)) => {
                        let (lo, hi) = self.cfg.detect;
                        let delay = lo + (self.cfg.seed ^ (i as u64 * 131 + p as u64 * 7919)) % (hi - lo + 1);
                        if self.step - t >= delay {
                            self.nodes[i].engine.suspect(NodeId(p as u32));
                        }
                    }
                }
            }
        }
    }
}
