//! The shared state table: one row per member, columns declared with a layout builder.
//!
//! Every member holds a copy of every row. A member writes only its own row, through
//! the [`LocalRow`] handle that [`Table::create`] gives to the owner alone, and then
//! pushes byte ranges of it to chosen peers ([`Push`]). Reading a peer's state is a
//! local load. Spindle §2.2 describes the structure; Derecho's SST is the origin.
//!
//! Columns are monotonic, and the types say so:
//! - [`Counter`]: a `u64` that only grows ([`LocalRow::advance`] refuses to go back);
//! - [`Flag`]: false, then true forever;
//! - [`CounterVec`]: a fixed-size vector of counters;
//! - [`Guarded`]: a byte field followed by a guard counter. The owner writes the data,
//!   then raises the guard; pushes send them as two writes, data first
//!   ([`LocalRow::push_guarded`]). A reader that sees guard `g` sees data at least as
//!   new as the write that `g` published (never older).
//!
//! Rows are padded to 64 bytes so that rows written by different peers never share a
//! cache line.
//!
//! # Where peers' rows are read
//! A table made with [`Table::create`] reads every row from its own region, where
//! pushes land as copies (`tcp`, and drivers such as the simulators). A table made
//! with [`Table::create_shared`] over a transport that maps its peers' memory (`mem`,
//! `shm`) reads each peer's row in place, from that peer's publication row, and its
//! pushes are published once instead of copied to every peer (see [`crate::publish`]).
//! Either way a region holds one row more than the members: the publication row.

use crate::publish::PeerView;
use crate::region::{Region, WORD};
use crate::sync::atomic::Ordering;
use crate::sync::Arc;
use crate::transport::{NodeId, RegionId};
use thiserror::Error;

mod layout;
mod push;
mod row;

pub use layout::{Bytes, ColumnRange, Counter, CounterVec, Flag, Guarded, Layout, LayoutBuilder, MAX_ROWS, ROW_ALIGN};
pub use push::{Push, Pushes};
pub use row::LocalRow;

/// Errors building a table.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TableError {
    /// `me` is not among the members.
    #[error("node {0:?} is not a member of the table")]
    NotMember(NodeId),
    /// Too many or too few rows.
    #[error("a table needs 1..={MAX_ROWS} rows, got {0}")]
    Rows(usize),
    /// A member appears twice.
    #[error("node {0:?} appears twice in the member list")]
    Duplicate(NodeId),
    /// The transport has no region with this id.
    #[error("region {0:?} is not registered")]
    NoRegion(RegionId),
    /// The region cannot hold the table.
    #[error("region of {have} bytes cannot hold a table of {need} bytes")]
    RegionTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes in the region.
        have: usize,
    },
}

/// A byte area of one row, located in memory ([`Table::area`]).
#[derive(Debug, Clone, Copy)]
pub struct RowArea<'a> {
    region: &'a Region,
    base: usize,
    len: usize,
}

impl RowArea<'_> {
    /// Loads word `i` of the area (`Acquire`), as [`Table::word`] does.
    #[inline]
    pub fn word(&self, i: usize) -> u64 {
        assert!(i * WORD < self.len, "word {i} outside a {}-byte area", self.len);
        self.region.load(self.base + i * WORD, Ordering::Acquire)
    }
    /// Loads words `i..i + out.len()` of the area (`Acquire`), with one bounds check
    /// for all of them.
    #[inline]
    pub fn read_words(&self, i: usize, out: &mut [u64]) {
        assert!((i + out.len()) * WORD <= self.len, "words {i}.. outside a {}-byte area", self.len);
        self.region.load_words(self.base + i * WORD, out);
    }
    /// Copies `out.len()` bytes from byte `at` (a multiple of 8) of the area, as
    /// [`Table::read_bytes`] does.
    #[inline]
    pub fn read_bytes(&self, at: usize, out: &mut [u8]) {
        assert!(at % WORD == 0 && at + out.len() <= self.len, "read outside a {}-byte area", self.len);
        self.region.read_bytes(self.base + at, out);
    }
}

/// A write that would move a monotonic column backwards; the column is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("monotonic column would go back from {current} to {requested}")]
pub struct Regress {
    /// The column's value, which stays.
    pub current: u64,
    /// The refused value.
    pub requested: u64,
}

/// Errors writing a guarded field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum GuardedError {
    /// The data does not fit the field.
    #[error("{len} bytes do not fit a guarded field of {cap} bytes")]
    TooLong {
        /// Bytes offered.
        len: usize,
        /// Field capacity.
        cap: usize,
    },
    /// The guard must grow with every write.
    #[error(transparent)]
    Regress(#[from] Regress),
}

