//! The shard map: which shard owns each key, and which key ranges are moving.
//!
//! Keys are placed by a 64-bit hash ([`key_hash`]); the map splits the hash space
//! into spans, each owned by one shard. A map travels as the store's group's
//! layout document, so it changes only with a view and every member holds the same
//! map in the same view: the view's number is the map's version. It changes by
//! edits ([`MapEdit`]), applied by the view's leader ([`ShardMap::apply`]):
//!
//! - [`MapEdit::Migrate`] moves the ownership of a hash range to another shard at
//!   once and records the move as a [`Migration`] in progress: the new owner serves
//!   the range from this view on, and pulls the range's records from the old owner
//!   while it does.
//! - [`MapEdit::Finish`] ends a migration once its records are all pulled.
//!
//! ```
//! use spindle_kv::shard::{key_hash, MapEdit, Range, ShardMap};
//! let map = ShardMap::new(2).unwrap();
//! let h = key_hash(b"colour");
//! let from = map.owner(h);
//! let to = 1 - from;
//! let moved = map.apply(&MapEdit::Migrate { range: Range::one(h), to }).unwrap().unwrap();
//! assert_eq!(moved.owner(h), to);
//! assert_eq!(moved.pulling(h).map(|m| m.from), Some(from));
//! let id = moved.migrations()[0].id;
//! let done = moved.apply(&MapEdit::Finish { id }).unwrap().unwrap();
//! assert!(done.pulling(h).is_none());
//! assert_eq!(ShardMap::decode(&done.encode()).unwrap(), done);
//! ```

use serde::{Deserialize, Serialize};

/// A shard's number.
pub type Shard = u16;

/// The most shards a store has.
pub const MAX_SHARDS: u16 = 64;
/// The most spans a map holds (a document stays well under a view's limit).
pub const MAX_SPANS: usize = 512;
/// The most migrations in progress at once.
pub const MAX_MIGRATIONS: usize = 16;
/// The version byte a map's encoding starts with.
pub const MAP_VERSION: u8 = 1;

/// The hash that places `key`: FNV-1a, mixed (the same in every process).
pub fn key_hash(key: &[u8]) -> u64 {
    spindle_views::layout::mix(spindle_views::layout::stable_hash(key))
}

/// A range of key hashes, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Range {
    /// The lowest hash in it.
    pub first: u64,
    /// The highest hash in it.
    pub last: u64,
}

impl Range {
    /// Every hash.
    pub const ALL: Range = Range { first: 0, last: u64::MAX };

    /// The range of one hash.
    pub fn one(h: u64) -> Range {
        Range { first: h, last: h }
    }

    /// Whether `h` is in it.
    pub fn contains(&self, h: u64) -> bool {
        self.first <= h && h <= self.last
    }

    /// Whether it shares a hash with `other`.
    pub fn overlaps(&self, other: &Range) -> bool {
        self.first <= other.last && other.first <= self.last
    }

    /// Part `i` of `n` equal parts of the hash space.
    pub fn part(i: u16, n: u16) -> Range {
        let n = u128::from(n.max(1));
        let at = |i: u128| ((i << 64) / n) as u64;
        let last = if u128::from(i) + 1 >= n { u64::MAX } else { at(u128::from(i) + 1) - 1 };
        Range { first: at(u128::from(i)), last }
    }
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}-{:016x}", self.first, self.last)
    }
}

/// Why a range did not parse (see [`Range`]'s `FromStr`: `FIRST-LAST` in hex).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a range is FIRST-LAST, two hex numbers of up to 16 digits with FIRST <= LAST")]
pub struct RangeParseError;

impl std::str::FromStr for Range {
    type Err = RangeParseError;
    fn from_str(s: &str) -> Result<Range, RangeParseError> {
        let (a, b) = s.split_once('-').ok_or(RangeParseError)?;
        let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| RangeParseError);
        let r = Range { first: hex(a)?, last: hex(b)? };
        if r.first > r.last {
            return Err(RangeParseError);
        }
        Ok(r)
    }
}

/// A range whose ownership moved and whose records the new owner is pulling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    /// Its number, unique in the map's history.
    pub id: u64,
    /// The hashes it moves.
    pub range: Range,
    /// The old owner (it holds the records).
    pub from: Shard,
    /// The new owner (it serves the range and pulls).
    pub to: Shard,
}

