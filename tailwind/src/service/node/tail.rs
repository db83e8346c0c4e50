//! Tailing: a log's records from some number on, as they commit.
//!
//! A record is committed once its append was acknowledged: the primary then
//! publishes the commit point (the number of the first record not acknowledged)
//! in a word of its own and of every backup ([`crate::replicate::Replicator::with_commit_word`]).
//! A reader shows the open segment's records only below that point, so it never
//! shows one that a failover may drop (an append written to some backups and
//! never acknowledged). Committed segments (closed, or cut to the agreed prefix
//! after a view change) are committed whole.
//!
//! The reader follows the open buffer as it grows: it checks each new record
//! with the buffer's header chain from where it stopped ([`crate::format::scan_from`]),
//! so a record costs its own bytes, not a scan of the buffer. At the primary an
//! append wakes waiting readers; at a backup (passive: nothing runs there when a
//! write lands) a reader looks again every millisecond. On tcp a backup learns the
//! commit point with the next append or the group's next heartbeat, whichever
//! comes first, so there the last record of a burst shows up to a heartbeat late.

use super::*;
use crate::format::{scan_from, RecordHeader, HEADER};
use spindle_sst::region::Region;

/// Where a reader is in the open buffer.
struct Cursor {
    base: u64,
    region: Arc<Region>,
    /// The byte where record `lsn` starts, and the header chain before it.
    pos: usize,
    crc: u32,
    lsn: u64,
}

/// The open segment a member holds for readers now.
pub struct Open {
    base: u64,
    region: Arc<Region>,
}

impl Shared {
    /// The commit point and the open segment, at a member that holds the log
    /// (`None` elsewhere).
    pub fn committed(&self) -> Option<(u64, Option<Open>)> {
        let p = lock(&self.prim);
        let (open, word) = match p.as_ref() {
            Some(pr) => (
                pr.t.region(self.region(pr.slot)).map(|r| Open { base: pr.base, region: r.clone() }),
                // With Ack::Disk an append is committed once synced (the word).
                match self.disk() {
                    true => pr.t.region(self.commit_region()).map(|r| r.load(0, Ordering::Acquire)),
                    false => Some(pr.rep.next_lsn().0),
                },
            ),
            None => (self.pool.open_buffer().map(|(id, region)| Open { base: id.segment, region }), None),
        };
        drop(p);
        let st = lock(&self.st);
        if !st.members.contains(&self.me) {
            return None;
        }
        let word = word.or_else(|| {
            let t = st.transport.as_ref()?;
            Some(t.region(self.commit_region())?.load(0, Ordering::Acquire))
        });
        let segments_end = st.segments.iter().next_back().map_or(0, |(b, c)| b + c);
        // At a backup the open buffer was looked up before the state: the primary
        // may have closed it since (and committed records of the next one). A
        // segment opens where the committed ones end, so one that starts before
        // their end is closed: its records past the close are not in it.
        let open = open.filter(|o| o.base >= segments_end);
        Some((word.unwrap_or(0).max(segments_end), open))
    }
}

/// A log's committed records from some number on, as they commit
/// ([`crate::service::LogService::subscribe`]). The iterator blocks until the next
/// record commits; it ends when the member stops, and after the first error.
/// [`Tail::next_within`] waits a bounded time instead.
pub struct Tail {
    shared: Arc<Shared>,
    next: u64,
    queue: VecDeque<Vec<u8>>,
    cursor: Option<Cursor>,
    failed: bool,
}

impl std::fmt::Debug for Tail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tail").field("next", &self.next).finish()
    }
}

impl Tail {
    pub(in crate::service) fn new(shared: Arc<Shared>, from: Lsn) -> Tail {
        Tail { shared, next: from.0, queue: VecDeque::new(), cursor: None, failed: false }
    }

