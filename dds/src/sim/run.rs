//! A run of one seed: the first members start, traffic and faults, the wind-down,
//! and the invariants checked after every step.

use super::invariants;
use super::world::World;
use super::{Stats, Violation};
use spindle_sst::transport::NodeId;

/// Steps of traffic and faults before the run winds down.
const STEPS: u64 = 4_000;
/// Steps the wind-down may take before the run counts as stuck.
const WIND_DOWN: u64 = 20_000;

impl World {
    /// Runs the seed: the first members start, traffic and faults for
    /// [`STEPS`], then the run winds down until everything sent is delivered.
    pub(crate) fn run(mut self) -> Result<Stats, Violation> {
        let first: Vec<NodeId> = (0..self.cfg.first).map(|i| NodeId(i as u32)).collect();
        for n in &first {
            self.start_member(*n).map_err(|d| self.violation(("logged", d)))?;
        }
        self.new_view(first, None);
        self.attach_clients();
        while self.step < STEPS {
            self.step += 1;
            self.act(true);
            invariants::check_step(&mut self).map_err(|v| self.violation(v))?;
        }
        // Members still out come back, so that the wind-down holds them to the end.
        while let Some(n) = self.removed.pop() {
            self.take_back(n);
        }
        let end = self.step + WIND_DOWN;
        while !self.quiet() {
            if self.step >= end {
                return Err(self.violation(("quiescence", self.stuck())));
            }
            self.step += 1;
            self.act(false);
            invariants::check_step(&mut self).map_err(|v| self.violation(v))?;
        }
        invariants::check_end(&self).map_err(|v| self.violation(v))?;
        self.stats.samples = self.order.len() as u64;
        self.stats.disposals = self.kinds.iter().filter(|k| **k != 0).count() as u64;
        self.stats.lifespans = u64::from(self.cfg.lifespan.is_some());
        if self.unordered() {
            self.stats.unordered = 1;
            self.stats.unordered_sent = self.sent + self.log.len() as u64;
        }
        let readers = self.members.iter().flat_map(|m| &m.readers);
        self.stats.history_offers = readers.flat_map(|r| &r.offers).filter(|o| o.2).count() as u64;
        Ok(self.stats)
    }

    /// True when everything written went out and was delivered, and no late
    /// join or failover is in progress.
    fn quiet(&self) -> bool {
        let members_done = self.in_view.iter().all(|n| {
            let m = &self.members[n.0 as usize];
            m.writes_left == 0 && m.cursor == self.log.len() && m.pending.is_empty()
        });
        let clients_done = self.clients.iter().all(|c| c.writes_left == 0 && c.unacked().is_empty());
        members_done && clients_done && self.fetches.is_empty()
    }

    fn stuck(&self) -> String {
        let behind: Vec<_> = self
            .in_view
            .iter()
            .map(|n| (n.0, self.members[n.0 as usize].cursor, self.members[n.0 as usize].writes_left))
            .collect();
        let clients: Vec<_> = self.clients.iter().map(|c| (c.id, c.writes_left, c.unacked())).collect();
        format!(
            "not quiet after the wind-down: order {} members (id, cursor, left) {behind:?} clients {clients:?} fetches {}",
            self.log.len(),
            self.fetches.len()
        )
    }
}
