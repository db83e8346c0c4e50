//! Views: epochs with a fixed, ordered membership, and the majority rule that guards
//! the step from one view to the next (Derecho TOCS §3; docs/DESIGN.md "views").
//!
//! A view's leader is its lowest-ranked member that is not suspected. The next view
//! keeps the survivors in their order and appends the joiners; it may be installed only
//! if the survivors are a strict majority of the current view's members, otherwise a
//! partition could install two views at once. Joiners never count toward that
//! majority.
//!
//! ```
//! use spindle_sst::transport::NodeId;
//! use spindle_views::view::{View, Change};
//! let v = View::initial(vec![NodeId(0), NodeId(1), NodeId(2)]);
//! let next = v.next(&[Change::Failed(NodeId(0)), Change::Joined(NodeId(7))], true).unwrap();
//! assert_eq!(next.members(), &[NodeId(1), NodeId(2), NodeId(7)]);
//! assert_eq!(next.leader(&[]), Some(NodeId(1)));
//! // Two of three failing leaves a minority: refused with the majority rule on.
//! assert!(v.next(&[Change::Failed(NodeId(0)), Change::Failed(NodeId(1))], true).is_err());
//! ```

use spindle_sst::transport::NodeId;
use std::sync::Arc;
use thiserror::Error;

/// A view's epoch number; each installed view's is one more than the last. On the
/// wire (serde) it is the bare number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ViewId(pub u64);

/// A membership change proposed for the next view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Change {
    /// A member failed (or was suspected; suspicion is never retracted).
    Failed(NodeId),
    /// A member leaves gracefully.
    Left(NodeId),
    /// A process joins.
    Joined(NodeId),
}

/// The layout document of a view: bytes the group's [`crate::layout::Layout`]
/// interprets (a static layout ignores them; the DDS keeps its topic table here),
/// numbered so that every change makes a new version. It is replicated with the
/// view: every member of view `v` holds the same document, and it changes only by a
/// view change (docs/DESIGN.md "dds": "the layout becomes a replicated, versioned part of
/// the view").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LayoutDoc {
    version: u64,
    bytes: Arc<[u8]>,
}

impl LayoutDoc {
    /// Version `version` with contents `bytes`.
    pub fn new(version: u64, bytes: impl Into<Arc<[u8]>>) -> LayoutDoc {
        LayoutDoc { version, bytes: bytes.into() }
    }
    /// Its version (0: the empty document every group starts with).
    pub fn version(&self) -> u64 {
        self.version
    }
    /// Its contents.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// A view: an epoch with an ordered membership and a layout document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    id: ViewId,
    members: Vec<NodeId>,
    layout: LayoutDoc,
    /// Above every node id any view of the group has had (the next id the group
    /// gives a joiner that asks for one).
    next_node: u32,
}

/// Why a next view cannot be formed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ViewError {
    /// The survivors are not a strict majority of the current view.
    #[error("{survivors} of {members} members survive: not a majority, this side must stop")]
    Minority {
        /// Members left.
        survivors: usize,
        /// Members of the current view.
        members: usize,
    },
    /// A change names a node that is not a member (or, for a join, one that already is).
    #[error("change {0:?} does not fit view")]
    BadChange(Change),
    /// Nobody would be left.
    #[error("the next view would be empty")]
    Empty,
}

impl View {
    /// The first view of a group.
    pub fn initial(members: Vec<NodeId>) -> View {
        let next_node = above(&members, 0);
        View { id: ViewId(0), members, layout: LayoutDoc::default(), next_node }
    }

    /// A view as a joiner learns it from the control plane.
    pub fn with_id(id: ViewId, members: Vec<NodeId>) -> View {
        let next_node = above(&members, 0);
        View { id, members, layout: LayoutDoc::default(), next_node }
    }

    /// The same view with `next_node` at least `n` (as a joiner learns it).
    pub fn with_next_node(mut self, n: u32) -> View {
        self.next_node = self.next_node.max(n);
        self
    }

    /// Above every node id the group has had: no node asking for an id gets one
    /// below it (ids are never given twice).
    pub fn next_node(&self) -> u32 {
        self.next_node
    }

    /// The same view with layout document `doc` (the next view of a change that
    /// edits the layout; a joiner's view as it learns it).
    pub fn with_layout(mut self, doc: LayoutDoc) -> View {
        self.layout = doc;
        self
    }

    /// The layout document.
    pub fn layout(&self) -> &LayoutDoc {
        &self.layout
    }

    /// The epoch.
    pub fn id(&self) -> ViewId {
        self.id
    }

