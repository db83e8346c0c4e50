//! The primary's data path: an append is written into the primary's buffer and, as
//! the same bytes, into every backup's buffer by one one-sided write per backup
//! (`spindle_sst::transport`); it is acknowledged only once every backup's write completed
//! (mem and shm: landed in the backup's memory; tcp: applied by the backup's
//! transport, on its predicate thread, which copies bytes without parsing them).
//! Backups run no code of their own for it.
//!
//! A batch ([`Replicator::append_batch`]) goes as one write per backup and one wait.
//!
//! On tcp a completion is the backup's acknowledgement frame, which the backup's
//! transport sends at the end of the predicate-thread pass that applied the write
//! (a parked predicate thread is woken by the bytes arriving; the transport's
//! fallback thread receives and acknowledges instead while the predicate thread is
//! busy elsewhere for more than 10 ms); on mem and shm a write is complete when it
//! has landed. No application thread of the backup is involved either way.
//!
//! [`crate::service`] drives it inside a group: buffers, views and failover.

use crate::format::{Appender, BufLen, Encoded, FormatError, Offset, Tag};
use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_sst::transport::{NodeId, RegionId, Transport, WriteOp};
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

/// A record's place in the log: its number (0, 1, ...), counted across segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct Lsn(pub u64);

/// Why an append was not acknowledged.
#[derive(Debug, Error)]
pub enum AppendError {
    /// The record does not fit (too large, or the buffer is full: open another).
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A backup could not take the write (cut off, failed, or misconfigured): the
    /// view must change before the log goes on.
    #[error("backup {node}: {why}")]
    Backup {
        /// The backup.
        node: NodeId,
        /// What failed.
        why: String,
    },
    /// A backup did not complete the write in time.
    #[error("backup {0} did not complete the write within the timeout")]
    Timeout(NodeId),
    /// The view changed during the append: it may or may not be in the log the new
    /// view recovers (read the log to know; see [`crate::service`]).
    #[error("the view changed during the append: it may or may not be in the recovered log")]
    ViewChanged,
    /// No primary took the append in time (a view change or recovery under way, or
    /// the backups refused a new buffer for that long).
    #[error("no primary took the append: {0}")]
    Unavailable(String),
    /// The record (or batch) does not fit in one buffer.
    #[error("{need} bytes of records do not fit a {buffer}-byte buffer")]
    TooLarge {
        /// Bytes the records take in a buffer.
        need: usize,
        /// The buffer's size.
        buffer: usize,
    },
    /// Not appended: [`crate::service::LogService::append_if`] expected another
    /// next record number.
    #[error("the log's next record is {next:?}, not the expected one")]
    Conflict {
        /// The log's next record number.
        next: Lsn,
    },
    /// Not appended: a tagged append out of its producer's order (see
    /// [`crate::service::LogService::append_once`]).
    #[error("out of order: {0}")]
    Sequence(String),
    /// This node's log stopped (its group stopped).
    #[error("the log stopped: {0}")]
    Stopped(String),
}

/// The primary's side of one replicated buffer (see the module docs).
#[derive(Debug)]
pub struct Replicator {
    t: Arc<dyn Transport>,
    region: RegionId,
    backups: Vec<NodeId>,
    log: Appender,
    next: u64,
    timeout: Duration,
    fence: Option<Arc<AtomicBool>>,
    commit: Option<RegionId>,
}

impl Replicator {
    /// Replicates region `region` of transport `t` (the primary's buffer, zeroed) to
    /// the same region at each of `backups` (zeroed, registered at each). An append
    /// waits up to `timeout` for the backups.
    pub fn new(
        t: Arc<dyn Transport>,
        region: RegionId,
        backups: Vec<NodeId>,
        timeout: Duration,
    ) -> Result<Replicator, AppendError> {
        let size = t.region(region).map(|r| r.len()).ok_or(AppendError::Backup {
            node: t.local_id(),
            why: format!("region {region:?} is not registered here"),
        })?;
        Ok(Replicator {
            t,
            region,
            backups,
            log: Appender::new(BufLen(size)),
            next: 0,
            timeout,
            fence: None,
            commit: None,
        })
    }

    /// Numbers the records from `first` on (a segment that continues a log).
    pub fn starting_at(mut self, first: Lsn) -> Replicator {
        self.next = first.0;
        self
    }

    /// Stops waiting for the backups once `fence` is set (the view is ending): the
    /// append then fails with [`AppendError::ViewChanged`], as does one whose
    /// writes completed but that finds the fence up when it would acknowledge.
    pub fn with_fence(mut self, fence: Arc<AtomicBool>) -> Replicator {
        self.fence = Some(fence);
        self
    }

