//! The applier: follows the committed log and applies it to the store, from its
//! own copy of the log or, at a member without one, from pages it asks of the
//! replicas; a store older than the log's trim point first takes a checkpoint of
//! another member's store ([`super::transfer`]).
//!
//! A failover can make a read fail for a while (a new replica still being
//! re-seeded, a segment not on disk yet, the member asked for a checkpoint
//! stopping or behind): the applier reads again from what it applied, with
//! pauses growing to half a second, for up to 30 s of failures in a row; only
//! then, or at once where its own store failed or the log stopped, it stops, and
//! every wait on the store answers with the error.

use super::{Inner, StoreError, TransferError, Update, APPLIED};
use crate::shard::rules;
use crate::table::StoreTable;
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::sync::lock;
use spindle_tailwind::service::{LogService, Lsn, ReadError};
use std::ops::Deref;
use std::time::{Duration, Instant};

/// Where the applier reads the committed log: its own copy (a replica's tailing
/// reader), or pages asked of the replicas (a member that does not hold the log,
/// such as one that joined after the log's replicas were chosen).
enum Source {
    Copy(spindle_tailwind::service::Tail),
    Pages,
}

/// How long a member that reads pages waits before asking again when the log had
/// nothing new (it has no copy to wait on; asked of a replica, bounded).
const PAGE_POLL: Duration = Duration::from_millis(20);

/// How long the applier keeps trying again after a read of the log or a
/// checkpoint failed (a failover under way: a replica being re-seeded, the member
/// asked for a checkpoint stopping or still behind) before it gives up and every
/// wait on the store answers with the error.
const RETRY_FOR: Duration = Duration::from_secs(30);
/// The first pause between such tries (doubling to [`RETRY_PAUSE_MAX`]).
const RETRY_PAUSE: Duration = Duration::from_millis(100);
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(500);

/// A run of failed reads of the log (or checkpoints): when it began, and the
/// next pause.
struct Trouble {
    run: Option<(Instant, Duration)>,
    limit: Duration,
}

impl Trouble {
    fn new(limit: Duration) -> Trouble {
        Trouble { run: None, limit }
    }

    /// Another failure: pauses and says to try again, or hands the error back:
    /// at once if it is final (this store's own writes failed, or the log
    /// stopped), else once the run has lasted its limit.
    fn again(&mut self, why: StoreError) -> Result<(), StoreError> {
        let fin = match &why {
            StoreError::Behind { why: TransferError::Store(_), .. } => true,
            StoreError::Read(e) => matches!(**e, ReadError::Stopped(_)),
            _ => false,
        };
        if fin {
            return Err(why);
        }
        let (since, pause) = self.run.get_or_insert_with(|| {
            tracing::warn!(error = %why, "reading the log failed: trying again");
            (Instant::now(), RETRY_PAUSE)
        });
        if since.elapsed() >= self.limit {
            return Err(why);
        }
        std::thread::sleep(*pause);
        *pause = (*pause * 2).min(RETRY_PAUSE_MAX);
        Ok(())
    }

    /// The outcome of a try: a success ends the run, a failure is
    /// [`Trouble::again`].
    fn after(&mut self, tried: Result<(), StoreError>) -> Result<(), StoreError> {
        match tried {
            Ok(()) => {
                self.clear();
                Ok(())
            }
            Err(e) => self.again(e),
        }
    }

    /// A read or checkpoint went through: the run is over.
    fn clear(&mut self) {
        self.run = None;
    }
}

