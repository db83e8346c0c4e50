//! Why a running node is out of its group's view: it lost its majority, or the
//! others removed it. The node says so at once (a callback, [`super::Group::removal`],
//! and sends that fail with [`super::SendError::NoMajority`]) and works to get back
//! (see `rejoin`).

use crate::view::ViewId;
use spindle_sst::transport::NodeId;

/// A node that could not reach a strict majority of its view's members (the
/// majority rule, [`crate::config::Config::majority`]): it stopped taking part in
/// that view rather than go on as a second group beside the majority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoMajority {
    /// The view it lost its majority in.
    pub view: ViewId,
    /// That view's members (itself included).
    pub members: Vec<NodeId>,
    /// The members it could no longer reach.
    pub lost: Vec<NodeId>,
}

impl NoMajority {
    /// How many of `lost` must be reachable again for a strict majority of the
    /// view's members.
    pub fn needed(&self) -> usize {
        let reachable = self.members.len() - self.lost.len();
        (self.members.len() / 2 + 1).saturating_sub(reachable)
    }
}

fn list(ids: &[NodeId]) -> String {
    ids.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ")
}

impl std::fmt::Display for NoMajority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.members.len();
        write!(
            f,
            "lost the majority of view {} ({} unreachable): {} of {n} members is no majority, so this member stopped \
             rather than go on as a second group; it goes on when {} more of {} can be reached again (it keeps asking \
             them to take it back), or once it is given a contact of the group the majority runs",
            self.view.0,
            list(&self.lost),
            n - self.lost.len(),
            self.needed(),
            list(&self.lost),
        )
    }
}

/// Why this node is out of its group's view (see [`super::GroupBuilder::on_removed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// It could not reach a majority of its view.
    NoMajority(NoMajority),
    /// The other members removed it from view `view` (they suspected it: it
    /// stalled past the failure timeout, or its links to them failed).
    Removed {
        /// The view it was removed from.
        view: ViewId,
    },
}

impl std::fmt::Display for Removal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Removal::NoMajority(m) => m.fmt(f),
            Removal::Removed { view } => write!(
                f,
                "removed from view {} by the other members (they stopped hearing from this one); joining again",
                view.0
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_majority_says_who_is_missing_and_what_would_let_it_go_on() {
        let one_of_two = NoMajority { view: ViewId(1), members: vec![NodeId(0), NodeId(1)], lost: vec![NodeId(1)] };
        assert_eq!(one_of_two.needed(), 1);
        let text = one_of_two.to_string();
        assert!(text.contains("view 1 (n1 unreachable)") && text.contains("1 of 2 members"), "{text}");
        let two_of_five = NoMajority {
            view: ViewId(7),
            members: (0..5).map(NodeId).collect(),
            lost: vec![NodeId(1), NodeId(2), NodeId(4)],
        };
        assert_eq!(two_of_five.needed(), 1, "two reachable need a third of five");
        let none_left =
            NoMajority { view: ViewId(2), members: (0..4).map(NodeId).collect(), lost: (1..4).map(NodeId).collect() };
        assert_eq!(none_left.needed(), 2, "one of four needs two more");
    }
}
