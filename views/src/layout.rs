//! Subgroup layouts: which subgroups (and shards) a view has, who is in each and who
//! sends. A layout is a function of the view; when the view cannot satisfy it the
//! group waits for more members instead of starting (docs/DESIGN.md "views").
//!
//! ```
//! use spindle_sst::transport::NodeId;
//! use spindle_views::layout::{Layout, Senders, Shards};
//! use spindle_views::view::View;
//! let layout = Shards { shard_size: 2, max_shards: 2, senders: Senders::All, ..Shards::default() };
//! let specs = layout.subgroups(&View::initial((0..5).map(NodeId).collect())).unwrap();
//! assert_eq!(specs.len(), 2);
//! assert_eq!(specs[1].members, vec![NodeId(2), NodeId(3)]);
//! assert!(layout.subgroups(&View::initial(vec![NodeId(0)])).is_err(), "one member cannot fill a shard");
//! ```

use crate::view::View;
use spindle_smc::{Mode, SubgroupSpec};
use spindle_sst::transport::NodeId;
use thiserror::Error;

/// Why a view cannot host the layout (yet).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LayoutError {
    /// Not enough members: wait for joins.
    #[error("the layout needs {need} members, the view has {have}")]
    NeedMembers {
        /// Members needed.
        need: usize,
        /// Members present.
        have: usize,
    },
}

/// Why a layout edit was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EditError {
    /// This layout has no document to edit (the default for static layouts).
    #[error("this layout is fixed: it takes no edits")]
    Static,
    /// The edit does not decode or does not fit the document; the text says why.
    #[error("layout edit refused: {0}")]
    Invalid(String),
    /// The new document would exceed [`MAX_DOC`] bytes.
    #[error("the layout document would take {0} bytes, more than the {MAX_DOC} a view carries")]
    TooLarge(usize),
    /// This node stopped, or no view took the edit in time.
    #[error("layout edit not applied: {0}")]
    NotApplied(String),
}

/// The largest layout document a view carries (it travels in the membership rows).
pub const MAX_DOC: usize = 16 * 1024;
/// The most bytes of edits one member may have pending in one view (each edit takes
/// its length rounded up to 8 bytes, plus 8).
pub const MAX_EDITS: usize = 2 * 1024;

/// Maps a view to its subgroups.
///
/// A layout may also be *dynamic*: its subgroups depend on the view's layout
/// document ([`View::layout`]), which members change with edits
/// ([`crate::group::Group::edit_layout`]). The view's leader applies the edits every
/// member asked for with [`Layout::edit`] and proposes the result as part of the next
/// view, with the same members (or with whatever membership change is due anyway).
pub trait Layout: Send + Sync {
    /// The subgroups of `view`, or why it cannot host them.
    fn subgroups(&self, view: &View) -> Result<Vec<SubgroupSpec>, LayoutError>;

    /// Applies `edit` to document `doc`: `Ok(None)` if the document already says
    /// what the edit asks (edits must be idempotent: an edit is retried in every
    /// view until one holds it), `Ok(Some(new))` with the changed document, or an
    /// error for an edit that cannot apply. Deterministic: every leader must compute
    /// the same document. Edits come from peers' rows: treat them as untrusted.
    fn edit(&self, doc: &[u8], edit: &[u8]) -> Result<Option<Vec<u8>>, EditError> {
        let _ = (doc, edit);
        Err(EditError::Static)
    }

    /// The index in `new` of subgroup `k` of `old` (a sender's messages the view
    /// change discarded are sent again there), or `None` if it has no counterpart.
    /// The default keeps the index, which suits layouts whose subgroups are a fixed
    /// list; a dynamic layout that reorders subgroups maps them itself.
    fn successor(&self, old: &View, k: usize, new: &View) -> Option<usize> {
        let _ = old;
        self.subgroups(new).ok().filter(|s| k < s.len()).map(|_| k)
    }
}

impl<F> Layout for F
where
    F: Fn(&View) -> Result<Vec<SubgroupSpec>, LayoutError> + Send + Sync,
{
    fn subgroups(&self, view: &View) -> Result<Vec<SubgroupSpec>, LayoutError> {
        self(view)
    }
}

impl std::fmt::Debug for dyn Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Layout")
    }
}

/// Which members of a shard send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Senders {
    /// Every member.
    All,
    /// The first `n` members (at least one).
    First(usize),
}