    /// This reader as a [`futures::Stream`] ([`TailStream`]), for async code on
    /// any executor. The records come in the same order with the same checks;
    /// a thread of the stream's own waits for them as [`Tail::next_within`]
    /// does (a backup is passive: nothing would wake a task when a write lands)
    /// and hands them over through a bounded queue, so a task never polls in a
    /// loop and a slow consumer holds the reader back instead of buffering.
    /// Fails only if the thread cannot be started.
    ///
    /// ```no_run
    /// # fn demo(log: &spindle_tailwind::service::LogService) -> std::io::Result<()> {
    /// use futures::StreamExt;
    /// let mut records = log.subscribe(spindle_tailwind::service::Lsn(0)).into_stream()?;
    /// futures::executor::block_on(async {
    ///     while let Some(r) = records.next().await {
    ///         let (lsn, bytes) = r.expect("a committed record");
    ///         println!("{lsn:?}: {} bytes", bytes.len());
    ///     }
    /// });
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "async")]
    pub fn into_stream(self) -> std::io::Result<TailStream> {
        let (mut tx, rx) = futures::channel::mpsc::channel(STREAM_QUEUE);
        let mut tail = self;
        std::thread::Builder::new().name("tw-tail-stream".into()).spawn(move || {
            while !tx.is_closed() {
                match tail.next_within(STREAM_CHECK) {
                    Some(item) => {
                        let last = item.is_err();
                        // Blocks while the queue is full; fails once the stream is dropped.
                        if futures::executor::block_on(futures::SinkExt::send(&mut tx, item)).is_err() || last {
                            break;
                        }
                    }
                    None if tail.failed => break,
                    None => {}
                }
            }
        })?;
        Ok(TailStream { rx })
    }

    /// The number of the record the reader shows next.
    pub fn next_lsn(&self) -> Lsn {
        Lsn(self.next - self.queue.len() as u64)
    }

    /// The next committed record, waiting up to `within` for one; `None` if none
    /// committed in that time (or the reader ended).
    pub fn next_within(&mut self, within: Duration) -> Option<Result<(Lsn, Vec<u8>), ReadError>> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(r) = self.queue.pop_front() {
                return Some(Ok((Lsn(self.next - self.queue.len() as u64 - 1), r)));
            }
            if self.failed {
                return None;
            }
            match self.fill() {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let s = &self.shared;
            s.tail_waiters.fetch_add(1, Ordering::SeqCst);
            let st = lock(&s.st);
            if let Some(why) = st.stopped.clone() {
                drop(st);
                s.tail_waiters.fetch_sub(1, Ordering::SeqCst);
                self.failed = true;
                return Some(Err(ReadError::Stopped(why)));
            }
            let _ = s.cv.wait_timeout(st, left.min(Duration::from_millis(1)));
            s.tail_waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Queues the committed records from `next` that are there now; false if none.
    fn fill(&mut self) -> Result<bool, ReadError> {
        let Some((committed, open)) = self.shared.committed() else {
            return Err(ReadError::NotReplica);
        };
        if self.next >= committed {
            return Ok(false);
        }
        // A committed segment holding `next`.
        let seg = {
            let st = lock(&self.shared.st);
            st.segments.range(..=self.next).next_back().map(|(b, c)| (*b, *c)).filter(|(b, c)| self.next < b + c)
        };
        if let Some((base, count)) = seg {
            let mut it = self.shared.read_segment_records(base, count)?;
            it.drain(..(self.next - base) as usize);
            self.next += it.len() as u64;
            self.queue.extend(it);
            return Ok(true);
        }
        let has_open = open.is_some();
        let Some(open) = open.filter(|o| o.base <= self.next) else {
            // Not in a segment here, nor in the open one: a segment this member
            // lacks, unless a view change is under way (a segment recovered and not
            // committed yet, a member still being re-seeded).
            let st = lock(&self.shared.st);
            let settled = st.ready && st.running() && st.seeding.is_empty();
            return match settled && has_open {
                true => Err(ReadError::Gap(Lsn(self.next))),
                false => Ok(false),
            };
        };
        let fresh = match &self.cursor {
            Some(c) => c.base != open.base || !Arc::ptr_eq(&c.region, &open.region) || c.lsn > self.next,
            None => true,
        };
        if fresh {
            self.cursor = Some(Cursor { base: open.base, region: open.region, pos: 0, crc: 0, lsn: open.base });
        }
        let c = self.cursor.as_mut().expect("set above");
        let mut any = false;
        let mut unverified = false;
        while c.lsn < committed {
            let bytes = read_record(&c.region, c.pos).unwrap_or_default();
            let r = scan_from(&bytes, c.crc, 1);
            let Some(&rec) = r.records.first() else {
                unverified = true;
                break;
            };
            if c.lsn >= self.next {
                self.queue.push_back(bytes[rec.at.0..rec.at.0 + rec.len].to_vec());
                self.next = c.lsn + 1;
                any = true;
            }
            c.pos += r.end.0;
            c.crc = r.crc;
            c.lsn += 1;
        }
        if !unverified {
            return Ok(any);
        }
        // A committed record that does not verify. At a backup the primary may have
        // closed the segment while this reader was in it: the buffer is then flushed,
        // zeroed and reused for the next segment, and the record is read from the
        // closed segment on the next fill. Only a buffer still open for the same
        // segment is damaged.
        let still_open = self.shared.buffer_now().is_some_and(|(b, r)| b == c.base && Arc::ptr_eq(&r, &c.region));
        if still_open {
            return Err(ReadError::Damaged { lsn: Lsn(c.lsn), at: c.pos });
        }
        self.cursor = None;
        Ok(any)
    }
}

