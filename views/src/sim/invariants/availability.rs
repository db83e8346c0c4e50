//! Availability: a member stops for want of a majority only when the faults took it
//! away. If most members of its view are alive and not partitioned from it, the group
//! must go on, so a minority stop there is a violation (Derecho TOCS §4.4: the
//! majority rule trades availability only under a real loss of the majority). A
//! wrong suspicion may cost a member its place, but it must not cascade until every
//! survivor counts itself in a minority (the outage after a second failure during a
//! view change).

use crate::view::View;
use spindle_sst::transport::NodeId;

/// The invariant's name in reports.
pub const NAME: &str = "availability";

/// `node` stops as a minority of `view`; `faulty` are the members that crashed, are
/// on either side of a partition (so this checks crash faults only), or stopped
/// before as a minority themselves or left.
pub fn check(view: &View, node: NodeId, faulty: &[NodeId]) -> Result<(), String> {
    let n = view.members().len();
    let correct = n - faulty.iter().filter(|f| view.rank_of(**f).is_some()).count();
    if 2 * correct > n {
        Err(format!(
            "{node} stopped as a minority of view {} {:?}, but only {faulty:?} failed or are cut off from it",
            view.id().0,
            view.members()
        ))
    } else {
        Ok(())
    }
}
