//! The read path: a log's records from some number on, from segment files and from
//! the open segment in memory.

use super::*;
use crate::format::Tag;

/// Why a read stopped.
#[derive(Debug, Error)]
pub enum ReadError {
    /// This member does not hold the records from here on (a segment it was
    /// not re-seeded with, or records before the log's start).
    #[error("this member does not hold record {0:?}")]
    Gap(Lsn),
    /// A segment file is damaged or unreadable.
    #[error(transparent)]
    Segment(#[from] SegmentError),
    /// A segment file holds another number of records than committed.
    #[error("segment {id:?} holds {have} records, {want} were committed")]
    Count {
        /// The segment.
        id: SegmentId,
        /// Records in the file.
        have: u64,
        /// Records committed.
        want: u64,
    },
    /// A segment file did not reach the disk in time.
    #[error("segment {0:?} is not on disk yet")]
    NotFlushed(SegmentId),
    /// This member is not one of the log's replicas (it holds none of it).
    #[error("this member does not hold the log (it is not one of its replicas)")]
    NotReplica,
    /// A committed record of the open buffer does not verify.
    #[error("committed record {lsn:?} at byte {at} of the open buffer does not verify")]
    Damaged {
        /// The record.
        lsn: Lsn,
        /// Where it starts.
        at: usize,
    },
    /// This member of the log stopped.
    #[error("the log stopped: {0}")]
    Stopped(String),
    /// No replica of the log answered a read from a member that does not hold
    /// it ([`crate::service::LogService::read_page`]).
    #[error("no replica of the log answered: {0}")]
    Unreachable(String),
}

impl Shared {
    /// The records of committed segment `base` (`count` of them), from its file
    /// (waiting for the flush if it is not on disk yet).
    pub fn read_segment_records(&self, base: u64, count: u64) -> Result<Vec<Vec<u8>>, ReadError> {
        self.read_file(base, count, read_segment)
    }

    /// The tags of committed segment `base`'s records.
    pub fn read_segment_tags(&self, base: u64, count: u64) -> Result<Vec<Option<Tag>>, ReadError> {
        self.read_file(base, count, crate::backup::segment_tags)
    }

    fn read_file<T>(
        &self,
        base: u64,
        count: u64,
        read: impl Fn(&Path) -> Result<Vec<T>, SegmentError>,
    ) -> Result<Vec<T>, ReadError> {
        let id = self.seg(base);
        let path = self.path(base);
        if !path.exists() && !self.pool.wait_flushed(self.cfg.append_timeout) {
            return Err(ReadError::NotFlushed(id));
        }
        let recs = read(&path)?;
        if recs.len() as u64 != count {
            return Err(ReadError::Count { id, have: recs.len() as u64, want: count });
        }
        Ok(recs)
    }
}

impl Shared {
    pub fn read_from(self: &Arc<Self>, from: Lsn) -> ReadFrom {
        let open = self.open_records();
        let st = lock(&self.st);
        let mut sources: VecDeque<Source> = st
            .segments
            .iter()
            .filter(|(b, c)| *b + *c > from.0)
            .map(|(b, c)| Source::File { base: *b, count: *c })
            .collect();
        drop(st);
        if let Some((base, recs)) = open {
            if base + recs.len() as u64 > from.0 && !recs.is_empty() {
                sources.push_back(Source::Mem { base, recs });
            }
        }
        ReadFrom { next: from.0, sources, current: VecDeque::new(), shared: self.clone(), failed: false }
    }

    /// The open segment's base and records: at the primary those replicated so
    /// far, at a backup the valid prefix of its buffer. `None` if no segment is
    /// open, or if it closed while its buffer was copied: its memory may then have
    /// been zeroed or given to a later segment, so the bytes are not its records.
    /// A closed segment is read from its file once it is listed (before the next
    /// one opens); a read between its closing and its listing ends before it,
    /// which is a shorter read, never a wrong one.
    fn open_records(&self) -> Option<(u64, Vec<Vec<u8>>)> {
        // The primary's lock comes before the state's; base, buffer and end are
        // taken under it together.
        let (base, buf, end) = {
            let p = lock(&self.prim);
            match p.as_ref() {
                Some(pr) => (pr.base, pr.t.region(self.region(pr.slot)).cloned()?, Some(pr.rep.end().0)),
                None => {
                    drop(p);
                    let (id, buf) = self.pool.open_buffer()?;
                    (id.segment, buf, None)
                }
            }
        };
        let mut bytes = vec![0u8; end.unwrap_or(buf.len()).min(buf.len())];
        buf.read_bytes(0, &mut bytes);
        let still_open = self.buffer_now().is_some_and(|(b, r)| b == base && Arc::ptr_eq(&r, &buf));
        if !still_open {
            return None;
        }
        let r = scan(&bytes);
        Some((base, (0..r.records.len()).map(|i| r.data(&bytes, i).to_vec()).collect()))
    }
}

enum Source {
    File { base: u64, count: u64 },
    Mem { base: u64, recs: Vec<Vec<u8>> },
}

/// The records of a log from some number on ([`crate::service::LogService::read_from`]):
/// `(number, bytes)` in order; segment files are read one at a time as the
/// iteration reaches them. Stops after the first error.
pub struct ReadFrom {
    next: u64,
    sources: VecDeque<Source>,
    current: VecDeque<Vec<u8>>,
    shared: Arc<Shared>,
    failed: bool,
}

impl std::fmt::Debug for ReadFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadFrom").field("next", &self.next).finish()
    }
}

impl ReadFrom {
    fn load(&mut self) -> Result<bool, ReadError> {
        let Some(src) = self.sources.pop_front() else { return Ok(false) };
        let (base, recs) = match src {
            Source::Mem { base, recs } => (base, recs),
            Source::File { base, count } => (base, self.shared.read_segment_records(base, count)?),
        };
        if base > self.next {
            return Err(ReadError::Gap(Lsn(self.next)));
        }
        let skip = (self.next - base) as usize;
        self.current = recs.into_iter().skip(skip).collect();
        Ok(true)
    }
}

impl Iterator for ReadFrom {
    type Item = Result<(Lsn, Vec<u8>), ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        while self.current.is_empty() {
            match self.load() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
        let r = self.current.pop_front()?;
        let lsn = Lsn(self.next);
        self.next += 1;
        Some(Ok((lsn, r)))
    }
}
