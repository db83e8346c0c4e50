//! Stability: an ordered subgroup delivers a message only once every member has
//! received it (Spindle §2.1: "safe to deliver at a node only when ... every subgroup
//! member has received it"; docs/DESIGN.md smc: stable when min over members of
//! `received[r]` > k). Checked against every node's actual received count at the
//! moment of delivery.

/// Name in violation reports.
pub const NAME: &str = "stability before delivery (Spindle §2.1)";

/// Stateless check.
#[derive(Debug)]
pub struct Stability {
    /// Only ordered subgroups wait for stability.
    pub ordered: bool,
}

impl Stability {
    /// Checks one delivery against `received[node][sender]`.
    pub fn on_deliver(&self, d: &super::Delivery, received: &[Vec<u64>]) -> Result<(), String> {
        if !self.ordered {
            return Ok(());
        }
        for (node, rec) in received.iter().enumerate() {
            if rec[d.sender] <= d.index {
                return Err(format!(
                    "node {} delivered sender {} index {} but node {node} has only {} of its indices",
                    d.node, d.sender, d.index, rec[d.sender]
                ));
            }
        }
        Ok(())
    }
}
