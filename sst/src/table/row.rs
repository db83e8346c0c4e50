//! The owner's write handle on its own row ([`LocalRow`]): monotonic writes and the
//! pushes that send them.

use super::*;

/// Write access to this node's row. Only the owner holds it (it is not `Clone`);
/// readers use [`LocalRow::table`] or any `Arc<Table>`.
///
/// Writes are atomic-max operations, so several local threads may share the handle
/// (behind an `Arc`) and a column still never goes back.
#[derive(Debug)]
pub struct LocalRow {
    pub(super) table: Arc<Table>,
    /// This node's row's first byte in the region (its rank times the row's bytes).
    pub(super) base: usize,
}

impl LocalRow {
    /// The table (all rows, read-only).
    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    #[inline]
    fn my(&self, off: usize) -> usize {
        self.base + off
    }

    /// Raises counter `c` to `value`. Equal is a no-op; lower is refused.
    #[inline]
    pub fn advance(&self, c: Counter, value: u64) -> Result<(), Regress> {
        let cur = self.table.region.fetch_max(self.my(c.off), value, Ordering::Release);
        if cur > value {
            Err(Regress { current: cur, requested: value })
        } else {
            Ok(())
        }
    }
    /// Raises counter `c` by one; returns the new value.
    #[inline]
    pub fn increment(&self, c: Counter) -> u64 {
        // Only the owner writes its row, but local threads may share the handle:
        // retry on a concurrent raise rather than lose it.
        loop {
            let cur = self.get(c);
            if self.advance(c, cur + 1).is_ok() {
                return cur + 1;
            }
        }
    }
    /// This row's current value of `c`.
    #[inline]
    pub fn get(&self, c: Counter) -> u64 {
        self.table.region.load(self.my(c.off), Ordering::Relaxed)
    }
    /// Sets flag `f` (idempotent).
    pub fn set(&self, f: Flag) {
        self.table.region.store(self.my(f.off), 1, Ordering::Release);
    }
    /// Raises counter `i` of vector `v` to `value`.
    pub fn advance_at(&self, v: CounterVec, i: usize, value: u64) -> Result<(), Regress> {
        assert!(i < v.len, "index {i} outside a vector of {}", v.len);
        let cur = self.table.region.fetch_max(self.my(v.off + i * WORD), value, Ordering::Release);
        if cur > value {
            Err(Regress { current: cur, requested: value })
        } else {
            Ok(())
        }
    }
    /// Stores word `word` of byte area `b` in this row (`Relaxed`; publish with a
    /// counter afterwards).
    #[inline]
    pub fn store_word(&self, b: Bytes, word: usize, value: u64) {
        assert!(word * WORD < b.len, "word {word} outside a {}-byte area", b.len);
        self.table.region.store(self.my(b.off + word * WORD), value, Ordering::Relaxed);
    }
    /// Stores `values` from word `word` of byte area `b` of this row (`Relaxed`).
    #[inline]
    pub fn store_words(&self, b: Bytes, word: usize, values: &[u64]) {
        assert!((word + values.len()) * WORD <= b.len, "words outside a {}-byte area", b.len);
        self.table.region.store_words(self.my(b.off + word * WORD), values);
    }
    /// Writes `data` at `at` (word-aligned) in byte area `b` of this row (`Relaxed`
    /// word stores; in an in-place area on `shm`, a plain copy, for which the area's
    /// contract orders every other access of this process: see
    /// [`LayoutBuilder::bytes_in_place`](crate::LayoutBuilder::bytes_in_place)).
    pub fn write_bytes(&self, b: Bytes, at: usize, data: &[u8]) {
        assert!(at % WORD == 0 && at + data.len() <= b.len, "write outside a {}-byte area", b.len);
        if b.in_place {
            self.table.region.write_in_place(self.my(b.off + at), data);
        } else {
            self.table.region.write_bytes(self.my(b.off + at), data);
        }
    }
    /// Reads back `out.len()` bytes of this row's byte area `b` from `at`.
    pub fn read_bytes(&self, b: Bytes, at: usize, out: &mut [u8]) {
        self.table.read_bytes(self.table.my_rank, b, at, out);
    }
    /// Writes `data` into guarded field `g`, then raises its guard to `guard`, which
    /// must exceed the current guard.
    pub fn write_guarded(&self, g: Guarded, data: &[u8], guard: u64) -> Result<(), GuardedError> {
        if data.len() > g.cap {
            return Err(GuardedError::TooLong { len: data.len(), cap: g.cap });
        }
        let cur = self.table.region.load(self.my(g.guard), Ordering::Relaxed);
        if guard <= cur {
            return Err(Regress { current: cur, requested: guard }.into());
        }
        self.table.region.write_bytes(self.my(g.off), data);
        self.table.region.fetch_max(self.my(g.guard), guard, Ordering::Release);
        Ok(())
    }

    /// Reserves the memory under columns `range` of this row and, on a shared
    /// table, under their publication copy (where pushes of them land): see
    /// [`crate::region::Region::reserve`]. A node calls it at setup for the columns
    /// it will write, so a `/dev/shm` too small for them is an error then, not a
    /// `SIGBUS` at the first write.
    pub fn reserve(&self, range: ColumnRange) -> Result<(), crate::region::ReserveError> {
        assert!(range.off + range.len <= self.table.layout.row_bytes, "range outside the row");
        self.table.region.reserve(self.my(range.off), range.len)?;
        if self.table.is_shared() {
            self.table.region.reserve(self.table.pub_off + range.off, range.len)?;
        }
        Ok(())
    }

    /// [`LocalRow::reserve`] for `len` bytes at `at` of area `b` of this row's
    /// working copy (an area peers read in place: smc's arena, reserved as it
    /// fills). Panics if the range is outside the area.
    pub fn reserve_in(&self, b: Bytes, at: usize, len: usize) -> Result<(), crate::region::ReserveError> {
        assert!(at + len <= b.len, "range {at}+{len} outside a {}-byte area", b.len);
        self.table.region.reserve(self.my(b.off + at), len)
    }

    /// A push of `range` of this row to every other member.
    pub fn push(&self, range: ColumnRange) -> Push {
        let all = if self.table.rows() == 64 { u64::MAX } else { (1u64 << self.table.rows()) - 1 };
        self.push_to(range, all)
    }
    /// A push of `range` of this row to the members whose ranks are set in `ranks`
    /// (this node's own bit is ignored).
    pub fn push_to(&self, range: ColumnRange, ranks: u64) -> Push {
        assert!(range.off + range.len <= self.table.layout.row_bytes, "range outside the row");
        Push {
            region: self.table.region_id,
            offset: self.my(range.off),
            len: range.len,
            members: self.table.members.clone(),
            ranks: ranks & !(1u64 << self.table.my_rank),
            wake: true,
            stable: false,
            publish_at: self.table.is_shared().then_some(self.table.pub_off + range.off),
        }
    }
    /// The two pushes that publish guarded field `g` to every other member: the data,
    /// then the guard. Post them in this order.
    pub fn push_guarded(&self, g: Guarded) -> [Push; 2] {
        [self.push(g.data_range()), self.push(g.guard_range())]
    }
}
