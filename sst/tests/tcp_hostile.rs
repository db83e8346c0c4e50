//! A tcp node facing a hostile peer: garbage, truncated frames, wrong versions, bad
//! offsets. The bad connection is refused or disconnected with a logged error, and the
//! node and its other peers keep working.

mod common;

use common::{eventually, wait_broken, ToyAuth};
use spindle_sst::predicate::{PollConfig, PredicateThread};
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::sync::Arc;
use spindle_sst::transport::frame::{self, Hello};
use spindle_sst::transport::tcp::{self, TcpConfig, TcpTransport};
use spindle_sst::transport::{NodeId, PeerEvent, RegionId, RegionSpec, Transport, WriteOp};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const R: RegionId = RegionId(0);
const GROUP: u64 = 7;
const DEADLINE: Duration = Duration::from_secs(30);

fn regions() -> Vec<RegionSpec> {
    vec![RegionSpec { id: R, len: 256 }]
}

fn cfg(me: u32, peers: Vec<(NodeId, SocketAddr)>) -> TcpConfig {
    TcpConfig { timeout: DEADLINE, ..TcpConfig::new(NodeId(me), peers, GROUP, regions()) }
}

fn hello_bytes(node: u32, group: u64, version: u16) -> Vec<u8> {
    let mut b = Vec::new();
    frame::encode_hello_version(&mut b, &Hello { node: NodeId(node), group, regions: regions() }, version);
    b
}

/// Writes `v` at `off` on `from` and checks it lands at `to`.
fn link_works(from: &TcpTransport, to: &TcpTransport, off: usize, v: u64) {
    from.region(R).unwrap().apply_write(off, &[v]);
    from.post_write(to.local_id(), WriteOp::same(R, off, 8)).unwrap();
    from.flush();
    assert!(
        eventually(DEADLINE, || to.region(R).unwrap().load(off, Ordering::Acquire) == v),
        "write {from:?} -> {to:?} did not land"
    );
}

#[test]
fn setup_refuses_bad_handshakes_and_waits_for_the_real_peer() {
    let l0 = tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let a0 = l0.local_addr();
    let l1 = tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let a1 = l1.local_addr();
    let n0 = std::thread::spawn(move || l0.establish(&cfg(0, vec![(NodeId(1), a1)])));
    // Rogues arrive before the real peer. Each is answered by a closed connection.
    let rogues: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("wrong version", hello_bytes(1, GROUP, frame::VERSION + 1)),
        ("wrong group", hello_bytes(1, GROUP + 1, frame::VERSION)),
        ("unknown node", hello_bytes(9, GROUP, frame::VERSION)),
        ("truncated hello", hello_bytes(1, GROUP, frame::VERSION)[..12].to_vec()),
    ];
    for (what, bytes) in rogues {
        let mut s = TcpStream::connect(a0).unwrap();
        s.write_all(&bytes).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        assert!(reply.is_empty(), "{what}: the node answered a bad hello with {reply:?}");
    }
    let n1 = l1.establish(&cfg(1, vec![(NodeId(0), a0)])).expect("the real peer still connects");
    let n0 = n0.join().unwrap().expect("node 0 finished setup");
    link_works(&n0, &n1, 0, 11);
    link_works(&n1, &n0, 8, 12);
}

/// Nodes 0 and 1 are real; node 2 is this test, speaking raw bytes. Returns the two
/// nodes and the fake's connection to node 0 (its link to node 1 stays open).
fn group_with_fake() -> (TcpTransport, TcpTransport, TcpStream, TcpStream) {
    let l0 = tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let l1 = tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let (a0, a1) = (l0.local_addr(), l1.local_addr());
    let fake_addr: SocketAddr = "127.0.0.1:9".parse().unwrap(); // never dialled: 2 > 0, 1
    let n0 = std::thread::spawn(move || l0.establish(&cfg(0, vec![(NodeId(1), a1), (NodeId(2), fake_addr)])).unwrap());
    let n1 = std::thread::spawn(move || l1.establish(&cfg(1, vec![(NodeId(0), a0), (NodeId(2), fake_addr)])).unwrap());
    let dial = |addr| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&hello_bytes(2, GROUP, frame::VERSION)).unwrap();
        let mut head = [0u8; 4];
        s.read_exact(&mut head).unwrap();
        let mut body = vec![0u8; frame::body_len(&head).unwrap().unwrap()];
        s.read_exact(&mut body).unwrap();
        assert!(matches!(frame::decode_body(&body), Ok(frame::Frame::Hello(_))));
        s
    };
    let to0 = dial(a0);
    let to1 = dial(a1);
    (n0.join().unwrap(), n1.join().unwrap(), to0, to1)
}

fn write_frame(region: RegionId, offset: u64, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    frame::encode_write_header(&mut b, region, offset, data.len(), frame::WriteFlags::default());
    b.extend_from_slice(data);
    b
}

