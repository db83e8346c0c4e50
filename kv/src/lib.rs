#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use spindle_sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spindle_sst::sync::lock;
use spindle_tailwind::service::{LogService, Lsn};
use std::collections::{HashMap, VecDeque};
use std::ops::Deref;
use std::path::Path;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod apply;
mod barrier;
mod codec;
mod error;
pub mod member;
pub mod remote;
pub mod shard;
mod table;
mod transfer;
mod update;
use apply::apply_loop;
pub use error::{Refusal, StoreError, TransferError};
pub use update::{Update, UpdateError, Writer};

/// Committer threads, each with one append batch in flight.
const COMMITTERS: usize = 2;
/// The most puts one log append carries.
const MAX_BATCH: usize = 512;
/// The most acknowledged records a store's applier may be behind before puts
/// at that member wait for it.
pub const MAX_LAG: u64 = 4096;
/// The key under which the store keeps the next record to apply.
const APPLIED: &[u8] = b"applied";

/// A key and its value.
pub type Pair = (Vec<u8>, Vec<u8>);

/// When a member that is not the log's primary applies the committed log to its
/// store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Apply {
    /// As it commits (every member's store follows the log).
    #[default]
    Eager,
    /// Only as far as someone at this member waits for (a read, a sync, a
    /// snapshot), and as it commits once the member becomes the log's primary:
    /// a passive backup's store, as Tailwind's backups are passive for the log.
    /// Reads at such a member first replay what it had not applied, so the
    /// first read after a long run (and a failover to it) takes longer.
    Lazy,
}

/// Why a wait for the applier ended without what it waited for.
enum WaitFailed {
    /// The applier failed.
    Applier(StoreError),
    /// The deadline passed with this many records applied.
    Timeout(u64),
}

impl WaitFailed {
    /// The applier's error, or `timeout`'s for a timeout.
    fn or_timeout(self, timeout: impl FnOnce(u64) -> StoreError) -> StoreError {
        match self {
            WaitFailed::Applier(e) => e,
            WaitFailed::Timeout(a) => timeout(a),
        }
    }
}

struct Pending {
    rec: Vec<u8>,
    done: Sender<Result<Lsn, StoreError>>,
}

struct Inner<L> {
    log: Arc<L>,
    db: Database,
    kv: Keyspace,
    meta: Keyspace,
    /// The next record to apply here.
    applied: Mutex<u64>,
    /// One more than the newest record acknowledged to a put here (reads wait
    /// until it is applied).
    acked: AtomicU64,
    applied_cv: Condvar,
    /// With [`Apply::Lazy`]: the record a waiter here needs applied (under
    /// `applied`'s lock), and the applier's wake-up for it.
    lazy: bool,
    demand: AtomicU64,
    demand_cv: Condvar,
    queue: Mutex<VecDeque<Pending>>,
    queue_cv: Condvar,
    /// The newest snapshot marker of each member.
    markers: Mutex<HashMap<u32, u64>>,
    /// What the record rules keep besides keys (see `table`); the applier's.
    shard: Mutex<table::ShardState>,
    error: Mutex<Option<StoreError>>,
    stop: AtomicBool,
    timeout: Duration,
    /// Checkpoints this member serves to stores older than the log's trim point.
    sessions: transfer::Sessions,
    /// At a member without a copy of the log: how many times its applier found
    /// nothing more committed (a page came back empty); `sync` waits on it.
    page_ends: AtomicU64,
    /// The read barrier of each key at the primary (see `barrier`), if kept.
    barrier: Option<barrier::KeyBarrier>,
    /// One more than the log's count of views started at this member when a
    /// full sync at the primary last ended (0: none); see `Store::sync_key`.
    synced: AtomicU64,
}

impl<L> Inner<L> {
    /// At a lazy store: apply up to record `next` (a waiter or a checkpoint asks
    /// for it). Raised under the applied lock, which the applier holds from its
    /// look at the demand to its wait, so the wake-up is not lost.
    fn ask_applied(&self, next: u64) {
        let a = lock(&self.applied);
        if self.lazy && *a < next && self.demand.fetch_max(next, Ordering::SeqCst) < next {
            self.demand_cv.notify_all();
        }
    }
}

