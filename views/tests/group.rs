//! The Group runtime in one process: members as threads over shm or tcp on loopback.
//! Every wait has a deadline; shm files are removed by the transports.

use spindle_views::config::{Config, Transport};
use spindle_views::group::{Group, GroupBuilder};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

type Log = Arc<Mutex<Vec<(u32, Vec<u8>)>>>;

mod common;

fn config(name: &str, id: u32, contact: Option<SocketAddr>, t: Transport) -> Config {
    common::member_config(name, id, contact, t).window(8).max_msg(64).build().unwrap()
}

fn member(cfg: Config, counter: Arc<Mutex<u64>>) -> (Group, Log) {
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let (l, c1, c2, c3) = (log.clone(), counter.clone(), counter.clone(), counter);
    let g = GroupBuilder::new(cfg)
        .on_deliver(0, move |d| {
            l.lock().unwrap().push((d.sender.0, d.data.to_vec()));
            *c1.lock().unwrap() += 1;
        })
        .state(
            0,
            move || c2.lock().unwrap().to_le_bytes().to_vec(),
            move |b| {
                *c3.lock().unwrap() = u64::from_le_bytes(b.try_into().expect("8 bytes of state"));
            },
        )
        .start()
        .unwrap();
    (g, log)
}

fn wait(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn joins_failures_and_state(t: Transport) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let name = format!("gt{}{}", std::process::id(), t as u8);
    let counters: Vec<Arc<Mutex<u64>>> = (0..4).map(|_| Arc::new(Mutex::new(0))).collect();
    let (g0, log0) = member(config(&name, 0, None, t), counters[0].clone());
    let contact = Some(g0_listen(&g0));
    let (g1, log1) = member(config(&name, 1, contact, t), counters[1].clone());
    let (g2, log2) = member(config(&name, 2, contact, t), counters[2].clone());
    assert!(g0.wait_for_members(3, WAIT), "three members: {:?}", g0.view());
    // Traffic from everyone, then a fourth member joins while it flows.
    let senders: Vec<_> = [&g0, &g1, &g2]
        .iter()
        .map(|g| {
            for i in 0..50u32 {
                g.send(0, &i.to_le_bytes()).unwrap();
            }
        })
        .collect();
    drop(senders);
    // Node 0 keeps sending while node 3 joins.
    let (g3, log3) = std::thread::scope(|s| {
        s.spawn(|| {
            for i in 50..100u32 {
                if let Err(e) = g0.send(0, &i.to_le_bytes()) {
                    panic!("send {i}: {e}; {:?}", g0.view());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        member(config(&name, 3, contact, t), counters[3].clone())
    });
    assert!(g0.wait_for_members(4, WAIT));
    wait("all 200 messages at the three first members", || {
        [&log0, &log1, &log2].iter().all(|l| l.lock().unwrap().len() == 200)
    });
    wait("the joiner to catch up", || *counters[3].lock().unwrap() == 200);
    // Each message counted once where it was sent, across the join's view change
    // (and whatever it made node 0 send again).
    let sent = [&g0, &g1, &g2].map(|g| g.metrics().sent);
    assert_eq!(sent, [100, 50, 50], "{:?}", g0.metrics());
    let base = 200 - log3.lock().unwrap().len();
    assert!(base > 0, "the joiner started from the transferred counter ({base}), not from zero");
    let a = log0.lock().unwrap().clone();
    assert_eq!(&a, &*log1.lock().unwrap(), "same order everywhere");
    assert_eq!(&a, &*log2.lock().unwrap());
    assert_eq!(&a[base..], &log3.lock().unwrap()[..], "the joiner's deliveries are the rest");
    // A failure: node 2 stops without leaving; the others go on without it.
    g2.shutdown();
    let ok = g0.wait_for_members(3, WAIT)
        && (0..3000).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            g0.members().len() == 3 && g1.members().len() == 3 && g3.members().len() == 3
        });
    assert!(
        ok,
        "a view without node 2: {:?} {:?} / {:?} {:?} / {:?} {:?}",
        g0.view(),
        g0.stopped(),
        g1.view(),
        g1.stopped(),
        g3.view(),
        g3.stopped()
    );
    g1.send(0, b"after").unwrap();
    wait("delivery in the new view", || {
        [&log0, &log1, &log3].iter().all(|l| l.lock().unwrap().last().is_some_and(|m| m.1 == b"after"))
    });
    // A graceful leave.
    assert!(g3.leave(WAIT), "node 3 leaves");
    assert_eq!(g3.stopped().as_deref(), Some("left the group"));
    wait("a view without node 3", || g0.members().len() == 2);
    let m = g0.metrics();
    assert!(m.views_installed >= 5, "{m:?}");
    assert_eq!(m.sent, 100, "the views that ended keep their counts: {m:?}");
    assert_eq!(g1.metrics().sent, 51);
    assert!(g0.stopped().is_none() && g1.stopped().is_none());
}

fn g0_listen(g: &Group) -> SocketAddr {
    g.listen_addr()
}

#[test]
fn shm_group_joins_fails_and_leaves() {
    joins_failures_and_state(Transport::Shm);
}

#[test]
fn tcp_group_joins_fails_and_leaves() {
    joins_failures_and_state(Transport::Tcp);
}

/// Garbage, a wrong version, an oversized length and a frame that is not a join
/// request each close only their connection; the member keeps serving joins.
#[test]
fn hostile_control_connections_are_closed_and_the_group_goes_on() {
    use std::io::{Read, Write};
    let name = format!("gh{}", std::process::id());
    let (g0, _log0) = member(config(&name, 0, None, Transport::Shm), Arc::new(Mutex::new(0)));
    let addr = g0.listen_addr();
    let mut wrong_version =
        spindle_views::wire::encode(&spindle_views::wire::Message::JoinRefused { reason: "x".into() }).unwrap();
    wrong_version[4] = 99;
    let mut huge = b"SPCP".to_vec();
    huge.extend_from_slice(&spindle_views::wire::VERSION.to_le_bytes());
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    let not_a_join =
        spindle_views::wire::encode(&spindle_views::wire::Message::Reply { id: 1, body: vec![1, 2, 3] }).unwrap();
    for bad in [b"GET / HTTP/1.1\r\n\r\n".to_vec(), wrong_version, huge, not_a_join, vec![0u8; 3]] {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&bad).unwrap();
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut rest = Vec::new();
        // The member answers (a refusal) or not, then closes: read reaches the end.
        let _ = s.read_to_end(&mut rest);
    }
    let (g1, _log1) = member(config(&name, 1, Some(addr), Transport::Shm), Arc::new(Mutex::new(0)));
    assert!(g0.wait_for_members(2, WAIT) && g1.wait_for_members(2, WAIT), "a real join still works");
    assert!(g0.stopped().is_none());
}

/// A layout that needs two members: alone, the view has no subgroup and a send says
/// so after the send timeout; once a second member joins (through a member that is
/// not the leader, which redirects), the subgroup exists and sends go through.
#[test]
fn a_view_short_of_the_layout_waits_and_joins_redirect_to_the_leader() {
    use spindle_views::layout::Shards;
    let name = format!("gw{}", std::process::id());
    let two = || Shards { shard_size: 2, window: 8, max_msg: 64, ..Shards::default() };
    let start = |id: u32, contact: Option<SocketAddr>| {
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        let g = GroupBuilder::new(config(&name, id, contact, Transport::Shm))
            .layout(two())
            .send_timeout(Duration::from_millis(300))
            .on_deliver(0, move |d| l.lock().unwrap().push((d.sender.0, d.data.to_vec())))
            .start()
            .unwrap();
        (g, log)
    };
    let (g0, log0) = start(0, None);
    assert_eq!(g0.subgroup(0).send(b"alone"), Err(spindle_views::group::SendError::NotReady(Some(0))));
    let (g1, _log1) = start(1, Some(g0.listen_addr()));
    assert!(g0.wait_for_members(2, WAIT));
    // Node 2 asks node 1, which is not the leader: it is redirected to node 0.
    let (g2, log2) = start(2, Some(g1.listen_addr()));
    assert!(g0.wait_for_members(3, WAIT) && g2.wait_for_members(3, WAIT));
    g0.subgroup(0).send(b"pair").unwrap();
    wait("delivery in the two-member subgroup", || log0.lock().unwrap().len() == 1);
    assert!(log2.lock().unwrap().is_empty(), "node 2 is not in the first shard");
    assert_eq!(g2.subgroup(0).send(b"x"), Err(spindle_views::group::SendError::NotSender(0)));
}

/// Point-to-point requests over the control plane: a member's handler answers; a
/// member without a handler refuses; an unknown member is an error. Requests in a
/// row reuse one connection: one control thread (one per connection) serves them.
#[test]
fn members_answer_point_to_point_requests() {
    let name = format!("gr{}", std::process::id());
    let threads = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let t2 = threads.clone();
    let g0 = GroupBuilder::new(config(&name, 0, None, Transport::Shm))
        .on_request(move |b| {
            t2.lock().unwrap().insert(std::thread::current().id());
            b.to_ascii_uppercase()
        })
        .start()
        .unwrap();
    let g1 = GroupBuilder::new(config(&name, 1, Some(g0.listen_addr()), Transport::Shm)).start().unwrap();
    assert!(g1.wait_for_members(2, WAIT));
    let id = |n| spindle_sst::transport::NodeId(n);
    assert_eq!(g1.request(id(0), b"ping", WAIT).unwrap(), b"PING");
    assert_eq!(g1.request(id(0), &[], WAIT).unwrap(), b"");
    for i in 0..50u8 {
        assert_eq!(g1.request(id(0), &[b'a' + i % 26], WAIT).unwrap(), [b'A' + i % 26]);
    }
    assert_eq!(threads.lock().unwrap().len(), 1, "52 requests in a row over one connection");
    let refused = g0.request(id(1), b"ping", WAIT).unwrap_err();
    assert!(refused.to_string().contains("takes no requests"), "{refused}");
    assert_eq!(g1.request(id(9), b"x", WAIT), Err(spindle_views::group::RequestError::NotAMember(id(9))));
}

/// Services keep the layers' protocols apart: each request goes to its service's
/// handler, whatever its bytes; a service a member does not serve is refused; the
/// application's requests and a service's share a connection.
#[test]
fn requests_reach_the_handler_of_their_service() {
    use spindle_views::group::Service;
    let name = format!("gv{}", std::process::id());
    let g0 = GroupBuilder::new(config(&name, 0, None, Transport::Shm))
        .on_request(|b| [b"app:", b].concat())
        .serve(Service(7), |b| [b"seven:", b].concat())
        .serve(Service(8), |b| [b"eight:", b].concat())
        .start()
        .unwrap();
    let g1 = GroupBuilder::new(config(&name, 1, Some(g0.listen_addr()), Transport::Shm)).start().unwrap();
    assert!(g1.wait_for_members(2, WAIT));
    let to = spindle_sst::transport::NodeId(0);
    for _ in 0..3 {
        assert_eq!(g1.request_service(Service(7), to, b"x", WAIT).unwrap(), b"seven:x");
        assert_eq!(g1.request(to, b"x", WAIT).unwrap(), b"app:x");
        assert_eq!(g1.request_service(Service(8), to, b"x", WAIT).unwrap(), b"eight:x");
        assert_eq!(g1.request_service(Service::APP, to, b"y", WAIT).unwrap(), b"app:y");
    }
    let refused = g1.request_service(Service(9), to, b"x", WAIT).unwrap_err();
    assert!(refused.to_string().contains("service 9"), "{refused}");
    assert_eq!(g1.request_service(Service(7), to, b"z", WAIT).unwrap(), b"seven:z", "and on after a refusal");
}

/// A member that must stop (its peer died and 1 of 2 is no majority) while its
/// sender waits for a slot of a full window: the send returns a fatal error and the
/// node stops; nothing hangs.
#[test]
fn a_stop_frees_a_sender_waiting_on_a_full_window() {
    let name = format!("gs{}", std::process::id());
    // Rejoin off: the minority member stops for good (with it on, it would wait to be
    // taken back; see `a_minority_member_waits_to_rejoin_and_its_sender_is_not_failed`).
    let mut c0 = config(&name, 0, None, Transport::Shm);
    c0.rejoin = false;
    let (g0, _l0) = member(c0, Arc::new(Mutex::new(0)));
    let (g1, _l1) = member(config(&name, 1, Some(g0.listen_addr()), Transport::Shm), Arc::new(Mutex::new(0)));
    assert!(g0.wait_for_members(2, WAIT));
    let g0 = Arc::new(g0);
    let (tx, rx) = std::sync::mpsc::channel();
    let sender = g0.clone();
    std::thread::spawn(move || loop {
        if let Err(e) = sender.send(0, b"0123456789") {
            let _ = tx.send(e);
            return;
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    g1.shutdown();
    // A bounded wait: a regression fails here instead of hanging the suite.
    let err = rx.recv_timeout(WAIT).expect("the blocked sender was released");
    assert!(err.is_fatal(), "{err}");
    wait("node 0 to stop", || g0.stopped().is_some());
    assert!(g0.stopped().unwrap().contains("minority"), "{:?}", g0.stopped());
}

#[test]
fn an_rdma_group_without_a_device_is_refused_with_the_reason() {
    let mut cfg = Config::builder(0, testkit::free_control_addr()).name("rdmanone").build().unwrap();
    cfg.transport = Transport::Rdma;
    match spindle_sst::transport::rdma::available() {
        Ok(dev) => eprintln!("skipped: this machine has an RDMA device ({dev})"),
        Err(why) => match GroupBuilder::new(cfg).start() {
            Err(spindle_views::group::StartError::Setup(e)) => assert_eq!(e, why),
            other => panic!("expected a setup error, got {other:?}"),
        },
    }
}

/// A view hook that holds the last handle of its group and drops it (as an
/// application does that keeps its group behind a weak reference and drops it
/// meanwhile): the group stops, and the hook returns instead of its thread waiting
/// to join itself.
#[test]
fn the_last_handle_dropped_in_a_view_hook_stops_the_group() {
    let name = format!("gd{}", std::process::id());
    let slot: Arc<Mutex<Option<Group>>> = Arc::default();
    let returned = Arc::new(spindle_sst::sync::atomic::AtomicBool::new(false));
    let (s, r) = (slot.clone(), returned.clone());
    let g0 = GroupBuilder::new(config(&name, 0, None, Transport::Shm))
        .on_view(move |_| {
            if let Some(g) = s.lock().unwrap().take() {
                drop(g);
                r.store(true, spindle_sst::sync::atomic::Ordering::SeqCst);
            }
        })
        .start()
        .unwrap();
    let contact = g0.listen_addr();
    *slot.lock().unwrap() = Some(g0);
    // A join makes node 0 install a view, whose hook drops node 0's group. The
    // joiner may or may not get going before node 0 is gone.
    let g1 = GroupBuilder::new(config(&name, 1, Some(contact), Transport::Shm)).start();
    wait("the hook to drop its group and return", || returned.load(spindle_sst::sync::atomic::Ordering::SeqCst));
    if let Ok(g1) = g1 {
        g1.shutdown();
    }
}

/// A delivery callback that holds the last handle of its group and drops it: the
/// group stops, and the callback returns instead of its thread waiting to join
/// itself.
#[test]
fn the_last_handle_dropped_in_a_delivery_stops_the_group() {
    use spindle_sst::sync::atomic::{AtomicBool, Ordering};
    let name = format!("gl{}", std::process::id());
    let slot: Arc<Mutex<Option<Arc<Group>>>> = Arc::default();
    let returned = Arc::new(AtomicBool::new(false));
    let (s, r) = (slot.clone(), returned.clone());
    let g0 = GroupBuilder::new(config(&name, 0, None, Transport::Shm))
        .on_deliver(0, move |_| {
            let Some(g) = s.lock().unwrap().take() else { return };
            // Until the sender's handle is gone: this one is the last.
            let deadline = std::time::Instant::now() + WAIT;
            while Arc::strong_count(&g) > 1 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(g);
            r.store(true, Ordering::SeqCst);
        })
        .start()
        .unwrap();
    let g0 = Arc::new(g0);
    *slot.lock().unwrap() = Some(g0.clone());
    g0.send(0, b"x").unwrap();
    drop(g0);
    wait("the callback to drop its group and return", || returned.load(Ordering::SeqCst));
}