/// A change of the map (applied by the view's leader, see [`ShardMap::apply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MapEdit {
    /// Moves `range` (owned by one shard now) to shard `to`.
    Migrate {
        /// The hashes to move.
        range: Range,
        /// The new owner.
        to: Shard,
    },
    /// Ends migration `id`: its records are all at the new owner.
    Finish {
        /// The migration.
        id: u64,
    },
}

impl MapEdit {
    /// Its bytes (a layout edit).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![MAP_VERSION];
        v.extend(postcard::to_stdvec(self).unwrap_or_default());
        v
    }

    /// Decodes an edit; a typed error for bytes that are not one.
    pub fn decode(bytes: &[u8]) -> Result<MapEdit, MapError> {
        decode_versioned(bytes)
    }
}

/// Why a map or an edit was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum MapError {
    /// The bytes are not a map (or an edit) of this version.
    #[error("not a shard map or edit of this version")]
    Malformed,
    /// The map's parts do not fit together (spans not covering the hashes in
    /// order, an owner or migration out of range, overlapping migrations).
    #[error("a shard map that does not hold together")]
    Inconsistent,
    /// A store has between 1 and [`MAX_SHARDS`] shards.
    #[error("a store has between 1 and {MAX_SHARDS} shards, not {0}")]
    Shards(u16),
    /// The shard named is not one of the map's.
    #[error("shard {0} is not one of the map's")]
    NoShard(Shard),
    /// The range is owned by more than one shard now, or overlaps a migration in
    /// progress.
    #[error("the range is not owned by one shard, or is moving already")]
    Busy,
    /// The map would hold more than [`MAX_SPANS`] spans or [`MAX_MIGRATIONS`]
    /// migrations.
    #[error("the map is full: too many spans or migrations")]
    Full,
}

fn decode_versioned<T: for<'a> Deserialize<'a>>(bytes: &[u8]) -> Result<T, MapError> {
    match bytes.split_first() {
        Some((&MAP_VERSION, rest)) => match postcard::take_from_bytes(rest) {
            Ok((v, [])) => Ok(v),
            _ => Err(MapError::Malformed),
        },
        _ => Err(MapError::Malformed),
    }
}

/// The shard map (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    shards: u16,
    /// (first hash, owner) in order of first hash; the first starts at 0. Spans
    /// next to each other have different owners.
    spans: Vec<(u64, Shard)>,
    migrations: Vec<Migration>,
    next_id: u64,
}

impl ShardMap {
    /// `shards` shards, each owning an equal part of the hashes.
    pub fn new(shards: u16) -> Result<ShardMap, MapError> {
        if shards == 0 || shards > MAX_SHARDS {
            return Err(MapError::Shards(shards));
        }
        let spans = (0..shards).map(|i| (Range::part(i, shards).first, i)).collect();
        Ok(ShardMap { shards, spans, migrations: Vec::new(), next_id: 1 })
    }

    /// How many shards it has.
    pub fn shards(&self) -> u16 {
        self.shards
    }

    fn span_at(&self, h: u64) -> usize {
        self.spans.partition_point(|(first, _)| *first <= h) - 1
    }

    /// The shard that owns hash `h`.
    pub fn owner(&self, h: u64) -> Shard {
        self.spans[self.span_at(h)].1
    }

    /// The shard that owns `key`.
    pub fn owner_of(&self, key: &[u8]) -> Shard {
        self.owner(key_hash(key))
    }

    /// The migration in progress that moves `h`, if any.
    pub fn pulling(&self, h: u64) -> Option<&Migration> {
        self.migrations.iter().find(|m| m.range.contains(h))
    }

    /// The migrations in progress.
    pub fn migrations(&self) -> &[Migration] {
        &self.migrations
    }

    /// The spans: each range with its owner, in hash order.
    pub fn spans(&self) -> Vec<(Range, Shard)> {
        let mut out = Vec::with_capacity(self.spans.len());
        for (i, (first, owner)) in self.spans.iter().enumerate() {
            let last = self.spans.get(i + 1).map_or(u64::MAX, |(next, _)| next - 1);
            out.push((Range { first: *first, last }, *owner));
        }
        out
    }

