//! A peer that stops reading does not hold up a node's other links: megabytes queued
//! for it wait while the node's flushes return and its other peers get their writes;
//! once it reads again everything arrives, whole and in order. A peer that takes
//! nothing for the write timeout is cut, and the other links go on. Over plain and
//! sealed links.

mod common;

use common::{eventually, wait_broken, ToyAuth};
use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_sst::sync::Arc;
use spindle_sst::transport::tcp::{self, TcpConfig, TcpTransport};
use spindle_sst::transport::{NodeId, PeerEvent, RegionId, RegionSpec, Transport, WriteOp};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

const R: RegionId = RegionId(0);
/// One large write: far more than the socket buffers on the way hold.
const BIG: usize = 16 << 20;
const LEN: usize = BIG + 4096;
const DEADLINE: Duration = Duration::from_secs(60);

fn cfg(me: u32, peers: Vec<(NodeId, SocketAddr)>, sealed: bool, write_timeout: Duration) -> TcpConfig {
    let c = TcpConfig {
        timeout: DEADLINE,
        write_timeout,
        ..TcpConfig::new(NodeId(me), peers, 9, vec![RegionSpec { id: R, len: LEN }])
    };
    TcpConfig { auth: sealed.then(|| std::sync::Arc::new(ToyAuth(7)) as std::sync::Arc<dyn tcp::LinkAuth>), ..c }
}

/// A relay from node 1 to node 0 that forwards node 1's bytes only while `open`
/// (node 0's always). Its threads end when either side closes or the deadline passes.
fn relay(to: SocketAddr, open: Arc<AtomicBool>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let Ok((from, _)) = l.accept() else { return };
        let Ok(dest) = TcpStream::connect(to) else { return };
        common::pass_back(&dest, &from);
        let (mut from, mut dest) = (from, dest);
        let end = Instant::now() + 2 * DEADLINE;
        let mut buf = vec![0u8; 64 << 10];
        while Instant::now() < end {
            if !open.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            match from.read(&mut buf) {
                Ok(n) if n > 0 && dest.write_all(&buf[..n]).is_ok() => {}
                _ => break,
            }
        }
        let _ = dest.shutdown(std::net::Shutdown::Both);
    });
    addr
}

