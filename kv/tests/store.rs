//! The replicated key-value store (`spindle_kv`), members as threads of this
//! process over shm: puts at the primary and at a backup, reads everywhere,
//! prefix scans, snapshots and a log trim, a failover under concurrent puts after
//! which every member's contents equal the acknowledged puts, and a member's store
//! reopened on its directory that goes on from where it stopped.

use spindle_kv::{Apply, Store, StoreError};
use spindle_tailwind::service::Lsn;
use spindle_views::config::Transport;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;
use common::{contents, log_over, synced, three_logs, Kv, WAIT};

#[test]
fn the_store_keeps_every_acknowledged_put_through_a_failover() {
    failover(Apply::Eager);
}

#[test]
fn a_store_with_lazy_backups_keeps_every_acknowledged_put_through_a_failover() {
    failover(Apply::Lazy);
}

fn failover(apply: Apply) {
    let name = format!("kvs{}{}", std::process::id(), apply as u8);
    let dirs = testkit::TempDirs::new(&name, 3);
    let logs = three_logs(&name, &dirs, Transport::Shm);
    let mut stores: Vec<Option<Kv>> =
        (0..3).map(|i| Some(Store::open_with(&dirs[i].join("store"), logs[i].clone(), apply).unwrap())).collect();
    let s = |i: usize| stores[i].as_ref().unwrap();
    let mut want = BTreeMap::new();
    for i in 0..300u32 {
        let (k, v) = (format!("user/{i:04}").into_bytes(), format!("value {i}").into_bytes());
        // Every third put at a backup (forwarded to the primary).
        s(if i % 3 == 0 { 1 } else { 0 }).put(&k, &v).unwrap();
        want.insert(k, v);
    }
    s(0).put(b"other/a", b"1").unwrap();
    s(0).del(b"user/0007").unwrap();
    want.insert(b"other/a".to_vec(), b"1".to_vec());
    want.remove(b"user/0007".as_slice());
    if apply == Apply::Lazy {
        // Nothing waited at member 2: its store applied nothing yet.
        assert_eq!(s(2).applied(), Lsn(0), "a lazy backup applied on its own");
    }
    // A put is applied where it was made; the others catch up by sync.
    assert_eq!(s(1).get(b"user/0297").unwrap(), Some(b"value 297".to_vec()));
    for i in 0..3 {
        assert_eq!(contents(s(i)), want, "member {i}");
    }
    let users = s(2).scan(b"user/00", 100).unwrap();
    assert_eq!(users.len(), 99, "user/0000..0099 without 0007");
    assert!(users.windows(2).all(|w| w[0].0 < w[1].0), "in key order");
    // Snapshots everywhere, then the log is trimmed below the oldest.
    for i in 0..3 {
        s(i).snapshot().unwrap();
    }
    for i in 0..3 {
        synced(s(i));
    }
    let point = s(0).trim_log().unwrap().expect("every member took a snapshot");
    assert!(point.0 >= 300, "{point:?}");
    assert!(logs.iter().all(|l| l.trimmed() == point));

    // Concurrent puts at member 1 while the primary fails: every acknowledged
    // put is in every survivor's store, nothing else.
    let acked = Arc::new(Mutex::new(Vec::new()));
    let s0 = stores[0].take();
    std::thread::scope(|sc| {
        let (a, s1) = (acked.clone(), stores[1].as_ref().unwrap());
        let w = sc.spawn(move || {
            for i in 0..400u32 {
                let (k, v) = (format!("late/{i:04}").into_bytes(), vec![b'x'; 100]);
                match s1.put(&k, &v) {
                    Ok(_) => a.lock().unwrap().push((k, v)),
                    Err(
                        StoreError::Log(_) | StoreError::NoPrimary | StoreError::Read(_) | StoreError::NotApplied(_),
                    ) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        drop(s0);
        logs[0].group().shutdown();
        w.join().unwrap();
    });
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 300, "most puts went through: {}", acked.len());
    let survivors = [1, 2];
    let seen = contents(stores[1].as_ref().unwrap());
    for (k, v) in &acked {
        assert_eq!(seen.get(k), Some(v), "an acknowledged put is missing");
    }
    for (k, v) in &want {
        assert_eq!(seen.get(k), Some(v));
    }
    assert!(seen.keys().all(|k| want.contains_key(k) || k.starts_with(b"late/")));
    assert_eq!(contents(stores[2].as_ref().unwrap()), seen, "the survivors agree");
    // Member 2's store closes and opens again on its directory: it goes on from
    // where it stopped and sees what came meanwhile.
    let applied = stores[2].as_ref().unwrap().applied();
    drop(stores[2].take());
    stores[1].as_ref().unwrap().put(b"while closed", b"yes").unwrap();
    let again: Kv = Store::open_with(&dirs[2].join("store"), logs[2].clone(), apply).unwrap();
    assert!(again.applied() >= applied);
    let mut expect = seen.clone();
    expect.insert(b"while closed".to_vec(), b"yes".to_vec());
    assert_eq!(contents(&again), expect);
    drop(again);
    for i in survivors {
        drop(stores[i].take());
    }
    drop(logs);
}

/// A fourth member (the log keeps three copies: it holds none) joins while puts
/// stream at the primary: its store gets every update from before its join by
/// reading the log from the replicas, then follows it; puts and reads at it work,
/// and the primary serves through the join.
#[test]
fn a_member_added_to_a_running_store_gets_every_update_and_serves_on_shm() {
    joiner_serves(Transport::Shm);
}

#[test]
fn a_member_added_to_a_running_store_gets_every_update_and_serves_on_tcp() {
    joiner_serves(Transport::Tcp);
}

fn joiner_serves(t: Transport) {
    let name = format!("kvj{}{}", std::process::id(), t as u8);
    let dirs = testkit::TempDirs::new(&name, 4);
    let logs = three_logs(&name, &dirs, t);
    let contact = logs[0].group().listen_addr();
    let primary: Kv = Store::open(&dirs[0].join("store"), logs[0].clone()).unwrap();
    let acked = Arc::new(Mutex::new(BTreeMap::new()));
    let joiner = std::thread::scope(|sc| {
        let (a, p) = (acked.clone(), &primary);
        sc.spawn(move || {
            for i in 0..2000u32 {
                let (k, v) = (format!("key/{i:05}").into_bytes(), format!("value {i}").into_bytes());
                // A put that fails while the view changes is tried again (a tagged
                // retry lands once); each must go through within the deadline.
                let deadline = std::time::Instant::now() + WAIT;
                loop {
                    match p.put(&k, &v) {
                        Ok(_) => break,
                        Err(e) if std::time::Instant::now() < deadline => {
                            eprintln!("put {i} again: {e}");
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        Err(e) => panic!("put {i}: {e}"),
                    }
                }
                a.lock().unwrap().insert(k, v);
            }
        });
        // The fourth member joins once a quarter of the puts are in.
        assert!(testkit::poll_until(WAIT, Duration::from_millis(5), || acked.lock().unwrap().len() >= 500));
        let l3 = log_over(&name, 3, Some(contact), &dirs[3], t);
        assert!(l3.committed().is_none(), "the fourth member holds no copy of the log");
        let s3: Kv = Store::open(&dirs[3].join("store"), l3.clone()).unwrap();
        (l3, s3)
    });
    let (l3, s3) = joiner;
    let mut want = acked.lock().unwrap().clone();
    assert_eq!(want.len(), 2000);
    s3.put(b"joiner/own", b"yes").unwrap();
    want.insert(b"joiner/own".to_vec(), b"yes".to_vec());
    assert_eq!(s3.get(b"key/00000").unwrap(), Some(b"value 0".to_vec()), "from before its join");
    assert_eq!(contents(&s3), want, "the joiner holds every key");
    assert_eq!(contents(&primary), want, "and so does the primary");
    drop((s3, primary));
    drop(l3);
    drop(logs);
}

/// A fourth member joins after the log was trimmed past every record it would
/// need: it takes a checkpoint of another member's store, then follows the log,
/// and holds every key (the deleted one gone), takes puts and answers reads.
#[test]
fn a_member_added_after_a_trim_takes_a_checkpoint_of_the_store() {
    let name = format!("kvc{}", std::process::id());
    let dirs = testkit::TempDirs::new(&name, 4);
    let logs = three_logs(&name, &dirs, Transport::Shm);
    let stores: Vec<Kv> = (0..3).map(|i| Store::open(&dirs[i].join("store"), logs[i].clone()).unwrap()).collect();
    let mut want = BTreeMap::new();
    // Enough for several checkpoint pages (about 1 MiB each).
    for i in 0..3000u32 {
        let (k, v) = (format!("key/{i:05}").into_bytes(), vec![b'a' + (i % 26) as u8; 1000]);
        stores[0].put(&k, &v).unwrap();
        want.insert(k, v);
    }
    stores[0].del(b"key/00042").unwrap();
    want.remove(b"key/00042".as_slice());
    for s in &stores {
        synced(s);
    }
    for s in &stores {
        s.snapshot().unwrap();
    }
    for s in &stores {
        synced(s);
    }
    let point = stores[0].trim_log().unwrap().expect("every member took a snapshot");
    // Record 0 is gone: the joiner, which needs the log from 0, must take a checkpoint.
    assert!(point.0 > 0, "{point:?}");
    let l3 = log_over(&name, 3, Some(logs[0].group().listen_addr()), &dirs[3], Transport::Shm);
    let s3: Kv = Store::open(&dirs[3].join("store"), l3.clone()).unwrap();
    s3.put(b"joiner/own", b"yes").unwrap();
    want.insert(b"joiner/own".to_vec(), b"yes".to_vec());
    assert_eq!(s3.get(b"key/00000").unwrap().map(|v| v.len()), Some(1000), "from the checkpoint");
    assert_eq!(s3.get(b"key/00042").unwrap(), None, "a deleted key stays deleted");
    assert_eq!(contents(&s3), want, "the joiner holds every key");
    assert!(s3.applied().0 > point.0, "it applied the log after the checkpoint");
    drop(s3);
    drop(l3);
    drop(stores);
    drop(logs);
}

/// Connections that say nothing, held at every member's control and data ports
/// while a fourth member joins over tcp: the join, the puts at the primary and the
/// joiner's reads all go through.
#[test]
fn idle_hostile_connections_do_not_stall_a_join_over_tcp() {
    let name = format!("kvh{}", std::process::id());
    let dirs = testkit::TempDirs::new(&name, 4);
    let logs = three_logs(&name, &dirs, Transport::Tcp);
    let primary: Kv = Store::open(&dirs[0].join("store"), logs[0].clone()).unwrap();
    for i in 0..200u32 {
        primary.put(format!("k{i}").as_bytes(), b"v").unwrap();
    }
    let mut held = Vec::new();
    for l in &logs {
        let a = l.group().listen_addr();
        for port in [a.port(), a.port() + 1] {
            for _ in 0..4 {
                if let Ok(c) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                    held.push(c);
                }
            }
        }
    }
    assert!(!held.is_empty());
    let l3 = log_over(&name, 3, Some(logs[0].group().listen_addr()), &dirs[3], Transport::Tcp);
    let s3: Kv = Store::open(&dirs[3].join("store"), l3.clone()).unwrap();
    primary.put(b"after", b"join").unwrap();
    synced(&s3);
    assert_eq!(s3.get(b"after").unwrap(), Some(b"join".to_vec()), "a put at the primary, read at the joiner");
    let all = contents(&primary);
    assert_eq!(all.len(), 201);
    assert_eq!(contents(&s3), all, "the joiner holds every key");
    drop(held);
    drop((s3, primary));
    drop(l3);
    drop(logs);
}
