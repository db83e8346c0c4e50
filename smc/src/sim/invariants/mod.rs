//! The invariants the simulator checks, one per file. Each says where it comes from.

pub mod no_gaps;
pub mod progress;
pub mod quiescence;
pub mod slot_reuse;
pub mod stability;
pub mod total_order;

use super::{Delivery, SimConfig};
use crate::spec::Mode;

/// All checks, with the state each keeps.
#[derive(Debug)]
pub struct Checks {
    /// Same sequence everywhere.
    pub total_order: total_order::TotalOrder,
    /// Delivered only when stable.
    pub stability: stability::Stability,
    /// Each sender's messages exactly once, in order, intact.
    pub no_gaps: no_gaps::NoGaps,
    /// Slots not reused before delivered everywhere.
    pub slot_reuse: slot_reuse::SlotReuse,
    /// Everything sent is delivered everywhere in the end.
    pub progress: progress::Progress,
}

impl Checks {
    /// Fresh checks for a run of `cfg`.
    pub fn new(cfg: &SimConfig) -> Checks {
        let ordered = cfg.spec.mode == Mode::Ordered;
        let (n, s) = (cfg.spec.members.len(), cfg.spec.senders.len());
        Checks {
            total_order: total_order::TotalOrder::new(ordered, n, s),
            stability: stability::Stability { ordered },
            no_gaps: no_gaps::NoGaps::new(n, s),
            slot_reuse: slot_reuse::SlotReuse::new(s, cfg.spec.window as u64),
            progress: progress::Progress::new(s),
        }
    }

    /// A sender committed message `index` with payload digest `digest`.
    pub fn on_commit(&mut self, sender: usize, index: u64, digest: u64) {
        self.no_gaps.on_commit(sender, index, digest);
        self.progress.on_commit(sender);
    }

    /// A node delivered `d`; `received[node][sender]` is every node's received count.
    pub fn on_deliver(&mut self, d: &Delivery, received: &[Vec<u64>]) -> Result<(), (&'static str, String)> {
        self.stability.on_deliver(d, received).map_err(|e| (stability::NAME, e))?;
        self.no_gaps.on_deliver(d).map_err(|e| (no_gaps::NAME, e))?;
        self.total_order.on_deliver(d).map_err(|e| (total_order::NAME, e))?;
        Ok(())
    }
}
