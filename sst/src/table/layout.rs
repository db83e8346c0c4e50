//! Columns and the row layout: what a table's rows hold, column by column.

use crate::region::WORD;

/// Rows are padded to this many bytes.
pub const ROW_ALIGN: usize = 64;
/// A table has at most this many rows (push targets are a 64-bit rank mask).
pub const MAX_ROWS: usize = 64;

/// A counter column: a `u64` that only grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter {
    pub(super) off: usize,
}

/// A flag column: goes from false to true, never back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    pub(super) off: usize,
}

/// A fixed-size vector of counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterVec {
    pub(super) off: usize,
    pub(super) len: usize,
}

/// A plain byte area (whole words), published by some other column (as smc's slot
/// ring is by its `sent` counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes {
    pub(super) off: usize,
    pub(super) len: usize,
    /// Read in place from the owner's working row on shared tables (see
    /// [`LayoutBuilder::bytes_in_place`]).
    pub(super) in_place: bool,
    /// Read from the owner's live memory even after it was cut off (see
    /// [`LayoutBuilder::bytes_live`]).
    pub(super) live: bool,
}

impl Bytes {
    /// Size in bytes (a multiple of 8).
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for an empty area.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Byte range of every column declared before this area (from the row's start).
    pub fn before(&self) -> ColumnRange {
        ColumnRange { off: 0, len: self.off }
    }
    /// Byte range of `[at, at + len)` of this area within a row.
    pub fn sub_range(&self, at: usize, len: usize) -> ColumnRange {
        assert!(at % WORD == 0 && at + len <= self.len, "range {at}+{len} outside a {}-byte area", self.len);
        ColumnRange { off: self.off + at, len: len.div_ceil(WORD) * WORD }
    }
}

/// A byte field published by a guard counter stored after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guarded {
    pub(super) off: usize,
    pub(super) cap: usize,
    pub(super) guard: usize,
}

impl Counter {
    /// Byte range of this column within a row.
    pub fn range(&self) -> ColumnRange {
        ColumnRange { off: self.off, len: WORD }
    }
}
impl Flag {
    /// Byte range of this column within a row.
    pub fn range(&self) -> ColumnRange {
        ColumnRange { off: self.off, len: WORD }
    }
}
impl CounterVec {
    /// Number of counters.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when the vector has no counters.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Byte range of this column within a row.
    pub fn range(&self) -> ColumnRange {
        ColumnRange { off: self.off, len: self.len * WORD }
    }
}
impl Guarded {
    /// Capacity of the data area, in bytes.
    pub fn capacity(&self) -> usize {
        self.cap
    }
    /// Byte range of the data area within a row.
    pub fn data_range(&self) -> ColumnRange {
        ColumnRange { off: self.off, len: self.cap.div_ceil(WORD) * WORD }
    }
    /// Byte range of the guard within a row.
    pub fn guard_range(&self) -> ColumnRange {
        ColumnRange { off: self.guard, len: WORD }
    }
}

/// A byte range within a row: `[off, off + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnRange {
    /// Offset from the start of the row.
    pub off: usize,
    /// Length in bytes (a multiple of 8).
    pub len: usize,
}

impl ColumnRange {
    /// The smallest range covering `self` and `other`.
    pub fn join(self, other: ColumnRange) -> ColumnRange {
        let off = self.off.min(other.off);
        let end = (self.off + self.len).max(other.off + other.len);
        ColumnRange { off, len: end - off }
    }
}

/// Declares the columns of a row. Column offsets are fixed in declaration order.
///
/// ```
/// use spindle_sst::table::LayoutBuilder;
/// let mut b = LayoutBuilder::new();
/// let sent = b.counter("sent");
/// let received = b.counters("received", 3);
/// let layout = b.build();
/// assert_eq!(layout.row_bytes(), 64);
/// assert_eq!(received.len(), 3);
/// # let _ = sent;
/// ```
#[derive(Debug, Default)]
pub struct LayoutBuilder {
    pub(super) words: usize,
    pub(super) names: Vec<(String, usize)>,
    /// Where the live areas begin (they come last).
    live_from: Option<usize>,
}

