//! The `rpc` configuration: the store on the conventional replicated log
//! ([`bench::rpclog`]), as the module docs of `kv_bench` describe.

use super::{key, load, member_row, serve_runs, Args, REPLICAS};
use bench::rpclog::{self, RpcPrimary, MAX_RECORD};
use fjall::{Database, KeyspaceCreateOptions};
use spindle_kv::{Pair, Update, MAX_LAG};
use spindle_sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spindle_sst::sync::lock;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Puts waiting for the log, and how far the log took them.
#[derive(Default)]
struct Commits {
    /// Waiting puts: the key, the value and the record.
    queue: VecDeque<(Vec<u8>, Vec<u8>, Vec<u8>)>,
    /// Puts queued so far (a put's ticket is the count before it).
    pushed: u64,
    /// Puts acknowledged so far (in queue order).
    done: u64,
    /// Whether a put is appending a batch for the others.
    running: bool,
    failed: Option<String>,
}

/// The primary's store: group commit over the RPC log, then a thread applies.
struct RpcStore {
    rpc: Mutex<RpcPrimary>,
    state: Mutex<Commits>,
    cv: Condvar,
    apply: Mutex<Sender<Vec<Pair>>>,
    applied: Arc<AtomicU64>,
}

impl RpcStore {
    /// Returns once the put's record is acknowledged by both backups.
    fn put(&self, k: &[u8], v: &[u8]) -> Result<(), String> {
        let rec = Update::Put(k.to_vec(), v.to_vec()).encode();
        let mut g = lock(&self.state);
        let ticket = g.pushed;
        g.pushed += 1;
        g.queue.push_back((k.to_vec(), v.to_vec(), rec));
        while g.done <= ticket && g.failed.is_none() {
            if g.running {
                g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            // This put appends every waiting one (up to a record's size).
            g.running = true;
            let (mut batch, mut bytes) = (Vec::new(), 0);
            while let Some(front) = g.queue.front() {
                if !batch.is_empty() && bytes + 4 + front.2.len() > MAX_RECORD {
                    break;
                }
                bytes += 4 + front.2.len();
                batch.extend(g.queue.pop_front());
            }
            drop(g);
            let n = batch.len() as u64;
            let r = self.commit(batch);
            g = lock(&self.state);
            g.running = false;
            g.done += n;
            if let Err(e) = r {
                g.failed = Some(e);
            }
            self.cv.notify_all();
        }
        match &g.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// One record for the batch (each update behind its length), replicated,
    /// then handed to the applier once it is at most [`MAX_LAG`] puts behind.
    fn commit(&self, batch: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)>) -> Result<(), String> {
        let rec = encode_batch(batch.iter().map(|(_, _, r)| r.as_slice()));
        lock(&self.rpc).append(&rec)?;
        let upto = lock(&self.state).done + batch.len() as u64;
        let deadline = Instant::now() + Duration::from_secs(30);
        while upto.saturating_sub(self.applied.load(Ordering::Acquire)) > MAX_LAG {
            if Instant::now() > deadline {
                return Err("the store's applier fell behind".into());
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        let pairs = batch.into_iter().map(|(k, v, _)| (k, v)).collect();
        lock(&self.apply).send(pairs).map_err(|_| "the applier stopped".to_string())
    }
}

/// A store applying batches of puts on a thread of its own (its journal never
/// synced): the sender, how many puts it applied, and the thread.
type Applier = (Sender<Vec<Pair>>, Arc<AtomicU64>, JoinHandle<Result<(), String>>);

fn applier(dir: &Path) -> Result<Applier, String> {
    let db = Database::builder(dir.join("store")).open().map_err(|e| e.to_string())?;
    let kv = db.keyspace("kv", KeyspaceCreateOptions::default).map_err(|e| e.to_string())?;
    let applied = Arc::new(AtomicU64::new(0));
    let (tx, rx) = channel::<Vec<Pair>>();
    let a = applied.clone();
    let h = std::thread::spawn(move || -> Result<(), String> {
        for batch in rx {
            let n = batch.len() as u64;
            let mut b = db.batch();
            for (k, v) in batch {
                b.insert(&kv, k, v);
            }
            b.commit().map_err(|e| e.to_string())?;
            a.fetch_add(n, Ordering::Release);
        }
        Ok(())
    });
    Ok((tx, applied, h))
}

/// A batch record: each update behind its length.
fn encode_batch<'a>(updates: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut rec = Vec::new();
    for u in updates {
        rec.extend((u.len() as u32).to_le_bytes());
        rec.extend(u);
    }
    rec
}

/// The puts of a batch record ([`encode_batch`]); `None` if it is
/// not one.
fn decode_batch(mut rec: &[u8]) -> Option<Vec<Pair>> {
    let mut out = Vec::new();
    while !rec.is_empty() {
        let len = u32::from_le_bytes(rec.get(..4)?.try_into().ok()?) as usize;
        match Update::decode(rec.get(4..4 + len)?).ok()? {
            Update::Put(k, v) => out.push((k, v)),
            _ => return None,
        }
        rec = &rec[4 + len..];
    }
    Some(out)
}

/// A member of the `rpc` configuration: member 0 the primary with the clients,
/// the others backups running the RPC handler; every member applies the puts to
/// its store, as every Tailwind member does (`--backup-apply lazy`: the backups
/// keep the log only, as lazy Tailwind backups apply nothing while nobody reads
/// there).
pub(crate) fn member(args: &Args, id: u32, dir: &Path) -> Result<(), String> {
    let (_, _, t) =
        testkit::child_transport(&rpclog::regions(REPLICAS), Duration::from_secs(30)).map_err(|e| e.to_string())?;
    let (tx, applied, applier) = applier(dir)?;
    if id != 0 {
        let stop = Arc::new(AtomicBool::new(false));
        let (s, d) = (stop.clone(), dir.join("log"));
        let buffer = spindle_tailwind::backup::DEFAULT_BUFFER;
        let lazy = args.backup_apply == "lazy";
        let h = std::thread::spawn(move || {
            rpclog::handler(t, id as usize, Duration::ZERO, buffer, d, s, |rec| match decode_batch(rec) {
                _ if lazy => {}
                Some(puts) => drop(tx.send(puts)),
                None => tracing::warn!("rpc: a record that is not a batch of puts"),
            })
        });
        println!("IDLE");
        // A backup is told only EXIT (or the parent goes).
        let line = testkit::wait_for_parent();
        if !matches!(line.as_str(), "EXIT" | "") {
            return Err(format!("unexpected command {line:?}"));
        }
        stop.store(true, Ordering::Relaxed);
        h.join().map_err(|_| "the handler panicked")??;
        return applier.join().map_err(|_| "the applier panicked")?;
    }
    // tailwind_bench's choice for the baseline: doorbell waits on tcp, sleeps on shm.
    let store = RpcStore {
        rpc: Mutex::new(RpcPrimary::new(t, REPLICAS, args.transport == "tcp")),
        state: Mutex::new(Commits::default()),
        cv: Condvar::new(),
        apply: Mutex::new(tx),
        applied: applied.clone(),
    };
    println!("IDLE");
    serve_runs(|value| {
        let v = vec![b'v'; value];
        let r = load(args.clients, args.seconds, &|i| store.put(&key(i), &v))?;
        // As for Tailwind: how far behind the store was, and how long it took.
        let done = lock(&store.state).done;
        let lag = done.saturating_sub(applied.load(Ordering::Acquire));
        let t = Instant::now();
        while applied.load(Ordering::Acquire) < done {
            if t.elapsed() > Duration::from_secs(60) {
                return Err("the store did not apply the acknowledged puts in 60 s".into());
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        Ok(member_row(args, "rpc", value, r, lag, t))
    })?;
    drop(store);
    applier.join().map_err(|_| "the applier panicked")??;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_and_garbage_is_none() {
        let puts: Vec<Pair> = vec![(b"a".to_vec(), b"1".to_vec()), (b"key".to_vec(), vec![7; 300])];
        let recs: Vec<Vec<u8>> = puts.iter().map(|(k, v)| Update::Put(k.clone(), v.clone()).encode()).collect();
        let rec = encode_batch(recs.iter().map(|r| r.as_slice()));
        assert_eq!(decode_batch(&rec), Some(puts));
        assert_eq!(decode_batch(&[]), Some(Vec::new()));
        let del = encode_batch([Update::Del(b"k".to_vec()).encode().as_slice()].into_iter());
        for bad in [&rec[..rec.len() - 1], &rec[..3], &[9, 0, 0, 0, b'P'][..], &del[..]] {
            assert_eq!(decode_batch(bad), None, "{bad:?}");
        }
    }
}