    /// Publishes the commit point (the number of the first record not yet
    /// acknowledged) in word 0 of region `commit`, here and at every backup, after
    /// each acknowledged append. The write to the backups is posted, not flushed:
    /// `mem` and `shm` apply it at once; `tcp` sends it with the next append or the
    /// next flush of the transport (the group's heartbeat), so it costs the data
    /// path no system call.
    pub fn with_commit_word(mut self, commit: RegionId) -> Replicator {
        self.commit = Some(commit);
        self
    }

    fn publish_commit(&self) {
        let Some(region) = self.commit else { return };
        let Some(local) = self.t.region(region) else { return };
        local.store(0, self.next, Ordering::Release);
        let op = WriteOp { region, src_offset: 0, dst_offset: 0, len: 8, signaled: false, wake: false, stable: false };
        for &b in &self.backups {
            // A backup that cannot take it fails the next append, which is what matters.
            let _ = self.t.post_write(b, op);
        }
    }

    /// The number the next record gets.
    pub fn next_lsn(&self) -> Lsn {
        Lsn(self.next)
    }

    /// Where the next append starts in the buffer.
    pub fn end(&self) -> Offset {
        self.log.end()
    }

    /// Appends one record; returns once every backup holds it.
    pub fn append(&mut self, data: &[u8]) -> Result<Lsn, AppendError> {
        Ok(self.append_batch(&[data])?[0])
    }

    /// Appends several records with one write per backup and one wait; returns their
    /// numbers once every backup holds all of them. On an error none is acknowledged
    /// and the buffer must not be appended to again (the view changes first).
    pub fn append_batch(&mut self, records: &[&[u8]]) -> Result<Vec<Lsn>, AppendError> {
        self.append_batch_tagged(records, None)
    }

    /// [`Replicator::append_batch`] of records that carry tags: the producer's
    /// numbers `first.seq`, `first.seq + 1`, ... (see [`crate::format::Tag`]).
    pub fn append_batch_tagged(&mut self, records: &[&[u8]], first: Option<Tag>) -> Result<Vec<Lsn>, AppendError> {
        let mut next = self.log.clone();
        let mut encoded: Vec<Encoded> = Vec::with_capacity(records.len());
        for (i, r) in records.iter().enumerate() {
            let tag = first.map(|t| Tag { producer: t.producer, seq: t.seq + i as u64 });
            let e = next.encode_tagged(r, tag)?;
            next.commit(&e);
            encoded.push(e);
        }
        let (start, end) = (self.log.end().0, next.end().0);
        if end == start {
            return Ok(Vec::new());
        }
        let local = self.t.region(self.region).expect("checked at construction");
        for e in &encoded {
            local.write_bytes(e.at.0, &e.bytes);
        }
        let op = WriteOp {
            region: self.region,
            src_offset: start,
            dst_offset: start,
            len: end - start,
            signaled: true,
            wake: false,
            stable: false,
        };
        let mut posted = Vec::with_capacity(self.backups.len());
        for &b in &self.backups {
            let seq = self.t.post_write(b, op).map_err(|e| AppendError::Backup { node: b, why: e.to_string() })?;
            posted.push((b, seq));
        }
        self.t.flush();
        self.wait(&posted)?;
        self.log = next;
        let first = self.next;
        self.next += records.len() as u64;
        self.publish_commit();
        Ok((first..self.next).map(Lsn).collect())
    }

    /// Waits until every backup completed its write (bounded by the timeout), in
    /// slices of a millisecond so that a view's end (the fence) is noticed.
    fn wait(&mut self, posted: &[(NodeId, u64)]) -> Result<(), AppendError> {
        let deadline = Instant::now() + self.timeout;
        let fenced = || self.fence.as_ref().is_some_and(|f| f.load(Ordering::SeqCst));
        for &(b, seq) in posted {
            // Peer events are not drained here: they belong to the node's failure
            // detector (which cuts a failed backup off, failing later posts to it).
            loop {
                let slice = (Instant::now() + Duration::from_millis(1)).min(deadline);
                if self.t.wait_completed(b, seq, slice) {
                    break;
                }
                if fenced() {
                    return Err(AppendError::ViewChanged);
                }
                if Instant::now() >= deadline {
                    return Err(AppendError::Timeout(b));
                }
            }
        }
        // Complete everywhere, but acknowledged only if the fence is still down:
        // then every write was posted before it went up, so before whatever the
        // fence's owner posts after raising it (in `service`, the wedged row that
        // the backups must see before they scan their buffers).
        if fenced() {
            return Err(AppendError::ViewChanged);
        }
        Ok(())
    }
}