/// A table over a set of members, stored in one region.
#[derive(Debug)]
pub struct Table {
    layout: Layout,
    /// Shared with every [`Push`], whose clones and drops write the count beside
    /// the list: nothing read per message is taken from it (see `rows`).
    members: Arc<Vec<NodeId>>,
    /// The number of members, kept apart from `members` so that reading it does not
    /// touch the cache line that the predicate thread's pushes keep writing.
    rows: usize,
    my_rank: usize,
    region_id: RegionId,
    region: Arc<Region>,
    /// Per rank, the peer's memory to read its row from in place; empty when every
    /// row is read from `region` (see the module docs).
    views: Vec<Option<Arc<PeerView>>>,
    /// Offset of the publication row.
    pub_off: usize,
}

impl Table {
    /// Builds the table of `members` (row `i` belongs to `members[i]`) in `region`,
    /// and hands the owner of row `me` its [`LocalRow`].
    pub fn create(
        layout: Layout,
        members: &[NodeId],
        me: NodeId,
        region_id: RegionId,
        region: Arc<Region>,
    ) -> Result<LocalRow, TableError> {
        Table::build(layout, members, me, region_id, region, |_| None)
    }

    /// Like [`Table::create`], over `transport`'s region `region_id`; where the
    /// transport maps every peer's memory ([`crate::Transport::peer_view`]), peers'
    /// rows are read in place and pushes are published once (see the module docs).
    pub fn create_shared(
        layout: Layout,
        members: &[NodeId],
        me: NodeId,
        region_id: RegionId,
        transport: &dyn crate::Transport,
    ) -> Result<LocalRow, TableError> {
        let region = transport.region(region_id).ok_or(TableError::NoRegion(region_id))?.clone();
        Table::build(layout, members, me, region_id, region, |m| transport.peer_view(m, region_id))
    }

    fn build(
        layout: Layout,
        members: &[NodeId],
        me: NodeId,
        region_id: RegionId,
        region: Arc<Region>,
        view: impl Fn(NodeId) -> Option<Arc<PeerView>>,
    ) -> Result<LocalRow, TableError> {
        if members.is_empty() || members.len() > MAX_ROWS {
            return Err(TableError::Rows(members.len()));
        }
        for (i, m) in members.iter().enumerate() {
            if members[..i].contains(m) {
                return Err(TableError::Duplicate(*m));
            }
        }
        let my_rank = members.iter().position(|m| *m == me).ok_or(TableError::NotMember(me))?;
        let need = layout.table_bytes(members.len());
        if region.len() < need {
            return Err(TableError::RegionTooSmall { need, have: region.len() });
        }
        // Each peer's row is read in place where its memory is mapped here. A member
        // the transport does not connect (missing at setup) keeps its local row, which
        // nothing writes: it reads as its initial state, as a peer cut off at once.
        let mut views: Vec<Option<Arc<PeerView>>> =
            members.iter().map(|m| if *m == me { None } else { view(*m) }).collect();
        if views.iter().all(Option::is_none) {
            views.clear();
        }
        let pub_off = layout.row_bytes * members.len();
        for (rank, v) in views.iter().enumerate() {
            if let Some(v) = v {
                // What this table reads of the peer: its working row (in-place areas)
                // and its publication row.
                v.watch(rank * layout.row_bytes, layout.snapshot_bytes);
                v.watch(pub_off, layout.snapshot_bytes);
            }
        }
        let members = Arc::new(members.to_vec());
        let table =
            Arc::new(Table { layout, rows: members.len(), members, my_rank, region_id, region, views, pub_off });
        // The row's first byte, found once: every store of this node's goes through it.
        let base = table.at(my_rank, 0);
        Ok(LocalRow { table, base })
    }