    /// The share of the hash space each shard owns, in parts per million.
    pub fn shares(&self) -> Vec<u32> {
        let mut out = vec![0u128; usize::from(self.shards)];
        for (r, owner) in self.spans() {
            out[usize::from(owner)] += u128::from(r.last - r.first) + 1;
        }
        out.into_iter().map(|n| ((n * 1_000_000) >> 64) as u32).collect()
    }

    /// The map `edit` makes of this one: `Ok(None)` if this one already says what
    /// it asks (edits are retried until a view holds them), or why it cannot
    /// apply. Deterministic.
    pub fn apply(&self, edit: &MapEdit) -> Result<Option<ShardMap>, MapError> {
        match *edit {
            MapEdit::Migrate { range, to } => {
                if to >= self.shards {
                    return Err(MapError::NoShard(to));
                }
                let (a, b) = (self.span_at(range.first), self.span_at(range.last));
                if a == b && self.spans[a].1 == to {
                    return Ok(None);
                }
                let from = self.spans[a].1;
                if a != b || self.migrations.iter().any(|m| m.range.overlaps(&range)) {
                    return Err(MapError::Busy);
                }
                if self.migrations.len() >= MAX_MIGRATIONS {
                    return Err(MapError::Full);
                }
                let mut next = self.clone();
                next.set_owner(range, to);
                next.migrations.push(Migration { id: self.next_id, range, from, to });
                next.next_id += 1;
                if next.spans.len() > MAX_SPANS {
                    return Err(MapError::Full);
                }
                Ok(Some(next))
            }
            MapEdit::Finish { id } => {
                let Some(i) = self.migrations.iter().position(|m| m.id == id) else { return Ok(None) };
                let mut next = self.clone();
                next.migrations.remove(i);
                Ok(Some(next))
            }
        }
    }

    /// Gives `range` (inside one span) to `to`, merging spans that end up with one
    /// owner.
    fn set_owner(&mut self, range: Range, to: Shard) {
        let i = self.span_at(range.first);
        let owner = self.spans[i].1;
        let end = self.spans.get(i + 1).map(|(f, _)| *f);
        let mut pieces = Vec::with_capacity(3);
        if self.spans[i].0 < range.first {
            pieces.push((self.spans[i].0, owner));
        }
        pieces.push((range.first, to));
        if range.last < u64::MAX && end.map_or(true, |e| range.last + 1 < e) {
            pieces.push((range.last + 1, owner));
        }
        self.spans.splice(i..i + 1, pieces);
        self.spans.dedup_by(|b, a| a.1 == b.1);
    }

