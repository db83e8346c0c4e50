//! A sharded store's members as threads of this process over shm: a client that
//! routes each key to its shard's primary, and a live migration of a range while
//! a writer keeps writing, after which every acknowledged write reads back and
//! the old owner holds none of the range; and the same with the primary of the
//! range's new or old shard stopped in the middle of the move. Beside the writer,
//! clients record a history of puts and gets on a few keys through each move,
//! checked for linearizability per key (`spindle_kv::shard::sim::check`). A
//! member holds the stores of the shards it replicates only: the one that
//! becomes a replica when another stops opens its store and catches up.

use spindle_kv::shard::client::ShardClient;
use spindle_kv::shard::host::{HostConfig, ShardHost};
use spindle_kv::shard::key_hash;
use spindle_kv::shard::sim::check::linearizable;
use spindle_kv::shard::sim::{Kind, OpRecord};
use spindle_sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spindle_views::config::{Config, Transport};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
const KEYS: u32 = 2000;

fn member(name: &str, id: u32, contact: Option<std::net::SocketAddr>, dir: &std::path::Path) -> ShardHost {
    let mut b = Config::builder(id, testkit::free_control_addr())
        .name(name)
        .transport(Transport::Shm)
        .timeouts(Duration::from_millis(50), Duration::from_millis(1000));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    // Small batches: the move takes long enough for writes to land in the middle.
    let cfg = HostConfig { replicas: 2, buffer: 256 * 1024, pull_batch: 8, ..HostConfig::new(dir, 2) };
    ShardHost::start(b.build().unwrap(), cfg).unwrap()
}

fn three(name: &str, dirs: &[std::path::PathBuf]) -> Vec<ShardHost> {
    let m0 = member(name, 0, None, &dirs[0]);
    let contact = m0.group().listen_addr();
    let mut all = vec![m0];
    for i in 1..3u32 {
        all.push(member(name, i, Some(contact), &dirs[i as usize]));
    }
    assert!(all[0].group().wait_for_members(3, WAIT));
    all
}

/// A client that writes keys in a spread order until stopped, recording every
/// acknowledged value.
struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<BTreeMap<Vec<u8>, Vec<u8>>>>,
    thread: std::thread::JoinHandle<u32>,
}

impl Writer {
    fn start(contacts: &[std::net::SocketAddr], acked: BTreeMap<Vec<u8>, Vec<u8>>) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(acked));
        let (s, a, contacts) = (stop.clone(), acked.clone(), contacts.to_vec());
        let thread = std::thread::spawn(move || {
            let c = ShardClient::connect(&contacts, None).unwrap();
            let mut n = 0u32;
            while !s.load(Ordering::SeqCst) {
                let i = n.wrapping_mul(7919) % KEYS;
                let (k, v) = (format!("key/{i:04}").into_bytes(), format!("w{n}").into_bytes());
                c.put(&k, &v).unwrap();
                a.lock().unwrap().insert(k, v);
                n += 1;
            }
            n
        });
        Writer { stop, acked, thread }
    }

    /// Stops it; every value acknowledged per key.
    fn stop(self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.stop.store(true, Ordering::SeqCst);
        let writes = self.thread.join().unwrap();
        assert!(writes > 0);
        eprintln!("{writes} writes while the range moved");
        self.acked.lock().unwrap().clone()
    }
}

/// Keys of the recorded history.
const HKEYS: usize = 12;
/// Requests each history client makes at most (one every millisecond or so:
/// the history spans the move).
const HOPS: usize = 1500;

/// Clients that put and get `HKEYS` keys, recording when each request started
/// and was answered on one logical clock (ticked before a request goes and after
/// its answer came, so the clock's order is real time's).
struct Recorder {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<Vec<OpRecord>>>,
    clock: Arc<AtomicU64>,
}