/// Nodes 0, 1 and 2; node 1's link to node 0 runs through a relay that `open` gates
/// (open for the setup).
fn three(sealed: bool, write_timeout: Duration, open: &Arc<AtomicBool>) -> Vec<TcpTransport> {
    let ls: Vec<_> = (0..3).map(|_| tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap()).collect();
    let a: Vec<SocketAddr> = ls.iter().map(|l| l.local_addr()).collect();
    let via = relay(a[0], open.clone());
    let peers = [
        vec![(NodeId(1), a[1]), (NodeId(2), a[2])],
        vec![(NodeId(0), via), (NodeId(2), a[2])],
        vec![(NodeId(0), a[0]), (NodeId(1), a[1])],
    ];
    let hs: Vec<_> = (ls.into_iter().zip(peers).enumerate())
        .map(|(i, (l, p))| std::thread::spawn(move || l.establish(&cfg(i as u32, p, sealed, write_timeout)).unwrap()))
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Word `i` of the `k`th large write.
fn word(k: u64, i: usize) -> u64 {
    (k << 40) ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Posts `k` large writes from node 1 to node 0 (the last signaled), each of its own
/// contents; returns the last one's sequence number.
fn post_large(n1: &TcpTransport, k: u64) -> u64 {
    let mut seq = 0;
    for j in 0..k {
        let words: Vec<u64> = (0..BIG / 8).map(|i| word(j, i)).collect();
        n1.region(R).unwrap().apply_write(0, &words);
        let op = WriteOp { signaled: j + 1 == k, ..WriteOp::same(R, 0, BIG) };
        seq = n1.post_write(NodeId(0), op).unwrap();
    }
    seq
}

/// Node 1 flushes on another thread; whether that flush returned within `within`.
fn flush_returns(n: &Arc<TcpTransport>, within: Duration) -> bool {
    let (tx, rx) = channel();
    let n = n.clone();
    std::thread::spawn(move || {
        n.flush();
        let _ = tx.send(());
    });
    rx.recv_timeout(within).is_ok()
}

fn a_full_peer_holds_up_nothing_else(sealed: bool) {
    let open = Arc::new(AtomicBool::new(true));
    let mut n = three(sealed, DEADLINE, &open);
    open.store(false, Ordering::SeqCst);
    let n2 = n.pop().unwrap();
    let n1 = Arc::new(n.pop().unwrap());
    let n0 = n.pop().unwrap();
    // As a predicate thread: the driver's flushes have a budget and leave the rest.
    n1.attach_driver();
    let last = post_large(&n1, 4);
    assert!(flush_returns(&n1, DEADLINE), "a flush to a peer that does not read returns");
    // A small write to the other peer gets through while 64 MiB wait for node 0.
    n1.region(R).unwrap().apply_write(BIG, &[0x5eed]);
    let small = n1.post_write(NodeId(2), WriteOp { signaled: true, ..WriteOp::same(R, BIG, 8) }).unwrap();
    let flushed = eventually(DEADLINE, || {
        n1.flush();
        n1.poll_receive();
        n1.completed(NodeId(2)) >= small
    });
    assert!(flushed, "the write to node 2 was acknowledged while node 0 did not read");
    assert_eq!(n2.region(R).unwrap().load(BIG, Ordering::Acquire), 0x5eed);
    assert!(n1.completed(NodeId(0)) < last, "node 0 has not read everything yet");
    // Node 0 reads again: everything arrives, the last write whole.
    open.store(true, Ordering::SeqCst);
    let done = eventually(DEADLINE, || {
        n1.flush();
        n1.poll_receive();
        n1.completed(NodeId(0)) >= last
    });
    assert!(done, "the large writes were acknowledged once node 0 read");
    let r0 = n0.region(R).unwrap();
    let torn = (0..BIG / 8).find(|&i| r0.load(8 * i, Ordering::Acquire) != word(3, i));
    assert_eq!(torn, None, "node 0 holds the last large write, whole");
    let mut evs = Vec::new();
    n1.drain_events(&mut evs);
    assert!(evs.is_empty(), "no link broke: {evs:?}");
    n1.detach_driver();
}

#[test]
fn a_peer_that_stops_reading_holds_up_nothing_else_plain() {
    a_full_peer_holds_up_nothing_else(false);
}

#[test]
fn a_peer_that_stops_reading_holds_up_nothing_else_sealed() {
    a_full_peer_holds_up_nothing_else(true);
}

#[test]
fn a_peer_that_takes_nothing_for_the_write_timeout_is_cut() {
    let open = Arc::new(AtomicBool::new(true));
    let mut n = three(false, Duration::from_secs(1), &open);
    open.store(false, Ordering::SeqCst);
    let n2 = n.pop().unwrap();
    let n1 = n.pop().unwrap();
    post_large(&n1, 4);
    assert!(wait_broken(&n1, NodeId(0), DEADLINE), "the stuck link was cut");
    let mut evs = Vec::new();
    n1.drain_events(&mut evs);
    assert!(evs.iter().all(|PeerEvent::Broken { peer, .. }| *peer == NodeId(0)), "{evs:?}");
    // The other link goes on.
    n1.region(R).unwrap().apply_write(BIG, &[0xbeef]);
    let seq = n1.post_write(NodeId(2), WriteOp { signaled: true, ..WriteOp::same(R, BIG, 8) }).unwrap();
    n1.flush();
    assert!(n1.wait_completed(NodeId(2), seq, Instant::now() + DEADLINE));
    assert_eq!(n2.region(R).unwrap().load(BIG, Ordering::Acquire), 0xbeef);
}
