//! Packing: small messages published before the predicate thread's next pass
//! share one entry and one index, and every member delivers each of them, in
//! order, once. Cores driven by hand through `Sim::manual`; then the runtime with
//! several sender threads on real transports.

use spindle_smc::runtime::{Runtime, SubgroupSetup};
use spindle_smc::sim::Sim;
use spindle_smc::{Mode, SmcLayout, SubgroupSpec};
use spindle_sst::predicate::PollConfig;
use spindle_sst::sync::{Arc, Mutex};
use spindle_sst::transport::{NodeId, RegionId, RegionSpec};
use std::time::Duration;
use testkit::{local_group, TransportKind};

fn spec(n: u32, senders: &[u32], window: usize, max_msg: usize, mode: Mode) -> SubgroupSpec {
    SubgroupSpec {
        members: (0..n).map(NodeId).collect(),
        senders: senders.iter().copied().map(NodeId).collect(),
        window,
        max_msg,
        arena: 0,
        mode,
        relay: false,
    }
}

/// Publishes `data` from node `i` without a pass (as a sender thread does).
fn publish(sim: &Sim, i: usize, data: &[u8]) -> u64 {
    let s = sim.nodes[i].core.sender().expect("a sender");
    s.set_packing(true);
    let r = s.try_reserve(data.len()).expect("room");
    r.write(0, data);
    r.publish()
}

type Got = Vec<Vec<(usize, u64, Vec<u8>)>>;

/// Passes (take in, receive, send, deliver) and flushes until nothing moves; what
/// each node delivered, (sender, index, payload), is added to `got`. (The sim's
/// own pass checks invariants that key deliveries by index, which a pack shares.)
#[allow(clippy::needless_range_loop)] // `i` names a node in `sim` and in `got`
fn settle(sim: &mut Sim, got: &mut Got) {
    got.resize(sim.nodes.len(), Vec::new());
    for _ in 0..10 {
        for i in 0..sim.nodes.len() {
            let mut p = spindle_sst::predicate::Pushes::default();
            sim.nodes[i].core.poll(&mut p);
            while let Some(d) = sim.nodes[i].core.take_deliverable() {
                got[i].extend(d.batch.iter().map(|m| (m.sender(), m.index(), m.to_vec())));
                sim.nodes[i].core.finish(d, &mut p);
            }
            sim.post(i, &mut p);
        }
        sim.flush();
    }
}

#[test]
fn messages_published_between_passes_share_an_entry_and_are_all_delivered() {
    let mut sim = Sim::manual(spec(3, &[0], 4, 64, Mode::Ordered));
    let mut got = Got::new();
    // Three messages of different lengths before any pass: one entry, index 0.
    let idx: Vec<u64> = [&b"one"[..], b"second!!", b"third, longer."].iter().map(|m| publish(&sim, 0, m)).collect();
    assert_eq!(idx, vec![0, 0, 0], "they share the entry's index");
    settle(&mut sim, &mut got);
    // After the pass took the pack in, the next message opens a new entry.
    assert_eq!(publish(&sim, 0, b"fourth"), 1);
    settle(&mut sim, &mut got);
    let want: Vec<(usize, u64, Vec<u8>)> = vec![
        (0, 0, b"one".to_vec()),
        (0, 0, b"second!!".to_vec()),
        (0, 0, b"third, longer.".to_vec()),
        (0, 1, b"fourth".to_vec()),
    ];
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g, &want, "node {i} delivers each message once, in order");
    }
    assert_eq!(sim.nodes[0].core.stats().messages_sent, 4);
}

#[test]
fn a_full_pack_closes_and_the_next_message_takes_a_new_index() {
    // 40 payload bytes per slot: two 8-byte messages (16 bytes each in a pack) fit,
    // a third does not.
    let mut sim = Sim::manual(spec(2, &[0], 4, 40, Mode::Ordered));
    let mut got = Got::new();
    let idx: Vec<u64> = (0..5u8).map(|k| publish(&sim, 0, &[k; 8])).collect();
    assert_eq!(idx, vec![0, 0, 1, 1, 2]);
    settle(&mut sim, &mut got);
    let want: Vec<(usize, u64, Vec<u8>)> = (0..5u8).map(|k| (0, idx[k as usize], vec![k; 8])).collect();
    assert_eq!(got[1], want);
}