/// The applier: follows the committed log and applies it in batches (with
/// [`Apply::Lazy`] at a member that is not the primary, only while a waiter
/// needs more).
pub(super) fn apply_loop<L: Deref<Target = LogService>>(s: &Inner<L>) {
    let mut src = Source::Copy(s.log.subscribe(Lsn(*lock(&s.applied))));
    let mut trouble = Trouble::new(RETRY_FOR);
    let fail = |why: StoreError| {
        // Rare, and every later wait on this store answers with it: said once.
        tracing::error!(error = %why, "the store's applier stopped");
        *lock(&s.error) = Some(why);
        s.applied_cv.notify_all();
    };
    while !s.stop.load(Ordering::SeqCst) {
        // Lazy applies at a replica other than the primary; a member without a
        // copy reads pages as they come (it has nothing to be passive about).
        if s.lazy && !s.log.is_primary() && s.log.committed().is_some() {
            let a = lock(&s.applied);
            if *a >= s.demand.load(Ordering::SeqCst) {
                // Looks again every 50 ms (it may become the primary meanwhile).
                drop(s.demand_cv.wait_timeout(a, Duration::from_millis(50)));
                continue;
            }
        }
        let mut recs = Vec::new();
        match &mut src {
            Source::Copy(tail) => {
                match tail.next_within(Duration::from_millis(50)) {
                    None => {
                        trouble.clear();
                        continue;
                    }
                    Some(Err(ReadError::NotReplica)) => {
                        // Not holding the log (now): read it from the replicas.
                        src = Source::Pages;
                        continue;
                    }
                    Some(Err(e)) => {
                        let tried = match e {
                            ReadError::Gap(floor) => catch_up(s, floor.0),
                            e => Err(StoreError::Read(std::sync::Arc::new(e))),
                        };
                        if let Err(e) = trouble.after(tried) {
                            return fail(e);
                        }
                        // Read afresh from what is applied (a checkpoint, or a copy
                        // re-seeded meanwhile).
                        src = Source::Copy(s.log.subscribe(Lsn(*lock(&s.applied))));
                        continue;
                    }
                    Some(Ok(r)) => recs.push(r),
                }
                while recs.len() < 4096 {
                    match tail.next_within(Duration::ZERO) {
                        Some(Ok(r)) => recs.push(r),
                        _ => break,
                    }
                }
            }
            Source::Pages => {
                let from = *lock(&s.applied);
                if s.log.committed().is_some() {
                    // It holds the log now (a new replica): follow its own copy.
                    src = Source::Copy(s.log.subscribe(Lsn(from)));
                    continue;
                }
                match s.log.read_page(Lsn(from), 1 << 20, Duration::from_secs(2)) {
                    Ok(page) if page.is_empty() => {
                        {
                            let _a = lock(&s.applied);
                            s.page_ends.fetch_add(1, Ordering::SeqCst);
                            s.applied_cv.notify_all();
                        }
                        std::thread::sleep(PAGE_POLL);
                        continue;
                    }
                    Ok(page) => recs = page,
                    Err(ReadError::Gap(floor)) => {
                        if let Err(e) = trouble.after(catch_up(s, floor.0)) {
                            return fail(e);
                        }
                        continue;
                    }
                    Err(e) => {
                        // No replica answered (a failover, say): ask again shortly.
                        tracing::debug!(%e, "no page of the log yet");
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                }
            }
        }
        let next = recs.last().map_or(0, |(l, _)| l.0 + 1);
        let mut b = s.db.batch();
        let mut state = lock(&s.shard);
        let mut ups = Vec::with_capacity(recs.len());
        for (_, rec) in &recs {
            match Update::decode(rec) {
                Ok(Update::Marker { node, applied }) => {
                    lock(&s.markers).insert(node, applied);
                }
                Ok(u) => ups.push(u),
                Err(why) => tracing::warn!(%why, "a log record that is not an update: skipped"),
            }
        }
        // Only a batch with a drop keeps the keys it set (a drop must remove them
        // too, before the batch is in the store).
        let drops = ups.iter().any(|u| matches!(u, Update::DropRange { .. }));
        let mut t = StoreTable::new(&s.kv, &s.meta, &mut b, &mut state, drops);
        for u in &ups {
            if let Err(e) = rules::apply(&mut t, u) {
                return fail(e.into());
            }
        }
        t.finish();
        b.insert(&s.meta, APPLIED, next.to_le_bytes().to_vec());
        if let Err(e) = b.commit() {
            return fail(e.into());
        }
        drop(state);
        trouble.clear();
        *lock(&s.applied) = next;
        s.applied_cv.notify_all();
    }
}

/// The log no longer holds the records this store needs (it starts at `floor`):
/// takes a checkpoint of another member's store ([`super::transfer`]), and what
/// it reaches is applied here.
fn catch_up<L: Deref<Target = LogService>>(s: &Inner<L>, floor: u64) -> Result<(), StoreError> {
    let applied = *lock(&s.applied);
    tracing::warn!(applied, floor, "this store is older than the log: taking a checkpoint of another member's");
    match super::transfer::fetch(s, floor) {
        Ok(a) => {
            *lock(&s.applied) = a;
            s.applied_cv.notify_all();
            tracing::info!(applied = a, "checkpoint taken");
            Ok(())
        }
        Err(why) => Err(StoreError::Behind { applied, floor, why }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_failures_is_tried_again_with_growing_pauses_until_its_limit() {
        let why = || StoreError::NoPrimary;
        let mut t = Trouble::new(Duration::from_secs(3600));
        assert!(t.again(why()).is_ok(), "tried again within the limit");
        assert_eq!(t.run.map(|r| r.1), Some(RETRY_PAUSE * 2), "the next pause doubled");
        t.clear();
        assert!(t.run.is_none(), "a success ends the run");
        let mut t = Trouble::new(Duration::ZERO);
        assert!(matches!(t.again(why()), Err(StoreError::NoPrimary)), "past the limit the error comes back");
        let stopped = StoreError::Read(std::sync::Arc::new(ReadError::Stopped("stopped".into())));
        let mut t = Trouble::new(Duration::from_secs(3600));
        assert!(t.again(stopped).is_err(), "a stopped log is final at once");
        assert!(t.run.is_none(), "and starts no run");
    }
}
