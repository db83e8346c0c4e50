//! The sharded store's group layout: one subgroup per shard (its log's
//! replicas), and the shard map as the view's layout document.
//!
//! Shard `s`'s replicas in a view are the `replicas` members that score highest
//! for it (rendezvous hashing, [`spindle_views::layout::rendezvous`]), so a
//! member that joins or leaves moves only the shards it scores high for. The
//! first of them is the shard's primary: going through the shards in order, the
//! replica that is the primary of the fewest shards so far (the higher score
//! breaks a tie), so that the primaries spread evenly over the members even
//! where the scores would put several on one. The document starts empty (the
//! map [`ShardMap::new`] makes) and changes by the map's edits
//! ([`super::MapEdit`]); its version is the map's.

use super::map::{MapEdit, Shard, ShardMap};
use spindle_smc::{Mode, SubgroupSpec};
use spindle_sst::transport::NodeId;
use spindle_views::layout::{rendezvous, stable_hash, EditError, Layout, LayoutError};
use spindle_views::view::View;
use std::collections::HashMap;

/// The layout (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct ShardLayout {
    /// Shards.
    pub shards: u16,
    /// Copies of each shard's log.
    pub replicas: usize,
}

impl ShardLayout {
    /// Shard `s`'s replicas in `view`, the primary first (see the module docs).
    pub fn replicas_of(&self, s: Shard, view: &View) -> Vec<NodeId> {
        self.placement(view).into_iter().nth(usize::from(s)).unwrap_or_default()
    }

    /// Every shard's replicas in `view`, each list's primary first.
    pub fn placement(&self, view: &View) -> Vec<Vec<NodeId>> {
        let mut led: HashMap<NodeId, usize> = HashMap::new();
        (0..self.shards)
            .map(|s| {
                let item = stable_hash(&[b"kv-shard".as_slice(), &s.to_le_bytes()].concat());
                let mut r = rendezvous(item, self.replicas.min(view.members().len()), view);
                // The replica leading the fewest shards so far; the first such.
                let pick = (0..r.len()).min_by_key(|i| (led.get(&r[*i]).copied().unwrap_or(0), *i)).unwrap_or(0);
                r[..=pick].rotate_right(1);
                if let Some(p) = r.first() {
                    *led.entry(*p).or_default() += 1;
                }
                r
            })
            .collect()
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
        Ok(self
            .placement(view)
            .into_iter()
            .map(|members| {
                let senders = members[..1].to_vec();
                SubgroupSpec { members, senders, window: 4, max_msg: 64, arena: 0, mode: Mode::Ordered, relay: false }
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

    #[test]
    fn primaries_are_spread_evenly_over_the_replicas_rendezvous_picks() {
        for (members, shards, replicas) in [(3u32, 2u16, 2usize), (3, 4, 2), (4, 4, 2), (3, 5, 3), (5, 8, 2)] {
            let l = ShardLayout { shards, replicas };
            let view = View::initial((0..members).map(NodeId).collect());
            let placed = l.placement(&view);
            let mut led = std::collections::BTreeMap::new();
            for (s, r) in placed.iter().enumerate() {
                // The same replicas rendezvous hashing picks; only the primary moves.
                let item = stable_hash(&[b"kv-shard".as_slice(), &(s as u16).to_le_bytes()].concat());
                let mut want = rendezvous(item, replicas, &view);
                let mut got = r.clone();
                want.sort();
                got.sort();
                assert_eq!(got, want, "shard {s}");
                assert_eq!(l.replicas_of(s as u16, &view), *r);
                *led.entry(r[0]).or_insert(0usize) += 1;
            }
            let most = led.values().copied().max().unwrap_or(0);
            let fewest = if led.len() < members as usize { 0 } else { led.values().copied().min().unwrap_or(0) };
            let even = usize::from(shards).div_ceil(members as usize);
            assert!(most <= even, "{members} members, {shards} shards: primaries {led:?}");
            assert!(most - fewest <= 1 || usize::from(shards) < members as usize, "{led:?}");
        }
    }
}