/// A member's replicated store (see the module docs).
pub struct Store<L: Deref<Target = LogService> + Send + Sync + 'static> {
    inner: Arc<Inner<L>>,
    threads: Vec<JoinHandle<()>>,
}

impl<L: Deref<Target = LogService> + Send + Sync + 'static> Store<L> {
    /// Opens (or creates) the store in `dir` over `log`, and starts applying the
    /// log from where the store stopped, as it commits ([`Apply::Eager`]).
    pub fn open(dir: &Path, log: Arc<L>) -> Result<Store<L>, StoreError> {
        Store::open_with(dir, log, Apply::Eager)
    }

    /// [`Store::open`], applying as `apply` says.
    pub fn open_with(dir: &Path, log: Arc<L>, apply: Apply) -> Result<Store<L>, StoreError> {
        Store::open_inner(dir, log, apply, false)
    }

    /// [`Store::open_with`], and the store keeps each key's read barrier at the
    /// log's primary (see [`Store::sync_key`]): a read there waits only for its
    /// own key's records, at the price of a little bookkeeping on every append
    /// (about 5% of the puts/s of `kv_bench` on shm at 100 B, which reads
    /// nothing; the sharded store's members open their stores so).
    pub fn open_keyed(dir: &Path, log: Arc<L>, apply: Apply) -> Result<Store<L>, StoreError> {
        Store::open_inner(dir, log, apply, true)
    }

    fn open_inner(dir: &Path, log: Arc<L>, apply: Apply, keyed: bool) -> Result<Store<L>, StoreError> {
        let db = Database::builder(dir).open()?;
        let kv = db.keyspace("kv", KeyspaceCreateOptions::default)?;
        let meta = db.keyspace("meta", KeyspaceCreateOptions::default)?;
        let applied = match meta.get(APPLIED)? {
            Some(v) if v.len() == 8 => u64::from_le_bytes(v[..].try_into().expect("8 bytes")),
            Some(_) => return Err(StoreError::Damaged),
            None => 0,
        };
        let view = db.snapshot();
        let (shard, whole) = table::ShardState::load(&view, &meta)?.ok_or(StoreError::Damaged)?;
        if whole {
            let mut b = db.batch();
            shard.rewrite(&view, &meta, &mut b)?;
            b.commit()?;
        }
        drop(view);
        // A store older than the log's trim point takes a checkpoint of another
        // member's first: its applier does, told by the log (see `transfer`).
        let timeout = log.config().append_timeout;
        let inner = Arc::new(Inner {
            log,
            db,
            kv,
            meta,
            applied: Mutex::new(applied),
            acked: AtomicU64::new(0),
            applied_cv: Condvar::new(),
            lazy: apply == Apply::Lazy,
            demand: AtomicU64::new(0),
            demand_cv: Condvar::new(),
            queue: Mutex::new(VecDeque::new()),
            queue_cv: Condvar::new(),
            markers: Mutex::new(HashMap::new()),
            shard: Mutex::new(shard),
            error: Mutex::new(None),
            stop: AtomicBool::new(false),
            timeout,
            sessions: transfer::Sessions::default(),
            page_ends: AtomicU64::new(0),
            barrier: keyed.then(barrier::KeyBarrier::default),
            synced: AtomicU64::new(0),
        });
        // Checkpoints for the others (weak: the log must not keep the store alive).
        let weak = Arc::downgrade(&inner);
        inner.log.serve_app(move |body| match weak.upgrade() {
            Some(s) => transfer::serve(&s, body),
            None => Vec::new(),
        });
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name.into()).spawn(f).map_err(|e| StoreError::Thread(Arc::new(e)))
        };
        let a = inner.clone();
        let mut threads = vec![spawn("kv-apply", Box::new(move || apply_loop(&a)))?];
        // Several batches in flight (each committer a producer of its own: its
        // numbers go up in its own order): while one waits for the replicas' disks
        // (Ack::Disk) the next one is written.
        for _ in 0..COMMITTERS {
            let c = inner.clone();
            threads.push(spawn("kv-commit", Box::new(move || commit_loop(&c)))?);
        }
        Ok(Store { inner, threads })
    }

    /// Sets `key` to `value`; returns the update's record once it is
    /// acknowledged (reads here then see it).
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<Lsn, StoreError> {
        self.record(Update::Put(key.to_vec(), value.to_vec()))
    }

    /// Removes `key` (see [`Store::put`]).
    pub fn del(&self, key: &[u8]) -> Result<Lsn, StoreError> {
        self.record(Update::Del(key.to_vec()))
    }

    /// A shard's write for client request `by`: sets `key` to `value` (`None`:
    /// removes it) unless the store applied that request (or a later one of the
    /// same client) already, so a client may ask again safely (see
    /// [`shard::rules`]).
    pub fn write(&self, key: &[u8], value: Option<&[u8]>, by: Writer) -> Result<Lsn, StoreError> {
        self.record(shard::rules::write_record(key, value, by))
    }

    /// Appends record `u` (an update, or a shard's record of a pull or a drop) and
    /// returns once it is acknowledged.
    pub fn record(&self, u: Update) -> Result<Lsn, StoreError> {
        let lsn = match &self.inner.barrier {
            Some(b) => {
                let keys = barrier::keys_of(&u);
                b.begin(&keys);
                let r = self.append(u.encode());
                b.end(&keys, r.as_ref().ok().map(|l| l.0), || *lock(&self.inner.applied));
                r?
            }
            None => self.append(u.encode())?,
        };
        self.inner.acked.fetch_max(lsn.0 + 1, Ordering::SeqCst);
        // Flow control: puts do not run further ahead of this store's applier.
        if let Some(behind) = (lsn.0 + 1).checked_sub(MAX_LAG) {
            self.wait_applied(behind, self.inner.timeout)?;
        }
        Ok(lsn)
    }

    /// Waits until the store applied every update acknowledged here.
    fn read_barrier(&self) -> Result<(), StoreError> {
        self.wait_applied(self.inner.acked.load(Ordering::SeqCst), self.inner.timeout)
    }

    fn append(&self, rec: Vec<u8>) -> Result<Lsn, StoreError> {
        let (done, rx) = channel();
        {
            let mut q = lock(&self.inner.queue);
            if self.inner.stop.load(Ordering::SeqCst) {
                return Err(StoreError::Closed);
            }
            q.push_back(Pending { rec, done });
        }
        self.inner.queue_cv.notify_one();
        rx.recv().unwrap_or(Err(StoreError::Closed))
    }

    /// Waits (up to `within`) until this store applied every record before `next`.
    pub fn wait_applied(&self, next: u64, within: Duration) -> Result<(), StoreError> {
        self.inner.ask_applied(next);
        self.wait_applier(within, |a| a >= next)
            .map_err(|w| w.or_timeout(|_| StoreError::NotApplied(Lsn(next.saturating_sub(1)))))
    }

    /// Waits until this store applied everything the log had committed when
    /// called (a read at a backup then sees every acknowledged update before it).
    pub fn sync(&self) -> Result<(), StoreError> {
        // Once the log takes appends in this view, this member holds every
        // segment before the open one (re-seeding comes first) and learns the
        // commit point from the primary's writes.
        if self.inner.log.wait_for_primary(self.inner.timeout).is_none() {
            return Err(StoreError::NoPrimary);
        }
        match self.inner.log.committed() {
            Some(c) => self.wait_applied(c.0, self.inner.timeout),
            None => {
                // Without a copy of the log: until the applier finds its end with a
                // page asked for after this call (the second empty page from now:
                // the first may have been asked before).
                let want = self.inner.page_ends.load(Ordering::SeqCst) + 2;
                let ends = &self.inner.page_ends;
                self.wait_applier(self.inner.timeout, |_| ends.load(Ordering::SeqCst) >= want)
                    .map_err(|w| w.or_timeout(|a| StoreError::NotApplied(Lsn(a.saturating_sub(1)))))
            }
        }
    }

    /// Waits (up to `within`, woken by the applier) until `done(applied)` holds.
    /// An applier that failed is its error; a timeout is `Err` with
    /// the applied count, for the caller's error.
    fn wait_applier(&self, within: Duration, done: impl Fn(u64) -> bool) -> Result<(), WaitFailed> {
        let deadline = Instant::now() + within;
        let mut a = lock(&self.inner.applied);
        while !done(*a) {
            if let Some(e) = lock(&self.inner.error).clone() {
                return Err(WaitFailed::Applier(e));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(WaitFailed::Timeout(*a));
            }
            a = self
                .inner
                .applied_cv
                .wait_timeout(a, left.min(Duration::from_millis(50)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }

    /// Waits until this store applied every record a read of `key` must see
    /// (every update of it acknowledged before this call, wherever it was
    /// appended). At the log's primary, after one full [`Store::sync`] in its
    /// view, that is only the records of `key` appended here (and any the
    /// primary took for other members, or that touch no single key), so a read
    /// does not wait behind other keys' records (a migration's bulk batches);
    /// elsewhere, the first time in a view, and in a store not opened with
    /// [`Store::open_keyed`], it is [`Store::sync`].
    pub fn sync_key(&self, key: &[u8]) -> Result<(), StoreError> {
        let log = &self.inner.log;
        let others = log.others();
        let Some(b) = &self.inner.barrier else { return self.sync() };
        if !log.is_primary() || self.inner.synced.load(Ordering::SeqCst) != others.views + 1 {
            self.sync()?;
            if log.is_primary() {
                self.inner.synced.store(others.views + 1, Ordering::SeqCst);
            }
            return Ok(());
        }
        let applied = *lock(&self.inner.applied);
        match b.need(key, applied, &others) {
            barrier::Need::Nothing => Ok(()),
            barrier::Need::Upto(l) => self.wait_applied(l + 1, self.inner.timeout),
            barrier::Need::All => self.sync(),
        }
    }

    /// The value of `key` as this store applied it (no barrier of its own: a
    /// read after [`Store::sync_key`]).
    pub fn read_applied(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.inner.kv.get(key)?.map(|v| v.to_vec()))
    }

    /// The value of `key` in this member's store.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.read_barrier()?;
        Ok(self.inner.kv.get(key)?.map(|v| v.to_vec()))
    }

    /// The keys starting with `prefix`, with their values, in key order (at most
    /// `limit`).
    pub fn scan(&self, prefix: &[u8], limit: usize) -> Result<Vec<Pair>, StoreError> {
        self.read_barrier()?;
        let mut out = Vec::new();
        for g in self.inner.kv.prefix(prefix).take(limit) {
            let (k, v) = g.into_inner()?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    /// The pulls open in this store, as far as it applied the log: (migration,
    /// range).
    pub fn pulls(&self) -> Vec<(u64, shard::Range)> {
        lock(&self.inner.shard).pulls.iter().map(|(i, r)| (*i, *r)).collect()
    }

    /// Whether migration `id`'s pull began here (open or closed since), as far as
    /// the store applied the log.
    pub fn pull_begun(&self, id: u64) -> bool {
        let st = lock(&self.inner.shard);
        st.pulls.contains_key(&id) || st.closed.contains_key(&id)
    }

    /// Whether a write claimed `key` while its range's pull is open.
    pub fn claimed(&self, key: &[u8]) -> bool {
        lock(&self.inner.shard).claims.contains(key)
    }

    /// Each client's last request the store applied.
    pub fn writers(&self) -> Vec<Writer> {
        lock(&self.inner.shard).writers.iter().map(|(c, s)| Writer { client: *c, seq: *s }).collect()
    }

    /// The records of `range` with keys after `after` (all: `None`), in key
    /// order, at most `max` and (past the first) `max_bytes` of keys and values,
    /// after every acknowledged update here is applied; and whether more may
    /// follow (a migration's batch).
    pub fn batch_of(
        &self,
        range: shard::Range,
        after: Option<&[u8]>,
        max: u32,
        max_bytes: u32,
    ) -> Result<(Vec<Pair>, bool), StoreError> {
        self.read_barrier()?;
        let iter = match after {
            Some(a) => self.inner.kv.range::<&[u8], _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)),
            None => self.inner.kv.iter(),
        };
        let pairs = iter.map(|g| g.into_inner().map(|(k, v)| (k.to_vec(), v.to_vec())));
        Ok(shard::rules::take_batch(pairs, range, after, max, max_bytes)?)
    }

    /// The next record this store applies.
    pub fn applied(&self) -> Lsn {
        Lsn(*lock(&self.inner.applied))
    }

    /// Syncs the store to disk and appends a marker: this member's store holds
    /// every record before the returned one.
    pub fn snapshot(&self) -> Result<Lsn, StoreError> {
        let at = *lock(&self.inner.applied);
        self.inner.db.persist(PersistMode::SyncAll)?;
        let node = self.inner.log.node().0;
        self.append(Update::Marker { node, applied: at }.encode())?;
        Ok(Lsn(at))
    }

    /// Trims the log below the oldest snapshot of its current members (each must
    /// have taken one, [`Store::snapshot`]); returns the trim point, if any.
    pub fn trim_log(&self) -> Result<Option<Lsn>, StoreError> {
        let members = self.inner.log.members();
        let markers = lock(&self.inner.markers).clone();
        let Some(point) = members.iter().map(|m| markers.get(&m.0).copied()).collect::<Option<Vec<u64>>>() else {
            return Ok(None);
        };
        let Some(point) = point.into_iter().min().filter(|p| *p > 0) else { return Ok(None) };
        self.inner.log.trim(Lsn(point))?;
        Ok(Some(Lsn(point)))
    }

    /// The number of keys (approximate: the store's own count).
    pub fn approximate_len(&self) -> usize {
        self.inner.kv.approximate_len()
    }

    /// The log under the store.
    pub fn log(&self) -> &L {
        &self.inner.log
    }
}

