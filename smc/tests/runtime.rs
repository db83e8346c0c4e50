//! The runtime on real transports: several subgroups over the same nodes, senders that
//! block on a full window, every node delivering the same sequence per subgroup.

use spindle_smc::runtime::{Runtime, SubgroupSetup};
use spindle_smc::{Mode, SmcLayout, SubgroupSpec};
use spindle_sst::predicate::PollConfig;
use spindle_sst::sync::{Arc, Mutex};
use spindle_sst::transport::{NodeId, RegionId, RegionSpec};
use std::time::Duration;
use testkit::{local_group, TransportKind};

type Log = Arc<Mutex<Vec<(usize, u64, Vec<u8>)>>>;

fn run(kind: TransportKind, mode: Mode) {
    let n = 3;
    let members: Vec<NodeId> = (0..n).map(NodeId).collect();
    // Subgroup 0: everyone sends; subgroup 1: nodes 0 and 1 only, node 2 sends alone.
    let specs = [
        SubgroupSpec {
            members: members.clone(),
            senders: members.clone(),
            window: 2,
            max_msg: 24,
            arena: 0,
            mode,
            relay: false,
        },
        SubgroupSpec {
            members: vec![NodeId(0), NodeId(1), NodeId(2)],
            senders: vec![NodeId(2)],
            window: 3,
            max_msg: 8,
            arena: 0,
            mode,
            relay: false,
        },
    ];
    let regions: Vec<RegionSpec> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| RegionSpec { id: RegionId(i as u16), len: SmcLayout::new(s).table_bytes() })
        .collect();
    let g = local_group(kind, n as usize, &regions, Duration::from_secs(20)).unwrap();
    let logs: Vec<Vec<Log>> = (0..n).map(|_| (0..specs.len()).map(|_| Log::default()).collect()).collect();
    let runtimes: Vec<Runtime> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let setups = specs
                .iter()
                .enumerate()
                .map(|(k, spec)| {
                    let log = logs[i][k].clone();
                    SubgroupSetup {
                        spec: spec.clone(),
                        region: RegionId(k as u16),
                        delivery: Default::default(),
                        upcall: Box::new(move |b: &spindle_smc::Batch| {
                            let mut l = log.lock().unwrap();
                            for m in b.iter() {
                                l.push((m.sender(), m.index(), m.to_vec()));
                            }
                        }),
                    }
                })
                .collect();
            Runtime::start(t.clone(), setups, PollConfig::default()).unwrap()
        })
        .collect();
    let per_sender = 200u64;
    std::thread::scope(|s| {
        for (i, rt) in runtimes.iter().enumerate() {
            s.spawn(move || {
                for k in 0..per_sender {
                    let msg = format!("n{i} k{k:05} sg0 pad..");
                    rt.subgroups()[0].send(msg.as_bytes()).unwrap();
                    if i == 2 {
                        rt.subgroups()[1].send(&k.to_le_bytes()).unwrap();
                    }
                }
            });
        }
    });
    let want = [per_sender * n as u64, per_sender];
    let done = testkit::poll_until(Duration::from_secs(60), Duration::from_millis(5), || {
        (0..n as usize).all(|i| (0..2).all(|k| logs[i][k].lock().unwrap().len() as u64 == want[k]))
    });
    assert!(done, "every node delivers every message of both subgroups");
    for k in 0..2 {
        let first = logs[0][k].lock().unwrap().clone();
        for (i, log) in logs.iter().enumerate().skip(1) {
            let other = log[k].lock().unwrap().clone();
            if mode == Mode::Ordered {
                assert_eq!(first, other, "subgroup {k}: node {i} delivered another sequence");
            } else {
                for r in 0..specs[k].senders.len() {
                    let a: Vec<_> = first.iter().filter(|m| m.0 == r).collect();
                    let b: Vec<_> = other.iter().filter(|m| m.0 == r).collect();
                    assert_eq!(a, b, "subgroup {k}: per-sender order differs at node {i}");
                }
            }
        }
        // Each sender's messages arrive intact and in the order sent. (Their indices
        // have gaps in ordered mode: nulls take positions in a sender's index space.)
        if k == 0 {
            for r in 0..n as usize {
                let got: Vec<String> =
                    first.iter().filter(|m| m.0 == r).map(|m| String::from_utf8(m.2.clone()).unwrap()).collect();
                let want: Vec<String> = (0..per_sender).map(|j| format!("n{r} k{j:05} sg0 pad..")).collect();
                assert_eq!(got, want, "sender {r}'s messages");
                let idx: Vec<u64> = first.iter().filter(|m| m.0 == r).map(|m| m.1).collect();
                assert!(idx.windows(2).all(|w| w[0] < w[1]), "indices grow");
            }
        }
    }
    let sg1 = logs[1][1].lock().unwrap().clone();
    assert!(sg1.iter().enumerate().all(|(k, m)| m.2 == (k as u64).to_le_bytes()));
    let s0 = runtimes[0].subgroups()[0].stats();
    assert_eq!(s0.messages_sent, per_sender);
    assert!(s0.deliver_batches.batches > 0);
}