impl Recorder {
    fn start(contacts: &[std::net::SocketAddr], clients: usize) -> Recorder {
        let stop = Arc::new(AtomicBool::new(false));
        let clock = Arc::new(AtomicU64::new(1));
        let threads = (0..clients)
            .map(|c| {
                let (stop, clock, contacts) = (stop.clone(), clock.clone(), contacts.to_vec());
                std::thread::spawn(move || {
                    let client = ShardClient::connect(&contacts, None).unwrap();
                    let mut ops = Vec::new();
                    for n in 0..HOPS {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let key = (n * 7 + c * 5) % HKEYS;
                        let k = format!("h/{key}").into_bytes();
                        let write = (n + c) % 2 == 0;
                        let invoke = clock.fetch_add(1, Ordering::SeqCst);
                        let (kind, result) = match write {
                            true => {
                                let v = format!("c{c}-{n}").into_bytes();
                                client.put(&k, &v).unwrap();
                                (Kind::Write(Some(v)), None)
                            }
                            false => (Kind::Read, Some(client.get(&k).unwrap())),
                        };
                        let response = Some(clock.fetch_add(1, Ordering::SeqCst));
                        ops.push(OpRecord { client: c, key, kind, result, invoke, response, served: None });
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    ops
                })
            })
            .collect();
        Recorder { stop, threads, clock }
    }

    /// Stops the clients and checks each key's history.
    fn check(self) {
        self.stop.store(true, Ordering::SeqCst);
        let began = std::time::Instant::now();
        let ops: Vec<OpRecord> = self.threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        assert!(self.clock.load(Ordering::SeqCst) > 1);
        for key in 0..HKEYS {
            let mine: Vec<&OpRecord> = ops.iter().filter(|o| o.key == key).collect();
            if let Err(why) = linearizable(&mine) {
                for o in &mine {
                    eprintln!("{o:?}");
                }
                panic!("key h/{key}'s history is not linearizable: {why}");
            }
        }
        eprintln!(
            "{} recorded requests, each key's history linearizable (checked in {:?})",
            ops.len(),
            began.elapsed()
        );
    }
}

/// Puts `KEYS` keys through a client; their values.
fn fill(client: &ShardClient) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut want = BTreeMap::new();
    for i in 0..KEYS {
        let (k, v) = (format!("key/{i:04}").into_bytes(), format!("v{i}").into_bytes());
        client.put(&k, &v).unwrap();
        want.insert(k, v);
    }
    want
}

#[test]
fn keys_spread_over_shards_and_a_range_moves_while_written() {
    let name = format!("kvh{}", std::process::id());
    let dirs = testkit::TempDirs::new(&name, 3);
    let hosts = three(&name, &dirs);
    let contacts: Vec<_> = hosts.iter().map(|h| h.group().listen_addr()).collect();
    let client = ShardClient::connect(&contacts, None).unwrap();
    // Enough keys for the move to take several batches.
    let want = fill(&client);
    for (k, v) in &want {
        assert_eq!(client.get(k).unwrap().as_ref(), Some(v));
    }
    let (map, _) = hosts[0].map();
    let route = client.route().expect("a route table");
    assert!(route.primaries.iter().all(Option::is_some), "every shard has a primary: {route:?}");

    // A writer keeps writing while shard 0's whole part moves to shard 1, and
    // others record a history.
    let w = Writer::start(&contacts, want.clone());
    let history = Recorder::start(&contacts, 3);
    let range = map.spans().into_iter().find(|(_, owner)| *owner == 0).expect("shard 0 owns a part").0;
    hosts[1].migrate(range, 1, WAIT).unwrap();
    assert!(hosts[0].wait_migrations(WAIT), "the migration ended");
    std::thread::sleep(Duration::from_millis(200));
    let acked = w.stop();
    history.check();
    for (k, v) in &acked {
        assert_eq!(client.get(k).unwrap().as_ref(), Some(v), "{}", String::from_utf8_lossy(k));
    }
    // A scan gathers both shards' parts (every key is shard 1's now).
    let scanned: BTreeMap<Vec<u8>, Vec<u8>> = client.scan(b"key/", u32::MAX).unwrap().into_iter().collect();
    assert_eq!(scanned, acked);
    let (after, _) = hosts[0].map();
    assert!(after.migrations().is_empty());
    assert!(after.spans().iter().all(|(_, owner)| *owner == 1), "shard 1 owns every hash now");
    // The old owner's stores (at the members that hold a copy of its log: two
    // of the three) dropped the range.
    let holders: Vec<_> = hosts.iter().filter_map(|h| h.store(0).map(|s| (h, s))).collect();
    assert_eq!(holders.len(), 2, "two members hold shard 0's store");
    for (h, store) in holders {
        let left = testkit::poll_until(WAIT, Duration::from_millis(20), || {
            store.sync().is_ok()
                && store.scan(b"", usize::MAX).unwrap().iter().all(|(k, _)| !range.contains(key_hash(k)))
        });
        assert!(left, "member {:?} still holds keys of the moved range in shard 0", h.node());
    }
    let status = client.status().unwrap();
    assert!(status.migrations.is_empty());
    drop(client);
    drop(hosts);
}

