//! Sealed tcp links (a group secret): every frame after setup travels in records of
//! the link's cipher. Writes of any size land both ways, acks come back, the
//! plaintext does not show on the wire, and a changed bit breaks that link before
//! its record reaches a region, while the node's other links go on.

mod common;

use common::{eventually, wait_broken, ToyAuth};
use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_sst::sync::{Arc, Mutex};
use spindle_sst::transport::tcp::{self, TcpConfig, TcpTransport};
use spindle_sst::transport::{NodeId, RegionId, RegionSpec, Transport, WriteOp};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const R: RegionId = RegionId(0);
const LEN: usize = 1 << 20;
const DEADLINE: Duration = Duration::from_secs(30);
/// Eight bytes that show up on the wire if a write travels in clear.
const MARK: u64 = 0x5eed_5eed_c0ff_ee42;

fn cfg(me: u32, peers: Vec<(NodeId, SocketAddr)>, sealed: bool) -> TcpConfig {
    let c =
        TcpConfig { timeout: DEADLINE, ..TcpConfig::new(NodeId(me), peers, 9, vec![RegionSpec { id: R, len: LEN }]) };
    TcpConfig { auth: sealed.then(|| std::sync::Arc::new(ToyAuth(42)) as std::sync::Arc<dyn tcp::LinkAuth>), ..c }
}

/// A relay between node 1 and node 0 that keeps what node 1 sends and, once
/// `flip` is set, flips one bit of the next bytes it passes on. Its threads end when
/// either side closes.
struct Relay {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<u8>>>,
    flip: Arc<AtomicBool>,
}

fn relay(to: SocketAddr) -> Relay {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let flip = Arc::new(AtomicBool::new(false));
    let (seen2, flip2) = (seen.clone(), flip.clone());
    std::thread::spawn(move || {
        l.set_nonblocking(true).unwrap();
        let end = Instant::now() + DEADLINE;
        let from = loop {
            match l.accept() {
                Ok((s, _)) => break s,
                Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(2)),
                Err(_) => return,
            }
        };
        from.set_nonblocking(false).unwrap();
        let Ok(dest) = TcpStream::connect(to) else { return };
        common::pass_back(&dest, &from);
        let (mut from, mut dest) = (from, dest);
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            spindle_sst::sync::lock(&seen2).extend_from_slice(&buf[..n]);
            if flip2.swap(false, Ordering::SeqCst) {
                buf[n - 1] ^= 0x10;
            }
            if dest.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = dest.shutdown(std::net::Shutdown::Both);
    });
    Relay { addr, seen, flip }
}

/// Nodes 0, 1 and 2, node 1's link to node 0 through a relay.
fn three(sealed: bool) -> (Vec<TcpTransport>, Relay) {
    let ls: Vec<_> = (0..3).map(|_| tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap()).collect();
    let a: Vec<SocketAddr> = ls.iter().map(|l| l.local_addr()).collect();
    let r = relay(a[0]);
    let peers = [
        vec![(NodeId(1), a[1]), (NodeId(2), a[2])],
        vec![(NodeId(0), r.addr), (NodeId(2), a[2])],
        vec![(NodeId(0), a[0]), (NodeId(1), a[1])],
    ];
    let hs: Vec<_> = ls
        .into_iter()
        .zip(peers)
        .enumerate()
        .map(|(i, (l, p))| std::thread::spawn(move || l.establish(&cfg(i as u32, p, sealed)).unwrap()))
        .collect();
    (hs.into_iter().map(|h| h.join().unwrap()).collect(), r)
}

/// Writes `words` at `off` from `from` to `to` as one signaled write, waits for its
/// completion, and checks that it landed.
fn write_lands(from: &TcpTransport, to: &TcpTransport, off: usize, words: &[u64]) {
    post_lands(from, to, off, words, false);
}

