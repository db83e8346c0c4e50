//! At most one member restarts the view: two restarters would run two groups of one
//! name, each with a strict majority of the view behind it, which majority
//! intersection forbids (the restore rule in `super::super`).

use super::SimMember;
use crate::restore::Stand;
use spindle_sst::transport::NodeId;

/// The invariant's name.
pub const NAME: &str = "one restarter";

/// Every member that ever restarted the view (also one that died after).
#[derive(Debug, Default)]
pub struct Restarters(Vec<NodeId>);

impl Restarters {
    /// `who` restarted the view.
    pub fn restarted(&mut self, who: NodeId) {
        if !self.0.contains(&who) {
            self.0.push(who);
        }
    }

    /// How many restarted.
    pub fn count(&self) -> u64 {
        self.0.len() as u64
    }

    /// Checks the members after a step.
    pub fn check(&mut self, members: &[SimMember]) -> Result<(), String> {
        for m in members {
            if m.core.as_ref().is_some_and(|c| c.stand() == Stand::Restarted) {
                self.restarted(m.id);
            }
        }
        match self.0.as_slice() {
            [] | [_] => Ok(()),
            many => Err(format!("{many:?} each restarted the view")),
        }
    }
}
