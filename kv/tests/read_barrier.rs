//! A read at a shard's primary waits only for the records of its own key (and
//! for those that touch no single key), not for everything committed ahead of
//! it; it must still see every write acknowledged before it began. One client
//! writes a key and a second reads it back at once, over and over, while other
//! clients keep the primaries' appliers busy with large values and a migration's
//! batches land at the new owner: every read returns the write just made.

use spindle_kv::shard::client::ShardClient;
use spindle_kv::shard::host::{HostConfig, ShardHost};
use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_views::config::{Config, Transport};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

fn member(name: &str, id: u32, contact: Option<std::net::SocketAddr>, dir: &std::path::Path) -> ShardHost {
    let mut b = Config::builder(id, testkit::free_control_addr())
        .name(name)
        .transport(Transport::Shm)
        .timeouts(Duration::from_millis(100), Duration::from_secs(2));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let cfg = HostConfig { replicas: 2, pull_batch: 64, ..HostConfig::new(dir, 2) };
    ShardHost::start(b.build().unwrap(), cfg).unwrap()
}

#[test]
fn a_read_right_after_a_write_sees_it_while_other_records_queue_ahead() {
    let name = format!("kvrb{}", std::process::id());
    let dirs = testkit::TempDirs::new(&name, 3);
    let mut hosts = vec![member(&name, 0, None, &dirs[0])];
    let contact = hosts[0].group().listen_addr();
    for i in 1..3u32 {
        hosts.push(member(&name, i, Some(contact), &dirs[i as usize]));
    }
    assert!(hosts[0].group().wait_for_members(3, WAIT));
    let contacts: Vec<_> = hosts.iter().map(|h| h.group().listen_addr()).collect();
    let connect = || ShardClient::connect(&contacts, None).unwrap();

    // Keys for a migration to move.
    let loader = connect();
    for i in 0..2_000u32 {
        loader.put(format!("bulk/{i}").as_bytes(), &[b'b'; 1000]).unwrap();
    }
    // Large values keep the appliers behind the commit point.
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..3u32)
        .map(|c| {
            let (stop, client) = (stop.clone(), connect());
            std::thread::spawn(move || {
                let mut n = 0u32;
                while !stop.load(Ordering::SeqCst) && n < 200_000 {
                    client.put(format!("big/{c}/{}", n % 64).as_bytes(), &[b'x'; 16 * 1024]).unwrap();
                    n += 1;
                }
            })
        })
        .collect();

    let (writer, reader) = (connect(), connect());
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut moved = false;
    let mut checked = 0u32;
    for i in 0..3_000u32 {
        assert!(Instant::now() < deadline, "the check ran past its deadline after {checked} reads");
        if i == 500 {
            // Shard 0's part moves to shard 1 while the reads go on.
            let (map, _) = hosts[0].map();
            let range = map.spans().into_iter().find(|(_, owner)| *owner == 0).expect("shard 0 owns a part").0;
            hosts[1].migrate(range, 1, WAIT).unwrap();
            moved = true;
        }
        let key = format!("rw/{}", i % 40).into_bytes();
        let value = format!("v{i}").into_bytes();
        writer.put(&key, &value).unwrap();
        let read = reader.get(&key).unwrap();
        assert_eq!(
            read.as_deref(),
            Some(&value[..]),
            "read {i} of {} missed the write before it",
            String::from_utf8_lossy(&key)
        );
        checked += 1;
    }
    stop.store(true, Ordering::SeqCst);
    busy.into_iter().for_each(|t| t.join().unwrap());
    assert!(moved && hosts.iter().all(|h| h.wait_migrations(WAIT)), "the migration ended");
    assert_eq!(checked, 3_000);
}