#[test]
fn mem_ordered() {
    run(TransportKind::Mem, Mode::Ordered);
}
#[test]
fn mem_unordered() {
    run(TransportKind::Mem, Mode::Unordered);
}
#[test]
fn shm_ordered() {
    run(TransportKind::Shm, Mode::Ordered);
}
#[test]
fn tcp_ordered() {
    run(TransportKind::Tcp, Mode::Ordered);
}
#[test]
fn tcp_unordered() {
    run(TransportKind::Tcp, Mode::Unordered);
}

#[test]
fn start_errors() {
    let spec = SubgroupSpec {
        members: vec![NodeId(1)],
        senders: vec![NodeId(1)],
        window: 2,
        max_msg: 8,
        arena: 0,
        mode: Mode::Ordered,
        relay: false,
    };
    let g =
        local_group(TransportKind::Mem, 1, &[RegionSpec { id: RegionId(0), len: 64 }], Duration::from_secs(5)).unwrap();
    let t = g.nodes[0].clone();
    let setup = |spec: SubgroupSpec, region| SubgroupSetup {
        spec,
        region,
        upcall: Box::new(|_: &spindle_smc::Batch| {}),
        delivery: Default::default(),
    };
    assert!(matches!(
        Runtime::start(t.clone(), vec![setup(spec, RegionId(0))], PollConfig::default()),
        Err(spindle_smc::runtime::StartError::NotMember(0))
    ));
    let mine = SubgroupSpec {
        members: vec![NodeId(0)],
        senders: vec![NodeId(0)],
        window: 64,
        max_msg: 1024,
        arena: 0,
        mode: Mode::Ordered,
        relay: false,
    };
    assert!(matches!(
        Runtime::start(t.clone(), vec![setup(mine.clone(), RegionId(0))], PollConfig::default()),
        Err(spindle_smc::runtime::StartError::Region { .. })
    ));
    assert!(matches!(
        Runtime::start(t, vec![setup(mine, RegionId(7))], PollConfig::default()),
        Err(spindle_smc::runtime::StartError::Region { .. })
    ));
}

/// Subgroup 0's upcall blocks until the test releases it. Returns whether subgroup 1
/// (inline delivery) delivered all its messages at every node while subgroup 0 was
/// blocked, and then checks that subgroup 0 catches up after the release.
fn blocked_upcall(delivery0: spindle_smc::runtime::Delivery, within: Duration) -> bool {
    use spindle_smc::runtime::Delivery;
    let n = 2usize;
    let members: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
    let spec = SubgroupSpec {
        members: members.clone(),
        senders: vec![NodeId(0)],
        window: 64,
        max_msg: 8,
        arena: 0,
        mode: Mode::Ordered,
        relay: false,
    };
    let regions: Vec<RegionSpec> =
        (0..2).map(|i| RegionSpec { id: RegionId(i), len: SmcLayout::new(&spec).table_bytes() }).collect();
    let g = local_group(TransportKind::Mem, n, &regions, Duration::from_secs(20)).unwrap();
    let gate = Arc::new((Mutex::new(false), spindle_sst::sync::Condvar::new()));
    let counts: Vec<Vec<Arc<spindle_sst::sync::atomic::AtomicU64>>> =
        (0..n).map(|_| (0..2).map(|_| Default::default()).collect()).collect();
    let rts: Vec<Runtime> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let setups = (0..2)
                .map(|k| {
                    let (count, gate) = (counts[i][k].clone(), gate.clone());
                    SubgroupSetup {
                        spec: spec.clone(),
                        region: RegionId(k as u16),
                        delivery: if k == 0 { delivery0 } else { Delivery::Inline },
                        upcall: Box::new(move |b: &spindle_smc::Batch| {
                            if k == 0 {
                                let (open, cv) = &*gate;
                                let mut o = open.lock().unwrap();
                                while !*o {
                                    o = cv.wait(o).unwrap();
                                }
                            }
                            count.fetch_add(b.len() as u64, spindle_sst::sync::atomic::Ordering::SeqCst);
                        }),
                    }
                })
                .collect();
            Runtime::start(t.clone(), setups, PollConfig::default()).unwrap()
        })
        .collect();
    let per = 40u64;
    for k in 0..per {
        rts[0].subgroups()[0].send(&k.to_le_bytes()).unwrap();
        rts[0].subgroups()[1].send(&k.to_le_bytes()).unwrap();
    }
    let delivered = |k: usize| (0..n).all(|i| counts[i][k].load(spindle_sst::sync::atomic::Ordering::SeqCst) == per);
    let other_done = testkit::poll_until(within, Duration::from_millis(2), || delivered(1));
    assert!(!delivered(0), "subgroup 0 delivered through a blocked upcall");
    // Release subgroup 0: it catches up either way.
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    let all = testkit::poll_until(Duration::from_secs(60), Duration::from_millis(2), || delivered(0) && delivered(1));
    assert!(all, "every message of both subgroups is delivered after the release");
    other_done
}