/// The fake sends one good write, then `bad`; node 0 must apply the good one, cut the
/// fake off, and keep working with node 1. `driven`: a predicate thread drives node
/// 0's transport (it receives in its passes, as in a running group); otherwise the
/// transport's fallback thread receives.
fn hostile(bad: Vec<u8>, close_after: bool, driven: bool) {
    let (n0, n1, mut to0, _to1) = group_with_fake();
    let n0 = Arc::new(n0);
    // The driver drains the transport's events: its handler keeps the Broken ones.
    let pt = driven.then(|| {
        let pt = PredicateThread::spawn(Vec::new(), n0.clone() as Arc<dyn Transport>, PollConfig::default()).unwrap();
        pt.on_event(|broken: &mut Vec<NodeId>, PeerEvent::Broken { peer, .. }, _| broken.push(*peer));
        std::thread::sleep(Duration::from_millis(50)); // attached before the bad bytes come
        pt
    });
    let mut bytes = write_frame(R, 128, &42u64.to_le_bytes());
    bytes.extend_from_slice(&bad);
    to0.write_all(&bytes).unwrap();
    if close_after {
        to0.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let cut = match &pt {
        Some(pt) => eventually(DEADLINE, || pt.with_state(|b| b.contains(&NodeId(2)))),
        None => wait_broken(n0.as_ref(), NodeId(2), DEADLINE),
    };
    assert!(cut, "node 0 cut the bad peer off");
    assert_eq!(n0.region(R).unwrap().load(128, Ordering::Acquire), 42, "frames before the bad one were applied");
    assert_eq!(
        n0.post_write(NodeId(2), WriteOp::same(R, 0, 8)),
        Err(spindle_sst::transport::WriteError::Disconnected(NodeId(2)))
    );
    // The node and its other link keep working, both ways.
    link_works(&n0, &n1, 0, 1);
    link_works(&n1, &n0, 8, 2);
    // Node 0 really closed the fake's connection.
    to0.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut rest = Vec::new();
    let _ = to0.read_to_end(&mut rest);
}

/// The hostile inputs: (name, bytes after the good write, close the stream after).
fn hostile_inputs() -> Vec<(&'static str, Vec<u8>, bool)> {
    let mut ack = Vec::new();
    frame::encode_ack(&mut ack, 1000);
    vec![
        ("garbage", b"\xde\xad\xbe\xef garbage that is no frame".to_vec(), false),
        ("unknown kind", vec![3, 0, 0, 0, 99, 1, 2], false),
        ("truncated frame", write_frame(R, 0, &[7u8; 64])[..30].to_vec(), true),
        ("offset out of range", write_frame(R, 256, &[1u8; 8]), false),
        ("range overflow", write_frame(R, u64::MAX - 7, &[1u8; 16]), false),
        ("unknown region", write_frame(RegionId(9), 0, &[1u8; 8]), false),
        ("hello after setup", hello_bytes(2, GROUP, frame::VERSION + 1), false),
        ("ack of a write never posted", ack, false),
    ]
}

fn hostile_named(name: &str, driven: bool) {
    let (_, bad, close) = hostile_inputs().into_iter().find(|(n, ..)| *n == name).expect("a listed input");
    hostile(bad, close, driven);
}

#[test]
fn garbage_after_setup_disconnects_the_peer() {
    hostile_named("garbage", false);
}

#[test]
fn unknown_frame_kind_disconnects_the_peer() {
    hostile_named("unknown kind", false);
}

#[test]
fn truncated_frame_disconnects_the_peer() {
    hostile_named("truncated frame", false);
}

#[test]
fn out_of_range_offset_disconnects_the_peer() {
    hostile_named("offset out of range", false);
}

#[test]
fn range_overflow_disconnects_the_peer() {
    hostile_named("range overflow", false);
}

#[test]
fn unknown_region_disconnects_the_peer() {
    hostile_named("unknown region", false);
}

#[test]
fn wrong_version_hello_after_setup_disconnects_the_peer() {
    hostile_named("hello after setup", false);
}

#[test]
fn ack_for_a_write_never_posted_disconnects_the_peer() {
    hostile_named("ack of a write never posted", false);
}

/// Every hostile input again with a predicate thread receiving (the path a running
/// group takes since the receive moved onto it): just as strict.
#[test]
fn a_driving_predicate_thread_is_as_strict() {
    for (name, bad, close) in hostile_inputs() {
        eprintln!("driven: {name}");
        hostile(bad, close, true);
    }
}

fn with_auth(c: TcpConfig, key: u64) -> TcpConfig {
    TcpConfig { auth: Some(std::sync::Arc::new(ToyAuth(key))), ..c }
}

#[test]
fn a_peer_that_cannot_prove_the_secret_is_refused_and_the_real_one_connects() {
    let l0 = tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let a0 = l0.local_addr();
    let n0 = std::thread::spawn(move || l0.establish(&with_auth(cfg(0, vec![(NodeId(1), a0)]), 42)));
    // A rogue with node 1's id and group but another key: node 0's proof does not
    // hold for it, and its own does not hold for node 0.
    let l = tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let c = TcpConfig { timeout: Duration::from_secs(1), ..cfg(1, vec![(NodeId(0), a0)]) };
    assert!(l.establish(&with_auth(c.clone(), 43)).is_err(), "a rogue with another key was taken");
    // One with no key at all ends its side after the Hellos (it expects nothing
    // more), sends no proof, and is dropped: node 0 waits for the real peer.
    let rogue = tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap().establish(&c);
    drop(rogue);
    let l1 = tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let n1 = l1.establish(&with_auth(cfg(1, vec![(NodeId(0), a0)]), 42)).expect("the real peer still connects");
    let n0 = n0.join().unwrap().expect("node 0 finished setup");
    link_works(&n0, &n1, 0, 21);
    link_works(&n1, &n0, 8, 22);
}
