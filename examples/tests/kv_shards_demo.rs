//! The `kv_shards` demo as its docs describe it, scripted: three members
//! started with one command (discovery, ids and data slots found), puts at one
//! and gets at another, a range of hashes moved to another shard, the member
//! that is the most shards' primary killed with SIGKILL, every key read at the
//! survivors, and the killed member started again with the same command coming
//! back as itself and serving every key (shm).

mod common;

use common::Member;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
const KEYS: usize = 24;

/// A member of the `kv_shards` demo started with one command (discovery, ids
/// and data slots found), on the loopback address.
fn start(name: &str, data: &std::path::Path) -> Member {
    Member::start("kv_shards", &["--ip", "127.0.0.1", "--name", name], data)
}

/// Each shard's primary, from a member's `status` (four shards).
fn primaries(m: &mut Member) -> Vec<Option<u32>> {
    m.0.tell("status");
    (0..4)
        .map(|s| {
            let line = m.expect(&format!("  shard {s}: primary "));
            line.split("primary ").nth(1).and_then(|r| r.split(',').next()).and_then(|p| p.parse().ok())
        })
        .collect()
}

/// Every key reads back at `m`.
fn check_all(m: &mut Member) {
    for i in 0..KEYS {
        assert_eq!(m.ask(&format!("get key{i}"), &format!("key{i} =")), format!("key{i} = value{i}"));
    }
}

#[test]
fn the_kv_shards_demo_moves_a_range_and_survives_a_killed_primary() {
    let name = format!("kvsd{}", std::process::id());
    let data = testkit::TempDirs::new(&name, 1);
    let data = &data[0];
    let mut ms: Vec<Member> = Vec::new();
    ms.push(start(&name, data));
    ms.push(start(&name, data));
    ms.push(start(&name, data));
    // Until each of the four shards has a primary in a view of all three.
    let ids: Vec<u32> = ms.iter().map(|m| m.1).collect();
    let formed = testkit::poll_until(WAIT, Duration::from_millis(200), || {
        let p = primaries(&mut ms[0]);
        let line = ms[0].0.seen.iter().rev().find(|l| l.contains(": members ")).cloned().unwrap_or_default();
        let listed = line.split(": members ").nth(1).and_then(|r| r.split(';').next()).unwrap_or_default();
        let listed: Vec<u32> = listed.split(", ").filter_map(|x| x.parse().ok()).collect();
        p.iter().all(Option::is_some) && ids.iter().all(|id| listed.contains(id))
    });
    assert!(formed, "the three members did not form the store");
    for i in 0..KEYS {
        ms[i % 3].ask(&format!("put key{i} value{i}"), "ok");
    }
    check_all(&mut ms[2]);
    // The first half of shard 0's part (hashes 0 to 1/4) moves to shard 3.
    ms[1].ask("migrate 0-1fffffffffffffff 3", "owns");
    ms[1].expect("migration done");
    check_all(&mut ms[0]);
    assert_eq!(ms[1].ask("scan key", "keys)"), format!("({KEYS} keys)"));
    // The member that is the primary of the most shards dies.
    let now = primaries(&mut ms[0]);
    let count = |id: u32| now.iter().filter(|p| **p == Some(id)).count();
    let victim = (0..3).max_by_key(|i| count(ms[*i].1)).unwrap();
    let victim_id = ms[victim].1;
    assert!(count(victim_id) > 0, "{now:?}");
    drop(ms.remove(victim));
    check_all(&mut ms[0]);
    ms[1].ask("put after kill", "ok");
    // Started again with the same command: it finds its slot and comes back as
    // itself, and serves every key (through the shards' primaries).
    let mut back = start(&name, data);
    assert_eq!(back.1, victim_id, "the restarted member came back as itself");
    check_all(&mut back);
    assert_eq!(back.ask("get after", "after ="), "after = kill");
    drop((ms, back));
    spindle::sst::transport::shm::remove_stale_files();
}