impl LayoutBuilder {
    /// An empty layout.
    pub fn new() -> Self {
        Self::default()
    }
    fn take(&mut self, name: &str, words: usize) -> usize {
        assert!(self.live_from.is_none(), "`{name}` declared after a live area: live areas come last");
        let off = self.words * WORD;
        self.names.push((name.to_owned(), off));
        self.words += words;
        off
    }
    /// Adds a counter column.
    pub fn counter(&mut self, name: &str) -> Counter {
        Counter { off: self.take(name, 1) }
    }
    /// Adds a flag column.
    pub fn flag(&mut self, name: &str) -> Flag {
        Flag { off: self.take(name, 1) }
    }
    /// Adds a vector of `len` counters.
    pub fn counters(&mut self, name: &str, len: usize) -> CounterVec {
        CounterVec { off: self.take(name, len), len }
    }
    /// Adds a plain byte area of `len` bytes (rounded up to whole words).
    pub fn bytes(&mut self, name: &str, len: usize) -> Bytes {
        let words = len.div_ceil(WORD);
        Bytes { off: self.take(name, words), len: words * WORD, in_place: false, live: false }
    }

    /// Adds a byte area that, on a shared table ([`Table::create_shared`](super::Table::create_shared)), peers read
    /// straight from the owner's working row and that pushes never copy: zero copies
    /// beyond the owner's own write. For areas whose every part is published by a
    /// counter pushed after it was written, and not written again until every reader
    /// is done with it (smc's slot ring: `sent` publishes a slot, and a slot is reused
    /// only once every member delivered its message). Elsewhere it is a plain area.
    ///
    /// On `shm` the owner's [`LocalRow::write_bytes`](crate::table::LocalRow::write_bytes) into such an
    /// area is a plain copy, not word stores, and its soundness rests on that
    /// contract: in this process, a part's earlier readers must be ordered before its
    /// next write by a counter the writer reads with `Acquire` after they stored it
    /// with `Release`, and its readers after the write by the publishing counter.
    pub fn bytes_in_place(&mut self, name: &str, len: usize) -> Bytes {
        Bytes { in_place: true, ..self.bytes(name, len) }
    }
    /// Adds an in-place area ([`LayoutBuilder::bytes_in_place`]) that is also read
    /// from the owner's live memory after the owner was cut off, instead of from the
    /// snapshot taken then, so that a cut-off costs no copy of it (smc's arena of
    /// large payloads, up to gigabytes). Sound only where no part is written again
    /// until every member is done with it, which holds whether or not the owner was
    /// cut off. A live area comes last in the row: declaring anything after it panics.
    pub fn bytes_live(&mut self, name: &str, len: usize) -> Bytes {
        let b = Bytes { in_place: true, live: true, ..self.bytes(name, len) };
        self.live_from = Some(b.off);
        b
    }
    /// Adds a guarded byte field of `capacity` bytes (padded to whole words), followed
    /// by its guard counter.
    pub fn guarded(&mut self, name: &str, capacity: usize) -> Guarded {
        let off = self.take(name, capacity.div_ceil(WORD) + 1);
        Guarded { off, cap: capacity, guard: off + capacity.div_ceil(WORD) * WORD }
    }
    /// Finishes the layout; the row size is padded to [`ROW_ALIGN`].
    pub fn build(self) -> Layout {
        let row_bytes = (self.words * WORD).div_ceil(ROW_ALIGN).max(1) * ROW_ALIGN;
        let snapshot_bytes = self.live_from.unwrap_or(row_bytes);
        Layout { row_bytes, names: self.names, snapshot_bytes }
    }
}

/// A finished row layout.
#[derive(Debug, Clone)]
pub struct Layout {
    pub(super) row_bytes: usize,
    pub(super) names: Vec<(String, usize)>,
    /// The leading bytes of a row a cut-off snapshot copies (all but the live areas).
    pub(super) snapshot_bytes: usize,
}

impl Layout {
    /// Bytes per row (a multiple of [`ROW_ALIGN`]).
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }
    /// Region size needed for a table of `rows` rows (and its publication row).
    pub fn table_bytes(&self, rows: usize) -> usize {
        self.row_bytes * (rows + 1)
    }
    /// Column names and their byte offsets, in declaration order.
    pub fn columns(&self) -> impl Iterator<Item = (&str, usize)> {
        self.names.iter().map(|(n, o)| (n.as_str(), *o))
    }
    /// The whole row.
    pub fn row_range(&self) -> ColumnRange {
        ColumnRange { off: 0, len: self.row_bytes }
    }
}
