//! Wedged before install: a member installs the next view only after it stopped
//! sending and receiving in the old one, so its `received` counts are final when the
//! trim is computed (Derecho TOCS §4.2, the wedge step).

use spindle_sst::transport::NodeId;

/// The invariant's name in reports.
pub const NAME: &str = "wedged before install";

/// `wedged`: the node's engine and every one of its subgroups were wedged.
pub fn check(node: NodeId, wedged: bool) -> Result<(), String> {
    if wedged {
        Ok(())
    } else {
        Err(format!("{node} installs a view without having wedged every subgroup"))
    }
}