#[test]
fn a_move_finishes_and_loses_no_write_when_the_new_owners_primary_stops_midway() {
    stopped_midway(1);
}

#[test]
fn a_move_finishes_and_loses_no_write_when_the_old_owners_primary_stops_midway() {
    stopped_midway(0);
}

/// Moves shard 0's part to shard 1 under writes and stops the primary of shard
/// `victim` while the records are being pulled (with 2 copies of each log, the
/// other copy takes over).
fn stopped_midway(victim: u16) {
    // RUST_LOG=spindle_tailwind=info shows the logs' recoveries.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let name = format!("kvk{victim}{}", std::process::id());
    let dirs = testkit::TempDirs::new(&name, 3);
    let mut hosts: Vec<Option<ShardHost>> = three(&name, &dirs).into_iter().map(Some).collect();
    let contacts: Vec<_> = hosts.iter().flatten().map(|h| h.group().listen_addr()).collect();
    let client = ShardClient::connect(&contacts, None).unwrap();
    let want = fill(&client);
    let (map, _) = hosts[0].as_ref().unwrap().map();
    let range = map.spans().into_iter().find(|(_, owner)| *owner == 0).expect("shard 0 owns a part").0;
    let w = Writer::start(&contacts, want);
    let history = Recorder::start(&contacts, 3);
    let route = client.route().unwrap();
    let (node, _) = route.primaries[usize::from(victim)].expect("a primary");
    let asker = hosts.iter().flatten().find(|h| h.node().0 != node).unwrap();
    asker.migrate(range, 1, WAIT).unwrap();
    // Midway: once some of the range is at shard 1's store.
    let target = hosts.iter().flatten().find(|h| h.node().0 == route.primaries[1].unwrap().0).unwrap();
    let begun = testkit::poll_until(WAIT, Duration::from_millis(1), || !target.store(1).unwrap().pulls().is_empty());
    assert!(begun, "the pull began");
    let at = hosts.iter().position(|h| h.as_ref().is_some_and(|h| h.node().0 == node)).unwrap();
    drop(hosts[at].take());
    let live: Vec<&ShardHost> = hosts.iter().flatten().collect();
    assert!(live[0].group().wait_for_view(WAIT, |v| v.members().len() == 2), "the others saw it stop");
    if !live[0].wait_migrations(2 * WAIT) {
        for h in &live {
            let (m, v) = h.map();
            let prim: Vec<_> = (0..2).map(|s| h.store(s).map(|x| x.log().primary())).collect();
            let (node, pulls, members) = (h.node(), h.store(1).map(|x| x.pulls()), h.group().members());
            eprintln!("member {node:?}: map version {v}, migrations {:?}, primaries {prim:?}, shard 1's open pulls {pulls:?}, members {members:?}", m.migrations());
        }
        panic!("the migration ended after the failure");
    }
    std::thread::sleep(Duration::from_millis(200));
    let acked = w.stop();
    history.check();
    for (k, v) in &acked {
        assert_eq!(client.get(k).unwrap().as_ref(), Some(v), "{}", String::from_utf8_lossy(k));
    }
    // With two members left, each holds a copy of both shards' logs, so both
    // hold both stores: the one that was no replica of a shard before opened
    // its store and caught up.
    let (map, _) = live[0].map();
    for h in &live {
        for s in 0..2 {
            let held = testkit::poll_until(WAIT, Duration::from_millis(20), || h.store(s).is_some());
            assert!(held, "member {:?} opened no store of shard {s}", h.node());
            let store = h.store(s).unwrap();
            store.sync().unwrap();
            for (k, v) in acked.iter().filter(|(k, _)| map.owner_of(k) == s) {
                assert_eq!(store.get(k).unwrap().as_ref(), Some(v), "member {:?}, shard {s}", h.node());
            }
        }
    }
    drop(client);
    drop(hosts);
}