#[test]
fn a_blocked_dedicated_upcall_does_not_stall_other_subgroups() {
    // Waits as long as it takes (up to a minute) for subgroup 1.
    let done = blocked_upcall(spindle_smc::runtime::Delivery::Dedicated, Duration::from_secs(60));
    assert!(done, "subgroup 1 was held up by subgroup 0's upcall");
}

#[test]
fn a_blocked_inline_upcall_stalls_the_node_as_documented() {
    // The control: inline upcalls share the predicate thread, so the other subgroup
    // cannot finish while one upcall blocks. This is what Delivery::Dedicated is for.
    // What does not happen is watched for a while (a slow machine cannot make it
    // happen, only make the watch weaker).
    assert!(!blocked_upcall(spindle_smc::runtime::Delivery::Inline, Duration::from_secs(3)));
}

/// Two application threads share one sender in Dedicated mode; each must wait for the
/// other's message to be taken in (Busy). Every message still goes through, in order
/// per thread.
/// Several application threads per node send into one subgroup at once (lock-free
/// claims); with every node a sender, nulls are inserted between their claims.
fn concurrent_senders(kind: TransportKind, delivery: spindle_smc::runtime::Delivery, all_send: bool, threads: u8) {
    let members = vec![NodeId(0), NodeId(1)];
    let senders = if all_send { members.clone() } else { vec![NodeId(0)] };
    let spec = SubgroupSpec {
        members,
        senders: senders.clone(),
        window: 4,
        max_msg: 16,
        arena: 0,
        mode: Mode::Ordered,
        relay: false,
    };
    let regions = [RegionSpec { id: RegionId(0), len: SmcLayout::new(&spec).table_bytes() }];
    let g = local_group(kind, 2, &regions, Duration::from_secs(20)).unwrap();
    let logs: Vec<Log> = (0..2).map(|_| Log::default()).collect();
    let rts: Vec<Runtime> = g
        .nodes
        .iter()
        .zip(&logs)
        .map(|(t, log)| {
            let log = log.clone();
            let setup = SubgroupSetup {
                spec: spec.clone(),
                region: RegionId(0),
                delivery,
                upcall: Box::new(move |b: &spindle_smc::Batch| {
                    let mut l = log.lock().unwrap();
                    for m in b.iter() {
                        l.push((m.sender(), m.index(), m.to_vec()));
                    }
                }),
            };
            Runtime::start(t.clone(), vec![setup], PollConfig::default()).unwrap()
        })
        .collect();
    let per = 100u64;
    std::thread::scope(|s| {
        for (node, rt) in rts.iter().enumerate().take(senders.len()) {
            for th in 0..threads {
                let sg = &rt.subgroups()[0];
                s.spawn(move || {
                    for k in 0..per {
                        let mut msg = [th; 16];
                        msg[1] = node as u8;
                        msg[8..].copy_from_slice(&k.to_le_bytes());
                        sg.send(&msg).unwrap();
                    }
                });
            }
        }
    });
    let total = per * threads as u64 * senders.len() as u64;
    let done = testkit::poll_until(Duration::from_secs(60), Duration::from_millis(2), || {
        logs.iter().all(|l| l.lock().unwrap().len() as u64 == total)
    });
    assert!(done, "every message of every thread is delivered at both nodes");
    let a = logs[0].lock().unwrap().clone();
    assert_eq!(a, logs[1].lock().unwrap().clone(), "same sequence at both nodes");
    for node in 0..senders.len() as u8 {
        for th in 0..threads {
            let ks: Vec<u64> = a
                .iter()
                .filter(|m| m.2[0] == th && m.2[1] == node)
                .map(|m| u64::from_le_bytes(m.2[8..].try_into().unwrap()))
                .collect();
            assert_eq!(ks, (0..per).collect::<Vec<_>>(), "node {node} thread {th}: its messages in its order");
        }
    }
}

#[test]
fn concurrent_senders_on_one_node_with_dedicated_delivery() {
    concurrent_senders(TransportKind::Mem, spindle_smc::runtime::Delivery::Dedicated, false, 2);
}

#[test]
fn concurrent_senders_on_every_node_with_nulls_over_shm() {
    concurrent_senders(TransportKind::Shm, spindle_smc::runtime::Delivery::Inline, true, 3);
}
