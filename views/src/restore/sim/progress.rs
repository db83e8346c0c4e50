//! A restore finishes: when a strict majority of the view is alive, at least one of
//! them stayed alive out of the view (not only started again), and nothing is lost
//! or killed mid-restore, exactly one member restarts the view and every live
//! member runs a view by the end of the run. (A seed that loses answers or kills a
//! member mid-restore may leave members waiting for one that is gone: the module
//! docs of `super::super` say so.)

use super::{RestoreSimConfig, SimMember};
use crate::restore::Stand;

/// The invariant's name.
pub const NAME: &str = "progress";

/// Checks the members at the end of a run of `cfg`.
pub fn check(cfg: &RestoreSimConfig, members: &[SimMember]) -> Result<(), String> {
    let live = members.iter().filter(|m| m.alive).count();
    let stayed = members.iter().any(|m| m.alive && m.core.is_some());
    if !cfg.clean() || 2 * live <= cfg.members as usize || !stayed {
        return Ok(());
    }
    let restarters = members.iter().filter(|m| m.core.as_ref().is_some_and(|c| c.stand() == Stand::Restarted)).count();
    let waiting: Vec<String> = members
        .iter()
        .filter(|m| m.alive && !m.running())
        .map(|m| match &m.core {
            Some(c) => format!("{} {:?} (counted {:?})", m.id, c.stand(), c.counted()),
            None => format!("{} started again, asking {:?}", m.id, m.restarted.map(|r| r.0)),
        })
        .collect();
    if restarters != 1 || !waiting.is_empty() {
        return Err(format!("{restarters} restarters; still out of any view: {}", waiting.join("; ")));
    }
    Ok(())
}
