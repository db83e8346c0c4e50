//! The invariants the group simulator checks after every step, one per file, each
//! citing where it comes from.

pub mod availability;
pub mod delivery_agreement;
pub mod exactly_once;
pub mod majority;
pub mod progress;
pub mod state_transfer;
pub mod view_agreement;
pub mod wedged_before_install;

use crate::engine::Next;
use crate::view::View;
use spindle_sst::transport::NodeId;

/// Every check, fed by the simulator.
#[derive(Debug, Default)]
pub struct Checks {
    /// View agreement.
    pub views: view_agreement::Views,
    /// Same deliveries per subgroup per view; nothing a survivor delivered is missing.
    pub deliveries: delivery_agreement::Deliveries,
    /// No duplicate, reordered or lost message of a sender.
    pub exactly_once: exactly_once::ExactlyOnce,
    /// Joiners get the state the members have.
    pub state: state_transfer::State,
}

impl Checks {
    /// A delivery of `m` at `node` in view `vid`, subgroup `k`.
    pub fn on_deliver(&mut self, node: NodeId, vid: u64, k: usize, m: &[u8]) -> Result<(), (&'static str, String)> {
        self.deliveries.on_deliver(node, vid, k, m).map_err(|d| (delivery_agreement::NAME, d))?;
        self.exactly_once.on_deliver(node, k, m).map_err(|d| (exactly_once::NAME, d))?;
        self.state.on_deliver(node, k, m);
        Ok(())
    }

    /// `node` installs `next` after `old`.
    pub fn on_install(
        &mut self,
        node: NodeId,
        old: &View,
        mine: &[usize],
        next: &Next,
        wedged: bool,
    ) -> Result<(), (&'static str, String)> {
        wedged_before_install::check(node, wedged).map_err(|d| (wedged_before_install::NAME, d))?;
        majority::check(old, next).map_err(|d| (majority::NAME, d))?;
        self.views.on_install(old, &next.view).map_err(|d| (view_agreement::NAME, d))?;
        self.deliveries.on_install(node, old.id().0, mine).map_err(|d| (delivery_agreement::NAME, d))?;
        self.state.on_install(node, next.view.id().0).map_err(|d| (state_transfer::NAME, d))?;
        Ok(())
    }
}