/// [`write_lands`], the write `stable` or not (a stable one's data is sealed where
/// it lies, from the region).
fn post_lands(from: &TcpTransport, to: &TcpTransport, off: usize, words: &[u64], stable: bool) {
    from.region(R).unwrap().apply_write(off, words);
    let op = WriteOp { signaled: true, stable, ..WriteOp::same(R, off, words.len() * 8) };
    let seq = from.post_write(to.local_id(), op).unwrap();
    from.flush();
    assert!(from.wait_completed(to.local_id(), seq, Instant::now() + DEADLINE), "write {off} was acknowledged");
    let last = off + (words.len() - 1) * 8;
    assert!(
        eventually(DEADLINE, || to.region(R).unwrap().load(last, Ordering::Acquire) == words[words.len() - 1]),
        "write at {off} did not land"
    );
    assert!((0..words.len()).all(|i| to.region(R).unwrap().load(off + 8 * i, Ordering::Acquire) == words[i]));
}

#[test]
fn sealed_links_carry_writes_of_any_size_both_ways_and_hide_them() {
    let (n, relay) = three(true);
    for (i, (a, b)) in [(0, 1), (1, 0), (1, 2), (2, 0)].into_iter().enumerate() {
        write_lands(&n[a], &n[b], 64 * i, &[MARK, i as u64]);
    }
    // Past one record (64 KiB) and past one frame: many records, frames split across them.
    let big: Vec<u64> = (0..(300 << 10) / 8).map(|i| i ^ 0xabcd).collect();
    write_lands(&n[1], &n[0], 4096, &big);
    write_lands(&n[0], &n[1], 4096, &big);
    // A stable write's data is sealed from its region: marked words, to show that
    // those records are sealed too.
    let marked: Vec<u64> = (0..(200 << 10) / 8).map(|i| if i % 512 == 3 { MARK } else { i }).collect();
    post_lands(&n[1], &n[0], 8 << 10, &marked, true);
    post_lands(&n[1], &n[2], 8 << 10, &marked, true);
    // Many small writes, each its own frame, batched into records by the flushes.
    for k in 0..200u64 {
        n[1].region(R).unwrap().apply_write(512 << 10, &[k]);
        n[1].post_write(NodeId(0), WriteOp::same(R, 512 << 10, 8)).unwrap();
        if k % 7 == 0 {
            n[1].flush();
        }
    }
    n[1].flush();
    assert!(eventually(DEADLINE, || n[0].region(R).unwrap().load(512 << 10, Ordering::Acquire) == 199));
    let seen = spindle_sst::sync::lock(&relay.seen).clone();
    assert!(seen.len() > 300 << 10, "the relay saw the link's bytes ({})", seen.len());
    assert!(!seen.windows(8).any(|w| w == MARK.to_le_bytes()), "a sealed link shows no plaintext");
}

#[test]
fn the_plaintext_check_sees_an_unsealed_link() {
    // The same check on a link without a secret finds the mark: it can fail.
    let (n, relay) = three(false);
    write_lands(&n[1], &n[0], 0, &[MARK]);
    assert!(spindle_sst::sync::lock(&relay.seen).windows(8).any(|w| w == MARK.to_le_bytes()));
}

#[test]
fn a_changed_bit_breaks_the_sealed_link_before_it_lands_and_the_rest_go_on() {
    let (n, relay) = three(true);
    write_lands(&n[1], &n[0], 0, &[1]);
    relay.flip.store(true, Ordering::SeqCst);
    n[1].region(R).unwrap().apply_write(8, &[MARK]);
    n[1].post_write(NodeId(0), WriteOp::same(R, 8, 8)).unwrap();
    n[1].flush();
    assert!(wait_broken(&n[0], NodeId(1), DEADLINE), "node 0 cut the link whose record failed");
    assert_ne!(n[0].region(R).unwrap().load(8, Ordering::Acquire), MARK, "the changed record was not applied");
    write_lands(&n[2], &n[0], 16, &[7]);
    write_lands(&n[0], &n[2], 24, &[8]);
}
