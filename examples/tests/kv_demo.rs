//! The `kv` demo as its docs describe it, scripted: three members started with one
//! command (discovery, ids and data slots found), updates at the primary and at a
//! backup, a backup killed with SIGKILL and started again with the same command
//! going on from its store, then the primary killed and the survivors
//! answering with every acknowledged update and taking new ones (shm and tcp).

mod common;

use common::Member;
use std::time::{Duration, Instant};

/// A member of the `kv` demo started as its docs say, with nothing chosen by
/// hand but the loopback address.
fn start(transport: &str, name: &str, data: &std::path::Path) -> Member {
    Member::start("kv", &["--ip", "127.0.0.1", "--transport", transport, "--name", name], data)
}

fn demo(transport: &str) {
    let name = format!("kvt{}{transport}", std::process::id());
    let data = testkit::TempDirs::new(&name, 1);
    let data = &data[0];
    let mut m0 = start(transport, &name, data);
    let mut m1 = start(transport, &name, data);
    let mut m2 = start(transport, &name, data);
    let (id0, id1, id2) = (m0.1, m1.1, m2.1);
    // Wait until the third member is in the log's view, the first the primary.
    let want = format!("members {id0}, {id1}, {id2}, primary {id0},");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !m0.ask("status", &format!("member {id0}:")).contains(&want) {
        assert!(Instant::now() < deadline, "the three members did not form the log ({want})");
        std::thread::sleep(Duration::from_millis(100));
    }
    m0.ask("put colour blue", "ok (record 0)");
    m1.ask("put shape round", "ok (record 1)"); // forwarded to the primary
    m0.ask("del nothing", "ok (record 2)");
    assert_eq!(m2.ask("get colour", "colour ="), "colour = blue");
    assert_eq!(m0.ask("get shape", "shape ="), "shape = round");
    // The third is killed and started again with the same command: it finds its
    // slot, comes back as itself, and its store goes on from where it stopped,
    // with what came meanwhile.
    drop(m2);
    m0.ask("put size large", "ok (record 3)");
    let mut m2 = start(transport, &name, data);
    assert_eq!(m2.1, id2, "the restarted member came back as itself");
    let up = m2.0.seen.iter().find(|l| l.contains(" up at ")).cloned().unwrap_or_default();
    assert!(!up.contains("applied up to record 0;"), "the store kept what it applied: {up}");
    assert_eq!(m2.ask("get size", "size ="), "size = large");
    assert_eq!(m2.ask("get colour", "colour ="), "colour = blue");
    // The primary dies; the second member takes over with all four records.
    drop(m0);
    m1.expect(&format!("member {id1} is now the primary: the log holds 4 records"));
    assert_eq!(m1.ask("get colour", "colour ="), "colour = blue");
    m2.ask("put colour green", "ok (record 4)");
    assert_eq!(m1.ask("get colour", "colour ="), "colour = green");
    assert_eq!(m2.ask("get shape", "shape ="), "shape = round");
    m1.ask("list", "(3 keys)");
    assert_eq!(m2.ask("scan sh", "shape ="), "shape = round");
    m2.expect("(1 keys)");
    drop((m1, m2));
    spindle::sst::transport::shm::remove_stale_files();
}

#[test]
fn the_kv_demo_survives_its_primary_over_shm() {
    demo("shm");
}

#[test]
fn the_kv_demo_survives_its_primary_over_tcp() {
    demo("tcp");
}
