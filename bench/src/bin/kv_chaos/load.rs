//! The clients of a `kv_chaos` round: a writer that keeps every key's last
//! acknowledged value, and clients whose puts and gets on a few keys are
//! recorded for the linearizability check.

use spindle_kv::shard::client::ShardClient;
use spindle_kv::shard::sim::check::linearizable;
use spindle_kv::shard::sim::{Kind, OpRecord};
use spindle_sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the writer knows of each key: its last acknowledged value, and the
/// keys whose last put failed (it may or may not have been applied: those are
/// not checked until a later put to them is acknowledged).
#[derive(Debug, Default, Clone)]
pub(crate) struct Acked {
    pub(crate) values: BTreeMap<Vec<u8>, Vec<u8>>,
    pub(crate) unsure: BTreeSet<Vec<u8>>,
    pub(crate) errors: u64,
}

/// The name of the writer's key `i`.
pub(crate) fn key(i: u32) -> Vec<u8> {
    format!("key/{i:05}").into_bytes()
}

/// Puts every one of `keys` keys once, from four clients: what was acknowledged.
pub(crate) fn fill(contacts: &[SocketAddr], keys: u32) -> Result<Acked, String> {
    type Part = JoinHandle<Result<Vec<(Vec<u8>, Vec<u8>)>, String>>;
    let parts: Vec<Part> = (0..4u32)
        .map(|p| {
            let contacts = contacts.to_vec();
            std::thread::spawn(move || {
                let c = ShardClient::connect(&contacts, None).map_err(|e| format!("a client: {e}"))?;
                (p..keys)
                    .step_by(4)
                    .map(|i| {
                        let (k, v) = (key(i), format!("fill{i}").into_bytes());
                        c.put(&k, &v).map_err(|e| format!("filling: {e}"))?;
                        Ok((k, v))
                    })
                    .collect()
            })
        })
        .collect();
    let mut acked = Acked::default();
    for p in parts {
        acked.values.extend(p.join().map_err(|_| "a filling client panicked")??);
    }
    Ok(acked)
}

/// A client that writes `keys` keys in a spread order until stopped.
pub(crate) struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Acked>>,
    thread: JoinHandle<u64>,
}

/// At most this many requests per client and round: every loop ends.
const MAX_REQUESTS: u64 = 1_000_000;

impl Writer {
    pub(crate) fn start(client: ShardClient, keys: u32, round: usize, acked: Acked) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(acked));
        let (s, a) = (stop.clone(), acked.clone());
        let thread = std::thread::spawn(move || {
            let mut n = 0u64;
            while !s.load(Ordering::SeqCst) && n < MAX_REQUESTS {
                let k = key((n.wrapping_mul(7919) % u64::from(keys)) as u32);
                let v = format!("r{round}-w{n}").into_bytes();
                let r = client.put(&k, &v);
                let mut a = a.lock().unwrap_or_else(|p| p.into_inner());
                match r {
                    Ok(()) => {
                        a.unsure.remove(&k);
                        a.values.insert(k, v);
                    }
                    Err(_) => {
                        a.errors += 1;
                        a.unsure.insert(k);
                    }
                }
                n += 1;
            }
            n
        });
        Writer { stop, acked, thread }
    }

    /// Stops it: the puts it made, and what it knows of each key.
    pub(crate) fn stop(self) -> (u64, Acked) {
        self.stop.store(true, Ordering::SeqCst);
        let n = self.thread.join().unwrap_or(0);
        let a = self.acked.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (n, a)
    }
}

/// Keys of the recorded history.
pub(crate) const HKEYS: usize = 12;

/// Clients that put and get [`HKEYS`] keys, recording when each request started
/// and was answered on one logical clock (ticked before a request goes and after
/// its answer came, so the clock's order is real time's). A put that failed is
/// recorded without an answer: it may take effect at any later time.
pub(crate) struct Recorder {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<OpRecord>>>,
}

impl Recorder {
    pub(crate) fn start(contacts: &[SocketAddr], clients: usize, round: usize) -> Result<Recorder, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let clock = Arc::new(AtomicU64::new(1));
        let mut threads = Vec::new();
        for c in 0..clients {
            let client = ShardClient::connect(contacts, None).map_err(|e| format!("a history client: {e}"))?;
            let (stop, clock) = (stop.clone(), clock.clone());
            threads.push(std::thread::spawn(move || {
                let mut ops = Vec::new();
                for n in 0..MAX_REQUESTS as usize {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let key = (n * 7 + c * 5) % HKEYS;
                    let k = format!("h/{key}").into_bytes();
                    let invoke = clock.fetch_add(1, Ordering::SeqCst);
                    let (kind, result, ok) = if (n + c) % 2 == 0 {
                        let v = format!("r{round}-c{c}-{n}").into_bytes();
                        let ok = client.put(&k, &v).is_ok();
                        (Kind::Write(Some(v)), None, ok)
                    } else {
                        match client.get(&k) {
                            Ok(got) => (Kind::Read, Some(got), true),
                            // A failed read had no effect: nothing to record.
                            Err(_) => continue,
                        }
                    };
                    let response = ok.then(|| clock.fetch_add(1, Ordering::SeqCst));
                    ops.push(OpRecord { client: c, key, kind, result, invoke, response, served: None });
                    std::thread::sleep(Duration::from_millis(2));
                }
                ops
            }));
        }
        Ok(Recorder { stop, threads })
    }

    /// Stops the clients and checks each key's history: the requests recorded,
    /// those never answered, or the first key whose history is not linearizable.
    pub(crate) fn check(self) -> Result<(usize, usize), String> {
        self.stop.store(true, Ordering::SeqCst);
        let ops: Vec<OpRecord> = self.threads.into_iter().flat_map(|t| t.join().unwrap_or_default()).collect();
        for key in 0..HKEYS {
            let mine: Vec<&OpRecord> = ops.iter().filter(|o| o.key == key).collect();
            if let Err(why) = linearizable(&mine) {
                for o in &mine {
                    bench::err(&format!("{o:?}"));
                }
                return Err(format!("key h/{key}'s history is not linearizable: {why}"));
            }
        }
        Ok((ops.len(), ops.iter().filter(|o| o.response.is_none()).count()))
    }
}