    /// True if peers' rows are read in place and pushes are published once.
    pub fn is_shared(&self) -> bool {
        !self.views.is_empty()
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// Members in row order.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }
    /// Number of rows.
    #[inline]
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// This node's row.
    #[inline]
    pub fn my_rank(&self) -> usize {
        self.my_rank
    }
    /// Row of `node`, if a member.
    pub fn rank_of(&self, node: NodeId) -> Option<usize> {
        self.members.iter().position(|m| *m == node)
    }
    /// The region id the table lives in.
    pub fn region_id(&self) -> RegionId {
        self.region_id
    }

    #[inline]
    fn at(&self, rank: usize, off: usize) -> usize {
        assert!(rank < self.rows, "row {rank} out of range");
        rank * self.layout.row_bytes + off
    }

    /// The region and offset holding byte `off` of row `rank`, as this node reads it.
    #[inline]
    fn loc(&self, rank: usize, off: usize) -> (&Region, usize) {
        match self.views.get(rank) {
            Some(Some(v)) => (v.region(), self.pub_off + off),
            _ => (&self.region, self.at(rank, off)),
        }
    }

    /// Like `loc`, for byte `off` of area `b`: an in-place area of a peer is read from
    /// the peer's working row.
    #[inline]
    fn loc_bytes(&self, rank: usize, b: Bytes, off: usize) -> (&Region, usize) {
        match self.views.get(rank) {
            Some(Some(v)) if b.live => (v.live_region(), self.at(rank, b.off + off)),
            Some(Some(v)) if b.in_place => (v.region(), self.at(rank, b.off + off)),
            _ => self.loc(rank, b.off + off),
        }
    }

    /// A push of `range` of row `rank` as this node holds it, to the members whose
    /// ranks are set in `ranks` (this node's own bit is ignored): a relay, passing on
    /// a copy of a peer's row that this node received. Only on a table that copies
    /// rows (not shared), where every row lies in this node's region.
    pub fn forward(&self, rank: usize, range: ColumnRange, ranks: u64) -> Push {
        assert!(!self.is_shared(), "rows are read in place on a shared table");
        assert!(range.off + range.len <= self.layout.row_bytes, "range outside the row");
        Push {
            region: self.region_id,
            offset: self.at(rank, range.off),
            len: range.len,
            members: self.members.clone(),
            ranks: ranks & !(1u64 << self.my_rank),
            wake: true,
            stable: false,
            publish_at: None,
        }
    }

    /// True if peers read area `b` in place and pushes of it are not needed.
    pub fn reads_in_place(&self, b: Bytes) -> bool {
        b.in_place && self.is_shared()
    }

    /// Reads a counter of row `rank` (`Acquire`: data it guards is visible).
    #[inline]
    pub fn counter(&self, rank: usize, c: Counter) -> u64 {
        let (r, at) = self.loc(rank, c.off);
        r.load(at, Ordering::Acquire)
    }
    /// Reads a flag of row `rank`.
    #[inline]
    pub fn flag(&self, rank: usize, f: Flag) -> bool {
        let (r, at) = self.loc(rank, f.off);
        r.load(at, Ordering::Acquire) != 0
    }
    /// Reads counter `i` of a vector column of row `rank`.
    #[inline]
    pub fn counter_at(&self, rank: usize, v: CounterVec, i: usize) -> u64 {
        assert!(i < v.len, "index {i} outside a vector of {}", v.len);
        let (r, at) = self.loc(rank, v.off + i * WORD);
        r.load(at, Ordering::Acquire)
    }
    /// The minimum over all rows of a counter (the typical stability test).
    pub fn min_counter(&self, c: Counter) -> u64 {
        (0..self.rows()).map(|r| self.counter(r, c)).min().unwrap_or(0)
    }
    /// Loads word `word` of byte area `b` of row `rank` (`Acquire`).
    #[inline]
    pub fn word(&self, rank: usize, b: Bytes, word: usize) -> u64 {
        self.area(rank, b).word(word)
    }
    /// Byte area `b` of row `rank` as this node reads it, located once: for loops
    /// that read many words of one area (a sender's ring slots), where [`Table::word`]
    /// would find the row's memory again for every word.
    #[inline]
    pub fn area(&self, rank: usize, b: Bytes) -> RowArea<'_> {
        let (region, base) = self.loc_bytes(rank, b, 0);
        RowArea { region, base, len: b.len }
    }
    /// Copies `out.len()` bytes from `at` in byte area `b` of row `rank` (`Relaxed`
    /// loads; read the column that publishes the area first).
    pub fn read_bytes(&self, rank: usize, b: Bytes, at: usize, out: &mut [u8]) {
        assert!(at % WORD == 0 && at + out.len() <= b.len, "read outside a {}-byte area", b.len);
        let (r, at) = self.loc_bytes(rank, b, at);
        r.read_bytes(at, out);
    }
    /// Reads a guarded field of row `rank`: loads the guard (`Acquire`), then copies
    /// `out.len()` data bytes. Returns the guard. The data is at least as new as the
    /// write the guard published.
    pub fn guarded(&self, rank: usize, g: Guarded, out: &mut [u8]) -> u64 {
        assert!(out.len() <= g.cap, "read of {} bytes from a {}-byte field", out.len(), g.cap);
        let (r, at) = self.loc(rank, g.guard);
        let guard = r.load(at, Ordering::Acquire);
        let (r, at) = self.loc(rank, g.off);
        r.read_bytes(at, out);
        guard
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn table(n: u32, me: u32) -> (LocalRow, Counter, Flag, CounterVec, Guarded) {
        let mut b = LayoutBuilder::new();
        let c = b.counter("c");
        let f = b.flag("f");
        let v = b.counters("v", 3);
        let g = b.guarded("g", 12);
        let layout = b.build();
        let members: Vec<NodeId> = (0..n).map(NodeId).collect();
        let region = Arc::new(Region::new(layout.table_bytes(n as usize)));
        (Table::create(layout, &members, NodeId(me), RegionId(0), region).unwrap(), c, f, v, g)
    }

    #[test]
    fn layout_offsets_and_padding() {
        let (row, c, f, v, g) = table(2, 0);
        assert_eq!(c.range(), ColumnRange { off: 0, len: 8 });
        assert_eq!(f.range(), ColumnRange { off: 8, len: 8 });
        assert_eq!(v.range(), ColumnRange { off: 16, len: 24 });
        assert_eq!(g.data_range(), ColumnRange { off: 40, len: 16 });
        assert_eq!(g.guard_range(), ColumnRange { off: 56, len: 8 });
        assert_eq!(row.table().layout().row_bytes(), 64);
    }

    #[test]
    fn counters_refuse_to_go_back() {
        let (row, c, _, v, _) = table(2, 1);
        row.advance(c, 5).unwrap();
        assert_eq!(row.advance(c, 3), Err(Regress { current: 5, requested: 3 }));
        assert_eq!(row.table().counter(1, c), 5);
        row.advance(c, 5).unwrap();
        assert_eq!(row.increment(c), 6);
        row.advance_at(v, 2, 9).unwrap();
        assert!(row.advance_at(v, 2, 1).is_err());
        assert_eq!(row.table().counter_at(1, v, 2), 9);
        assert_eq!(row.table().counter(0, c), 0, "other rows untouched");
    }

    #[test]
    fn flags_and_guarded_fields() {
        let (row, _, f, _, g) = table(3, 2);
        assert!(!row.table().flag(2, f));
        row.set(f);
        assert!(row.table().flag(2, f));
        row.write_guarded(g, b"hello world!", 1).unwrap();
        let mut out = [0u8; 12];
        assert_eq!(row.table().guarded(2, g, &mut out), 1);
        assert_eq!(&out, b"hello world!");
        assert!(matches!(row.write_guarded(g, b"x", 1), Err(GuardedError::Regress(_))));
        assert!(matches!(row.write_guarded(g, &[0; 13], 2), Err(GuardedError::TooLong { .. })));
    }

    #[test]
    fn table_construction_errors() {
        let layout = LayoutBuilder::new().build();
        // One row and the publication row.
        let region = Arc::new(Region::new(128));
        let t = |m: &[u32], me| {
            let members: Vec<NodeId> = m.iter().copied().map(NodeId).collect();
            Table::create(layout.clone(), &members, NodeId(me), RegionId(0), region.clone()).err()
        };
        assert_eq!(t(&[], 0), Some(TableError::Rows(0)));
        assert_eq!(t(&[1, 2], 0), Some(TableError::NotMember(NodeId(0))));
        assert_eq!(t(&[1, 1], 1), Some(TableError::Duplicate(NodeId(1))));
        assert_eq!(t(&[1, 2], 1), Some(TableError::RegionTooSmall { need: 192, have: 128 }));
        assert_eq!(t(&[1], 1), None);
    }

    #[test]
    fn pushes_target_others_only_at_row_offsets() {
        let (row, c, _, _, g) = table(3, 1);
        let p = row.push(c.range());
        assert_eq!(p.offset, 64);
        assert_eq!(p.targets().collect::<Vec<_>>(), vec![NodeId(0), NodeId(2)]);
        let p = row.push_to(c.range(), 0b110);
        assert_eq!(p.targets().collect::<Vec<_>>(), vec![NodeId(2)]);
        let [d, gd] = row.push_guarded(g);
        assert_eq!((d.offset, d.len, gd.offset, gd.len), (64 + 40, 16, 64 + 56, 8));
    }
}