    /// Its bytes (the layout document).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![MAP_VERSION];
        v.extend(postcard::to_stdvec(self).unwrap_or_default());
        v
    }

    /// Decodes and checks a map (the bytes come from peers: untrusted).
    pub fn decode(bytes: &[u8]) -> Result<ShardMap, MapError> {
        let m: ShardMap = decode_versioned(bytes)?;
        m.check()?;
        Ok(m)
    }

    /// Whether its parts fit together (see [`MapError::Inconsistent`]).
    fn check(&self) -> Result<(), MapError> {
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(MapError::Shards(self.shards));
        }
        let ordered = self.spans.first().is_some_and(|s| s.0 == 0)
            && self.spans.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 != w[1].1)
            && self.spans.iter().all(|s| s.1 < self.shards);
        let moving = self.migrations.iter().enumerate().all(|(i, m)| {
            m.range.first <= m.range.last
                && m.from < self.shards
                && m.to < self.shards
                && m.from != m.to
                && m.id < self.next_id
                && self.migrations[..i].iter().all(|o| !o.range.overlaps(&m.range) && o.id != m.id)
        });
        if !ordered || !moving || self.spans.len() > MAX_SPANS || self.migrations.len() > MAX_MIGRATIONS {
            return Err(MapError::Inconsistent);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_hashes_without_gaps() {
        for n in [1u16, 2, 3, 7, 64] {
            let parts: Vec<Range> = (0..n).map(|i| Range::part(i, n)).collect();
            assert_eq!(parts[0].first, 0);
            assert_eq!(parts[usize::from(n) - 1].last, u64::MAX);
            for w in parts.windows(2) {
                assert_eq!(w[0].last + 1, w[1].first);
            }
            let m = ShardMap::new(n).unwrap();
            assert!(m.shares().iter().all(|s| s.abs_diff(1_000_000 / u32::from(n)) <= 1), "{:?}", m.shares());
        }
        assert_eq!(ShardMap::new(0), Err(MapError::Shards(0)));
        assert_eq!(ShardMap::new(MAX_SHARDS + 1), Err(MapError::Shards(MAX_SHARDS + 1)));
    }

    #[test]
    fn a_migration_moves_ownership_at_once_and_finishes() {
        let m = ShardMap::new(2).unwrap();
        let r = Range { first: 10, last: 20 };
        let edit = MapEdit::Migrate { range: r, to: 1 };
        let moved = m.apply(&edit).unwrap().unwrap();
        assert_eq!(moved.owner(9), 0);
        assert_eq!(moved.owner(10), 1);
        assert_eq!(moved.owner(20), 1);
        assert_eq!(moved.owner(21), 0);
        assert_eq!(moved.pulling(15), Some(&Migration { id: 1, range: r, from: 0, to: 1 }));
        assert_eq!(moved.apply(&edit), Ok(None), "asked again: already so");
        assert_eq!(moved.apply(&MapEdit::Migrate { range: Range { first: 15, last: 30 }, to: 0 }), Err(MapError::Busy));
        let done = moved.apply(&MapEdit::Finish { id: 1 }).unwrap().unwrap();
        assert_eq!(done.apply(&MapEdit::Finish { id: 1 }), Ok(None));
        // Moving it back merges the spans again.
        let back = done.apply(&MapEdit::Migrate { range: r, to: 0 }).unwrap().unwrap();
        let back = back.apply(&MapEdit::Finish { id: 2 }).unwrap().unwrap();
        assert_eq!(back.spans(), m.spans());
        assert_eq!(m.apply(&MapEdit::Migrate { range: r, to: 2 }), Err(MapError::NoShard(2)));
        assert_eq!(m.apply(&MapEdit::Migrate { range: Range::ALL, to: 1 }), Err(MapError::Busy), "two owners");
    }

    #[test]
    fn the_top_of_the_hash_space_moves_too() {
        let m = ShardMap::new(1).unwrap();
        let n = ShardMap { shards: 2, ..m };
        let top = Range { first: u64::MAX - 5, last: u64::MAX };
        let moved = n.apply(&MapEdit::Migrate { range: top, to: 1 }).unwrap().unwrap();
        assert_eq!(moved.owner(u64::MAX), 1);
        assert_eq!(moved.owner(u64::MAX - 6), 0);
        assert_eq!(moved.spans().len(), 2);
    }

    #[test]
    fn damaged_maps_and_edits_are_refused() {
        let m = ShardMap::new(3).unwrap();
        let good = m.encode();
        assert_eq!(ShardMap::decode(&good), Ok(m.clone()));
        let mut other = good.clone();
        other[0] = MAP_VERSION + 1;
        assert_eq!(ShardMap::decode(&other), Err(MapError::Malformed));
        assert_eq!(ShardMap::decode(&good[..good.len() - 1]), Err(MapError::Malformed));
        for bad in [
            ShardMap { spans: vec![(5, 0)], ..m.clone() },
            ShardMap { spans: vec![(0, 0), (9, 0)], ..m.clone() },
            ShardMap { spans: vec![(0, 3)], ..m.clone() },
            ShardMap { migrations: vec![Migration { id: 1, range: Range::ALL, from: 0, to: 0 }], ..m.clone() },
        ] {
            assert_eq!(ShardMap::decode(&bad.encode()), Err(MapError::Inconsistent), "{bad:?}");
        }
        assert_eq!(MapEdit::decode(&MapEdit::Finish { id: 7 }.encode()), Ok(MapEdit::Finish { id: 7 }));
        assert_eq!(MapEdit::decode(b"\x01\xff"), Err(MapError::Malformed));
        assert_eq!("10-20".parse::<Range>(), Ok(Range { first: 16, last: 32 }));
        assert!("20-10".parse::<Range>().is_err() && "x".parse::<Range>().is_err());
    }
}