impl<L: Deref<Target = LogService> + Send + Sync + 'static> std::fmt::Debug for Store<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("applied", &self.applied()).finish()
    }
}

impl<L: Deref<Target = LogService> + Send + Sync + 'static> Drop for Store<L> {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.inner.queue_cv.notify_all();
        self.inner.demand_cv.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for p in lock(&self.inner.queue).drain(..) {
            let _ = p.done.send(Err(StoreError::Closed));
        }
    }
}

/// A producer number for a committer's tagged appends: random per committer
/// (each `RandomState` has keys of its own).
fn producer_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

/// The committer: all waiting puts as one tagged append batch, in order.
fn commit_loop<L: Deref<Target = LogService>>(s: &Inner<L>) {
    let producer = producer_id();
    let mut seq = 0u64;
    let budget = s.log.config().buffer / 2;
    loop {
        let batch: Vec<Pending> = {
            let mut q = lock(&s.queue);
            while q.is_empty() && !s.stop.load(Ordering::SeqCst) {
                q = s.queue_cv.wait_timeout(q, Duration::from_millis(100)).unwrap_or_else(|p| p.into_inner()).0;
            }
            if q.is_empty() {
                return;
            }
            let mut bytes = 0;
            let mut n = 0;
            while n < q.len().min(MAX_BATCH) && (n == 0 || bytes + q[n].rec.len() + 64 <= budget) {
                bytes += q[n].rec.len() + 64;
                n += 1;
            }
            q.drain(..n).collect()
        };
        let refs: Vec<&[u8]> = batch.iter().map(|p| p.rec.as_slice()).collect();
        let r = s.log.append_batch_once(producer, seq, &refs);
        seq += batch.len() as u64;
        match r {
            Ok(lsns) => {
                for (p, l) in batch.into_iter().zip(lsns) {
                    let _ = p.done.send(Ok(l));
                }
            }
            Err(e) => {
                let e = StoreError::from(e);
                for p in batch {
                    let _ = p.done.send(Err(e.clone()));
                }
            }
        }
    }
}
