//! The sharded store's group layout: one subgroup per shard (its log's
//! replicas), and the shard map as the view's layout document.
//!
//! Shard `s`'s replicas in a view are the `replicas` members that score highest
//! for it (rendezvous hashing, [`spindle_views::layout::rendezvous`]), the
//! highest first: it is the shard's primary. So primaries spread over the
//! members, and a member that joins or leaves moves only the shards it scores
//! high for. The document starts empty (the map [`ShardMap::new`] makes) and
//! changes by the map's edits ([`super::MapEdit`]); its version is the map's.

use super::map::{MapEdit, Shard, ShardMap};
use spindle_smc::{Mode, SubgroupSpec};
use spindle_sst::transport::NodeId;
use spindle_views::layout::{rendezvous, stable_hash, EditError, Layout, LayoutError};
use spindle_views::view::View;

/// The layout (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct ShardLayout {
    /// Shards.
    pub shards: u16,
    /// Copies of each shard's log.
    pub replicas: usize,
}

impl ShardLayout {
    /// Shard `s`'s replicas in `view`, the primary first.
    pub fn replicas_of(&self, s: Shard, view: &View) -> Vec<NodeId> {
        let item = stable_hash(&[b"kv-shard".as_slice(), &s.to_le_bytes()].concat());
        rendezvous(item, self.replicas.min(view.members().len()), view)
    }

    /// The map `view` holds (an empty document: the first map).
    pub fn map_of(&self, view: &View) -> Option<ShardMap> {
        self.decode(view.layout().bytes())
    }

    fn decode(&self, doc: &[u8]) -> Option<ShardMap> {
        match doc {
            [] => ShardMap::new(self.shards).ok(),
            _ => ShardMap::decode(doc).ok().filter(|m| m.shards() == self.shards),
        }
    }
}

impl Layout for ShardLayout {
    fn subgroups(&self, view: &View) -> Result<Vec<SubgroupSpec>, LayoutError> {
        if view.members().is_empty() {
            return Err(LayoutError::NeedMembers { need: 1, have: 0 });
        }
        // The logs send nothing on their subgroups: they name who holds each log.
        Ok((0..self.shards)
            .map(|s| {
                let members = self.replicas_of(s, view);
                let senders = members[..1].to_vec();
                SubgroupSpec { members, senders, window: 4, max_msg: 64, arena: 0, mode: Mode::Ordered }
            })
            .collect())
    }

    fn edit(&self, doc: &[u8], edit: &[u8]) -> Result<Option<Vec<u8>>, EditError> {
        let map = self.decode(doc).ok_or_else(|| EditError::Invalid("the document is not this store's map".into()))?;
        let edit = MapEdit::decode(edit).map_err(|e| EditError::Invalid(e.to_string()))?;
        let next = map.apply(&edit).map_err(|e| EditError::Invalid(e.to_string()))?;
        Ok(next.map(|m| m.encode()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::Range;
    use spindle_views::view::LayoutDoc;

    #[test]
    fn shards_spread_their_primaries_and_the_map_follows_edits() {
        let l = ShardLayout { shards: 4, replicas: 2 };
        let view = View::initial((0..4).map(NodeId).collect());
        let specs = l.subgroups(&view).unwrap();
        assert_eq!(specs.len(), 4);
        let primaries: std::collections::BTreeSet<NodeId> = specs.iter().map(|s| s.senders[0]).collect();
        assert!(primaries.len() > 1, "primaries spread: {primaries:?}");
        assert!(specs.iter().all(|s| s.members.len() == 2 && s.members[0] == s.senders[0]));
        assert_eq!(l.map_of(&view), ShardMap::new(4).ok());
        let edit = MapEdit::Migrate { range: Range { first: 0, last: 9 }, to: 3 };
        let doc = l.edit(&[], &edit.encode()).unwrap().expect("a change");
        let moved = view.clone().with_layout(LayoutDoc::new(1, doc.clone()));
        assert_eq!(l.map_of(&moved).map(|m| m.owner(5)), Some(3));
        assert_eq!(l.edit(&doc, &edit.encode()).unwrap(), None, "asked again: already so");
        assert!(l.edit(&doc, b"junk").is_err());
        let other = ShardLayout { shards: 2, replicas: 2 };
        assert!(other.edit(&doc, &edit.encode()).is_err(), "a map of another shard count");
    }
}