/// The bytes of the record whose header is at `pos` (header, data, checksum
/// entry), if its length fits the buffer.
pub(super) fn read_record(region: &Region, pos: usize) -> Option<Vec<u8>> {
    let mut h = [0u8; HEADER];
    if pos + HEADER > region.len() {
        return None;
    }
    region.read_bytes(pos, &mut h);
    let len = bytemuck::pod_read_unaligned::<RecordHeader>(&h).len as usize;
    let total = HEADER + len.div_ceil(8) * 8 + ENTRY;
    if !pos.checked_add(total).is_some_and(|end| end <= region.len()) {
        return None;
    }
    let mut bytes = vec![0u8; total];
    region.read_bytes(pos, &mut bytes);
    Some(bytes)
}

#[cfg(feature = "async")]
/// Records a [`TailStream`] holds ready before its thread waits for the consumer.
const STREAM_QUEUE: usize = 256;
#[cfg(feature = "async")]
/// How often a stream's thread looks whether the stream was dropped while no
/// record commits: the longest its thread outlives the stream.
const STREAM_CHECK: Duration = Duration::from_millis(50);

#[cfg(feature = "async")]
/// A tailing reader as a [`futures::Stream`] of committed records
/// ([`Tail::into_stream`]). It ends as the [`Tail`] does: when the member stops,
/// or after the first error (which it yields). Dropping it never blocks; its
/// thread ends within 50 ms after.
pub struct TailStream {
    rx: futures::channel::mpsc::Receiver<Result<(Lsn, Vec<u8>), ReadError>>,
}

#[cfg(feature = "async")]
impl std::fmt::Debug for TailStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TailStream").finish_non_exhaustive()
    }
}

#[cfg(feature = "async")]
impl futures::Stream for TailStream {
    type Item = Result<(Lsn, Vec<u8>), ReadError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        futures::Stream::poll_next(std::pin::Pin::new(&mut self.rx), cx)
    }
}

impl Iterator for Tail {
    type Item = Result<(Lsn, Vec<u8>), ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_within(Duration::from_secs(1)) {
                Some(r) => return Some(r),
                None if self.failed => return None,
                None => {}
            }
        }
    }
}