#[test]
fn a_reservation_that_joined_and_is_given_back_leaves_the_pack_as_it_was() {
    let mut sim = Sim::manual(spec(2, &[0], 4, 64, Mode::Ordered));
    let mut got = Got::new();
    publish(&sim, 0, b"kept");
    let s = sim.nodes[0].core.sender().unwrap();
    let r = s.try_reserve(8).unwrap();
    assert_eq!(r.index(), 0, "it joined the open pack");
    r.write(0, b"dropped!");
    r.abandon();
    assert_eq!(publish(&sim, 0, b"kept too"), 0, "the pack is still open");
    settle(&mut sim, &mut got);
    assert_eq!(got[1], vec![(0, 0, b"kept".to_vec()), (0, 0, b"kept too".to_vec())]);
    assert_eq!(sim.nodes[1].core.stats().nulls, 0, "nothing was skipped");
}

type Log = Arc<Mutex<Vec<(usize, u64, Vec<u8>)>>>;

/// Three members, every one sending from two threads with packing on: each
/// member delivers every message once, the same sequence everywhere, and each
/// thread's messages in the order it sent them.
fn run(kind: TransportKind) {
    let n = 3usize;
    let spec = spec(n as u32, &[0, 1, 2], 8, 256, Mode::Ordered);
    let regions = [RegionSpec { id: RegionId(0), len: SmcLayout::new(&spec).table_bytes() }];
    let g = local_group(kind, n, &regions, Duration::from_secs(20)).unwrap();
    let logs: Vec<Log> = (0..n).map(|_| Log::default()).collect();
    let runtimes: Vec<Runtime> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let log = logs[i].clone();
            let setup = SubgroupSetup {
                spec: spec.clone(),
                region: RegionId(0),
                delivery: Default::default(),
                upcall: Box::new(move |b: &spindle_smc::Batch| {
                    let mut l = log.lock().unwrap();
                    l.extend(b.iter().map(|m| (m.sender(), m.index(), m.to_vec())));
                }),
            };
            Runtime::start(t.clone(), vec![setup], PollConfig::default()).unwrap()
        })
        .collect();
    let per_thread = 3000u32;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    std::thread::scope(|s| {
        for (i, rt) in runtimes.iter().enumerate() {
            rt.subgroups()[0].set_packing(true);
            for t in 0..2u32 {
                s.spawn(move || {
                    for k in 0..per_thread {
                        // Lengths 9..=24: several fit a slot, and they are not words.
                        let msg = format!("n{i}t{t}k{k:05}{}", "x".repeat((k % 12) as usize));
                        // Never blocked past the deadline: a stalled group fails the test.
                        let sg = &rt.subgroups()[0];
                        loop {
                            match sg.try_reserve(msg.len()) {
                                Ok(mut slot) => {
                                    slot.write(0, msg.as_bytes());
                                    slot.commit();
                                    break;
                                }
                                Err(spindle_smc::SendError::Full | spindle_smc::SendError::Busy) => {
                                    assert!(
                                        std::time::Instant::now() < deadline,
                                        "node {i} thread {t}: no room by the deadline"
                                    );
                                    sg.wait_for_room(Duration::from_millis(20));
                                }
                                Err(e) => panic!("send: {e}"),
                            }
                        }
                    }
                });
            }
        }
    });
    let total = n * 2 * per_thread as usize;
    while logs.iter().any(|l| l.lock().unwrap().len() < total) {
        assert!(std::time::Instant::now() < deadline, "not every message was delivered everywhere");
        std::thread::sleep(Duration::from_millis(10));
    }
    let first = logs[0].lock().unwrap().clone();
    assert_eq!(first.len(), total, "each message once");
    for l in &logs[1..] {
        assert!(*l.lock().unwrap() == first, "every member delivers the same sequence");
    }
    // Per thread, its messages in order, none missing.
    for i in 0..n {
        for t in 0..2u32 {
            let tag = format!("n{i}t{t}k");
            let ks: Vec<u32> = first
                .iter()
                .filter_map(|(_, _, m)| {
                    std::str::from_utf8(m).ok()?.strip_prefix(&tag).map(|r| r[..5].parse().unwrap())
                })
                .collect();
            assert_eq!(ks, (0..per_thread).collect::<Vec<_>>(), "thread {t} of node {i}");
        }
    }
    let shared = first.windows(2).filter(|w| w[0].0 == w[1].0 && w[0].1 == w[1].1).count();
    eprintln!("{kind:?}: {shared} of {total} messages shared their index with the one before");
    for rt in runtimes {
        rt.stop();
    }
}

#[test]
fn packed_senders_on_shm() {
    run(TransportKind::Shm);
}

#[test]
fn packed_senders_on_tcp() {
    run(TransportKind::Tcp);
}
