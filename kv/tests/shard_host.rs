//! A sharded store's members as threads of this process over shm: a client that
//! routes each key to its shard's primary, and a live migration of a range while
//! a writer keeps writing, after which every acknowledged write reads back and
//! the old owner holds none of the range.

use spindle_kv::shard::client::ShardClient;
use spindle_kv::shard::host::{HostConfig, ShardHost};
use spindle_kv::shard::key_hash;
use spindle_views::config::{Config, Transport};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
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

#[test]
fn keys_spread_over_shards_and_a_range_moves_while_written() {
    let name = format!("kvh{}", std::process::id());
    let dirs = testkit::TempDirs::new(&name, 3);
    let hosts = three(&name, &dirs);
    let contacts: Vec<_> = hosts.iter().map(|h| h.group().listen_addr()).collect();
    let client = ShardClient::connect(&contacts, None).unwrap();
    let mut want = BTreeMap::new();
    // Enough keys for the move to take several batches.
    for i in 0..KEYS {
        let (k, v) = (format!("key/{i:04}").into_bytes(), format!("v{i}").into_bytes());
        client.put(&k, &v).unwrap();
        want.insert(k, v);
    }
    for (k, v) in &want {
        assert_eq!(client.get(k).unwrap().as_ref(), Some(v));
    }
    let (map, _) = hosts[0].map();
    let route = client.route().expect("a route table");
    assert!(route.primaries.iter().all(Option::is_some), "every shard has a primary: {route:?}");

    // A writer keeps writing while shard 0's whole part moves to shard 1.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(want.clone()));
    let writer = {
        let (stop, acked, contacts) = (stop.clone(), acked.clone(), contacts.clone());
        std::thread::spawn(move || {
            let c = ShardClient::connect(&contacts, None).unwrap();
            let mut n = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let i = n.wrapping_mul(7919) % KEYS;
                let (k, v) = (format!("key/{i:04}").into_bytes(), format!("w{n}").into_bytes());
                c.put(&k, &v).unwrap();
                acked.lock().unwrap().insert(k, v);
                n += 1;
            }
            n
        })
    };
    let range = map.spans().into_iter().find(|(_, owner)| *owner == 0).expect("shard 0 owns a part").0;
    hosts[1].migrate(range, 1, WAIT).unwrap();
    assert!(hosts[0].wait_migrations(WAIT), "the migration ended");
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::SeqCst);
    let writes = writer.join().unwrap();
    assert!(writes > 0);
    eprintln!("{writes} writes while the range moved");
    let acked = acked.lock().unwrap().clone();
    for (k, v) in &acked {
        assert_eq!(client.get(k).unwrap().as_ref(), Some(v), "{}", String::from_utf8_lossy(k));
    }
    let (after, _) = hosts[0].map();
    assert!(after.migrations().is_empty());
    assert!(after.spans().iter().all(|(_, owner)| *owner == 1), "shard 1 owns every hash now");
    // The old owner's stores dropped the range.
    for h in &hosts {
        let store = h.store(0).unwrap();
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