    /// Members in rank order.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// Rank of `node`, if a member.
    pub fn rank_of(&self, node: NodeId) -> Option<usize> {
        self.members.iter().position(|m| *m == node)
    }

    /// The lowest-ranked member not in `suspected`.
    pub fn leader(&self, suspected: &[NodeId]) -> Option<NodeId> {
        self.members.iter().copied().find(|m| !suspected.contains(m))
    }

    /// True if `alive` members are a strict majority of this view.
    pub fn is_majority(&self, alive: usize) -> bool {
        2 * alive > self.members.len()
    }

    /// The view after `changes`: survivors in order, then joiners in the order given;
    /// the same layout document.
    /// With `majority` on, refuses unless the survivors are a strict majority.
    pub fn next(&self, changes: &[Change], majority: bool) -> Result<View, ViewError> {
        let mut members = self.members.clone();
        let mut joined = Vec::new();
        for c in changes {
            match *c {
                Change::Failed(n) | Change::Left(n) => {
                    let Some(i) = members.iter().position(|m| *m == n) else { return Err(ViewError::BadChange(*c)) };
                    members.remove(i);
                }
                Change::Joined(n) => {
                    if self.members.contains(&n) || joined.contains(&n) {
                        return Err(ViewError::BadChange(*c));
                    }
                    joined.push(n);
                }
            }
        }
        let survivors = members.len();
        if majority && !self.is_majority(survivors) {
            return Err(ViewError::Minority { survivors, members: self.members.len() });
        }
        members.extend(joined);
        if members.is_empty() {
            return Err(ViewError::Empty);
        }
        let next_node = above(&members, self.next_node);
        Ok(View { id: ViewId(self.id.0 + 1), members, layout: self.layout.clone(), next_node })
    }
}

/// The least id above every one of `members`, and at least `floor`.
fn above(members: &[NodeId], floor: u32) -> u32 {
    members.iter().map(|m| m.0.saturating_add(1)).max().unwrap_or(0).max(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u32) -> Vec<NodeId> {
        (0..n).map(NodeId).collect()
    }

    #[test]
    fn majority_rule_for_small_groups() {
        let two = View::initial(ids(2));
        assert!(matches!(
            two.next(&[Change::Failed(NodeId(1))], true),
            Err(ViewError::Minority { survivors: 1, members: 2 })
        ));
        assert!(two.next(&[Change::Failed(NodeId(1))], false).is_ok(), "the rule can be turned off");
        let three = View::initial(ids(3));
        assert!(three.next(&[Change::Failed(NodeId(2))], true).is_ok());
        assert!(three.next(&[Change::Failed(NodeId(1)), Change::Left(NodeId(2))], true).is_err());
        let four = View::initial(ids(4));
        assert!(
            four.next(&[Change::Failed(NodeId(0)), Change::Failed(NodeId(3))], true).is_err(),
            "2 of 4 is no majority"
        );
        // Joiners do not make up for lost members.
        let r = three.next(&[Change::Failed(NodeId(0)), Change::Failed(NodeId(1)), Change::Joined(NodeId(9))], true);
        assert!(matches!(r, Err(ViewError::Minority { .. })));
    }

    #[test]
    fn next_view_keeps_order_and_numbers_epochs() {
        let v = View::initial(ids(4));
        let n =
            v.next(&[Change::Joined(NodeId(8)), Change::Failed(NodeId(1)), Change::Joined(NodeId(5))], true).unwrap();
        assert_eq!(n.id(), ViewId(1));
        assert_eq!(n.members(), &[NodeId(0), NodeId(2), NodeId(3), NodeId(8), NodeId(5)]);
        assert_eq!(n.rank_of(NodeId(8)), Some(3));
        assert_eq!(n.leader(&[NodeId(0)]), Some(NodeId(2)));
        assert_eq!(n.leader(n.members()), None);
    }

    #[test]
    fn impossible_changes_are_refused() {
        let v = View::initial(ids(3));
        assert_eq!(v.next(&[Change::Failed(NodeId(7))], true), Err(ViewError::BadChange(Change::Failed(NodeId(7)))));
        assert!(v.next(&[Change::Joined(NodeId(1))], true).is_err(), "already a member");
        assert!(v.next(&[Change::Joined(NodeId(5)), Change::Joined(NodeId(5))], true).is_err());
        assert!(v.next(&[Change::Failed(NodeId(0)), Change::Failed(NodeId(0))], false).is_err());
        let one = View::initial(ids(1));
        assert_eq!(one.next(&[Change::Left(NodeId(0))], false), Err(ViewError::Empty));
    }
}
