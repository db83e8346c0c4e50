//! The domain's replicated logs ([`crate::logs`]) as a client reads them: pages of
//! committed records through its member, which reads them from its own copy if it
//! is one of the log's replicas and asks a replica otherwise. A [`ClientTail`]
//! follows a log as it commits, across the client's moves to other members (it
//! asks for the next record it lacks, wherever it is connected): every committed
//! record once, in order, never one a failover may drop.
//!
//! ```no_run
//! # fn main() -> Result<(), spindle_dds::DdsError> {
//! use spindle_dds::{ClientConfig, DomainClient};
//! use std::time::Duration;
//! use spindle_tailwind::service::Lsn;
//! let client = DomainClient::connect(ClientConfig::new(vec!["127.0.0.1:7000".parse().unwrap()]))?;
//! let mut orders = client.log("orders").subscribe(Lsn(0));
//! while let Some(r) = orders.next_within(Duration::from_secs(5)) {
//!     let (lsn, bytes) = r?;
//!     println!("{lsn:?}: {} bytes", bytes.len());
//! }
//! # Ok(()) }
//! ```

use super::DomainClient;
use crate::error::{TopicError, Unavailable};
use crate::wire::client::{Call, LogFailure, Reply};
use crate::DdsError;
use spindle_tailwind::service::Lsn;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The most bytes a client asks for in one page.
const PAGE: usize = 1 << 20;
/// The longest a tail waits between asks while nothing new commits (it starts at
/// half a millisecond and doubles).
const MAX_IDLE: Duration = Duration::from_millis(10);

/// A replicated log of the domain, as a client reads it ([`DomainClient::log`]).
#[derive(Debug, Clone)]
pub struct ClientLog {
    client: DomainClient,
    name: String,
}

/// Why a page was not read: worth asking again (a move, a view change), or not.
enum Fail {
    Retry(DdsError),
    Final(DdsError),
}

impl DomainClient {
    /// Log `name` of the domain, to read ([`ClientLog::read`],
    /// [`ClientLog::subscribe`]). Nothing is asked here: a log the domain lacks
    /// is an error at the first read.
    pub fn log(&self, name: &str) -> ClientLog {
        ClientLog { client: self.clone(), name: name.into() }
    }
}

impl ClientLog {
    /// The log's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The committed records from `from` on, about `max_bytes` of them (at least
    /// one if any is committed; at most 1 MiB, or the member's page for its
    /// clients if smaller, unless one record is larger), in order. Empty if no
    /// record from `from` is committed yet. A log the domain lacks is
    /// [`DdsError::Topic`]; a record the log no longer holds is
    /// [`DdsError::Trimmed`], a log that cannot be read now
    /// [`DdsError::Unavailable`], a damaged copy [`DdsError::LogDamaged`].
    pub fn read(&self, from: Lsn, max_bytes: usize) -> Result<Vec<(Lsn, Vec<u8>)>, DdsError> {
        self.page(from, max_bytes).map_err(|(Fail::Retry(e) | Fail::Final(e))| e)
    }

    /// Follows the log from record `from` as it commits ([`ClientTail`]).
    pub fn subscribe(&self, from: Lsn) -> ClientTail {
        ClientTail { log: self.clone(), next: from.0, queue: VecDeque::new(), failed: false }
    }

    fn page(&self, from: Lsn, max_bytes: usize) -> Result<Vec<(Lsn, Vec<u8>)>, Fail> {
        let h = self.client.h();
        h.check().map_err(Fail::Final)?;
        let call = Call::LogRead { log: self.name.clone(), from: from.0, max: max_bytes.clamp(1, PAGE) as u32 };
        let name = &self.name;
        match h.call(&call) {
            Ok(Reply::LogRecords(records)) => {
                let mut out = Vec::with_capacity(records.len());
                for (i, (lsn, bytes)) in records.into_iter().enumerate() {
                    if lsn != from.0 + i as u64 {
                        tracing::warn!(log = %name, lsn, due = from.0 + i as u64, "a log record out of order");
                        return Err(Fail::Retry(DdsError::Unavailable(Unavailable::LogOutOfOrder)));
                    }
                    out.push((Lsn(lsn), bytes.into_vec()));
                }
                Ok(out)
            }
            Ok(Reply::LogFailed(f)) => Err(match f {
                LogFailure::NoSuchLog => {
                    Fail::Final(DdsError::Topic { topic: name.clone(), why: TopicError::NoSuchLog })
                }
                LogFailure::Gap(n) => Fail::Final(DdsError::Trimmed { log: name.into(), lsn: n }),
                LogFailure::Unavailable(why) => Fail::Retry(DdsError::Unavailable(why)),
                LogFailure::Damaged => Fail::Final(DdsError::LogDamaged(name.clone())),
                LogFailure::Denied => {
                    Fail::Final(DdsError::Denied { topic: name.clone(), action: crate::access::Action::Subscribe })
                }
            }),
            Ok(_) => Err(Fail::Final(DdsError::Protocol(crate::ProtocolError::Unexpected))),
            // The link: the client is moving to another member, or ends (seen above
            // at the next ask).
            Err(e) => Err(Fail::Retry(e)),
        }
    }
}

/// A client's reader of a log's committed records from some number on, as they
/// commit ([`ClientLog::subscribe`]). It asks its member for pages, at once again
/// while records come and after a growing pause (half a millisecond to 10 ms)
/// while none do; while the client moves to another member or the log changes
/// view it asks again. The iterator blocks until the next record; it ends after a
/// final error (the log is gone or trimmed past it, the client ended), which it
/// yields. [`ClientTail::next_within`] waits a bounded time instead.
#[derive(Debug)]
pub struct ClientTail {
    log: ClientLog,
    /// The next record to ask for.
    next: u64,
    queue: VecDeque<(Lsn, Vec<u8>)>,
    failed: bool,
}

impl ClientTail {
    /// The number of the record the reader shows next.
    pub fn next_lsn(&self) -> Lsn {
        self.queue.front().map_or(Lsn(self.next), |r| r.0)
    }

    /// The next committed record, waiting up to `within` for one; `None` if none
    /// came in that time (or the reader ended).
    pub fn next_within(&mut self, within: Duration) -> Option<Result<(Lsn, Vec<u8>), DdsError>> {
        let deadline = Instant::now() + within;
        let mut idle = Duration::from_micros(500);
        loop {
            if let Some(r) = self.queue.pop_front() {
                return Some(Ok(r));
            }
            if self.failed {
                return None;
            }
            match self.log.page(Lsn(self.next), PAGE) {
                Ok(page) if !page.is_empty() => {
                    self.next = page.last().map_or(self.next, |r| r.0 .0 + 1);
                    self.queue.extend(page);
                    continue;
                }
                Ok(_) | Err(Fail::Retry(_)) => {}
                Err(Fail::Final(e)) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            std::thread::sleep(idle.min(left));
            idle = (idle * 2).min(MAX_IDLE);
        }
    }
}

impl Iterator for ClientTail {
    type Item = Result<(Lsn, Vec<u8>), DdsError>;

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
