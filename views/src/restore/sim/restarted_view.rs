//! The restarted view lists only its restarter and members bound to it, and they
//! are a strict majority of the last view: each member it lists starts it as a
//! member that stays in a view, so none of them may restart the view or be bound
//! to another member (that one could restart it too), and the state they continue
//! must be a majority's.

use super::SimMember;
use crate::restore::Stand;
use crate::view::View;

/// The invariant's name.
pub const NAME: &str = "restarted view";

/// Checks the members after a step.
pub fn check(last: &View, members: &[SimMember]) -> Result<(), String> {
    for r in members {
        let Some(v) = r.core.as_ref().and_then(|c| c.restarted()) else { continue };
        if !last.is_majority(v.members().len()) {
            return Err(format!("{} restarted {:?}, no majority of {:?}", r.id, v.members(), last.members()));
        }
        for m in members.iter().filter(|m| m.id != r.id && v.members().contains(&m.id)) {
            let Some(stand) = m.core.as_ref().map(|c| c.stand()) else { continue };
            let bound_here = match stand {
                Stand::Bound(to) => to == r.id,
                Stand::Asking { bound, to } => to == r.id || bound == Some(r.id),
                Stand::Joined => true,
                Stand::Candidate | Stand::Restarted => false,
            };
            if !bound_here {
                return Err(format!(
                    "{} restarted {:?}, which lists {} standing at {stand:?}",
                    r.id,
                    v.members(),
                    m.id
                ));
            }
        }
    }
    Ok(())
}