/// Consecutive shards of `shard_size` members in rank order, as many as the view can
/// fill, up to `max_shards`; members beyond them stay out of every shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shards {
    /// Members per shard.
    pub shard_size: usize,
    /// Most shards; at least one must fit or the view waits.
    pub max_shards: usize,
    /// Who sends in each shard.
    pub senders: Senders,
    /// Delivery mode.
    pub mode: Mode,
    /// Slots per sender ring (by default sized in bytes for the default `max_msg`:
    /// `spindle_smc::spec::auto_window`).
    pub window: usize,
    /// Largest message in a slot.
    pub max_msg: usize,
    /// Each sender's arena for larger messages (0: none).
    pub arena: usize,
    /// Relay large messages member to member (`SubgroupSpec::relay`).
    pub relay: bool,
}

impl Default for Shards {
    fn default() -> Self {
        let (max_msg, arena) = (1024, 64 << 20);
        let window = spindle_smc::spec::auto_window(max_msg);
        let relay = false;
        Shards {
            shard_size: 1,
            max_shards: 1,
            senders: Senders::All,
            mode: Mode::Ordered,
            window,
            max_msg,
            arena,
            relay,
        }
    }
}

impl Layout for Shards {
    fn subgroups(&self, view: &View) -> Result<Vec<SubgroupSpec>, LayoutError> {
        let size = self.shard_size.max(1);
        let have = view.members().len();
        if have < size {
            return Err(LayoutError::NeedMembers { need: size, have });
        }
        Ok(view
            .members()
            .chunks_exact(size)
            .take(self.max_shards.max(1))
            .map(|members: &[NodeId]| {
                let n = match self.senders {
                    Senders::All => size,
                    Senders::First(k) => k.clamp(1, size),
                };
                SubgroupSpec {
                    members: members.to_vec(),
                    senders: members[..n].to_vec(),
                    window: self.window,
                    max_msg: self.max_msg,
                    arena: self.arena,
                    mode: self.mode,
                    relay: self.relay,
                }
            })
            .collect())
    }
}

/// FNV-1a over `bytes`, 64 bits: the same in every process and build (for
/// placement that every member must compute alike; not for untrusted keys' tables).
pub fn stable_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// A well-mixed 64-bit score of `x` (the SplitMix64 finalizer).
pub fn mix(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Rendezvous hashing: the `n` (at least one) members of `view` that score
/// highest for `item` (a [`stable_hash`] of its name, say), highest first. Items
/// spread over the members, and a member that joins or leaves moves only the
/// items it scores high for.
///
/// ```
/// use spindle_sst::transport::NodeId;
/// use spindle_views::layout::{rendezvous, stable_hash};
/// use spindle_views::view::View;
/// let view = View::initial((0..5).map(NodeId).collect());
/// let holders = rendezvous(stable_hash(b"orders"), 3, &view);
/// assert_eq!(holders.len(), 3);
/// assert_eq!(holders, rendezvous(stable_hash(b"orders"), 3, &view), "the same everywhere");
/// ```
pub fn rendezvous(item: u64, n: usize, view: &View) -> Vec<NodeId> {
    let mut m: Vec<(u64, NodeId)> = view
        .members()
        .iter()
        .map(|node| (mix(item ^ (node.0 as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)), *node))
        .collect();
    m.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    m.into_iter().take(n.max(1)).map(|(_, node)| node).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(n: u32) -> View {
        View::initial((0..n).map(NodeId).collect())
    }

    #[test]
    fn shards_fill_in_rank_order_and_wait_when_short() {
        let l = Shards { shard_size: 3, max_shards: 4, senders: Senders::First(1), ..Shards::default() };
        assert_eq!(l.subgroups(&view(2)), Err(LayoutError::NeedMembers { need: 3, have: 2 }));
        let s = l.subgroups(&view(7)).unwrap();
        assert_eq!(s.len(), 2, "a third shard would need 9 members");
        assert_eq!(s[0].members, vec![NodeId(0), NodeId(1), NodeId(2)]);
        assert_eq!(s[1].senders, vec![NodeId(3)]);
        for spec in &s {
            spec.validate().unwrap();
        }
    }

    #[test]
    fn a_closure_is_a_layout() {
        let l = |v: &View| -> Result<Vec<SubgroupSpec>, LayoutError> {
            Ok(vec![SubgroupSpec {
                members: v.members().to_vec(),
                senders: v.members()[..1].to_vec(),
                window: 8,
                max_msg: 64,
                arena: 0,
                mode: Mode::Unordered,
                relay: false,
            }])
        };
        assert_eq!(l.subgroups(&view(3)).unwrap()[0].senders, vec![NodeId(0)]);
    }
}
