//! Large writes over tcp are received straight into the target region (no frame
//! buffer between), and stable ones are sent from their source region: their bytes
//! land whole and in order with the small writes around them, on plain and sealed
//! links, whether the driver or the fallback thread
//! receives; a peer that lies in a large write's head, or stops in the middle of its
//! data, is cut off before or without anything of it counting as applied.

mod common;

use common::{wait_broken, ToyAuth};
use spindle_sst::predicate::{PollConfig, PredicateThread};
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::sync::Arc;
use spindle_sst::transport::frame::{self, Hello};
use spindle_sst::transport::tcp::{self, TcpConfig, TcpTransport};
use spindle_sst::transport::{NodeId, RegionId, RegionSpec, Transport, WriteOp};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const R: RegionId = RegionId(0);
/// Room for a write split in two frames (over `frame::MAX_WRITE`) and a flag word.
const LEN: usize = (17 << 20) + 4096;
const FLAG: usize = LEN - 8;
const GROUP: u64 = 5;
const DEADLINE: Duration = Duration::from_secs(60);

fn cfg(me: u32, peers: Vec<(NodeId, SocketAddr)>, sealed: bool) -> TcpConfig {
    let c = TcpConfig {
        timeout: DEADLINE,
        ..TcpConfig::new(NodeId(me), peers, GROUP, vec![RegionSpec { id: R, len: LEN }])
    };
    TcpConfig { auth: sealed.then(|| std::sync::Arc::new(ToyAuth(3)) as std::sync::Arc<dyn tcp::LinkAuth>), ..c }
}

fn pair(sealed: bool) -> (TcpTransport, TcpTransport) {
    let l0 = tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let l1 = tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let (a0, a1) = (l0.local_addr(), l1.local_addr());
    let n0 = std::thread::spawn(move || l0.establish(&cfg(0, vec![(NodeId(1), a1)], sealed)).unwrap());
    let n1 = l1.establish(&cfg(1, vec![(NodeId(0), a0)], sealed)).unwrap();
    (n0.join().unwrap(), n1)
}

/// Word `i` of the `k`th write.
fn word(k: u64, i: usize) -> u64 {
    (k << 48) ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5a5a
}

/// Node 1 writes each (offset, length) in turn, each followed by a flag word of its
/// number; node 0 must see each write whole once it sees the flag that follows it
/// (the flag is applied after the write, on the same link).
fn writes_land_whole(sealed: bool, driven: bool) {
    let (n0, n1) = pair(sealed);
    let n0 = Arc::new(n0);
    let pt =
        driven.then(|| PredicateThread::spawn((), n0.clone() as Arc<dyn Transport>, PollConfig::default()).unwrap());
    let shapes =
        [(0, 64 << 10), (8, (1 << 20) + 8), (4096, 3 << 20), (8, 40 << 10), (0, 17 << 20), (1 << 20, 200 << 10)];
    let (src, dst) = (n1.region(R).unwrap(), n0.region(R).unwrap());
    for (k, &(off, len)) in shapes.iter().enumerate() {
        let k = k as u64 + 1;
        let words: Vec<u64> = (0..len / 8).map(|i| word(k, i)).collect();
        src.apply_write(off, &words);
        // Every other write is stable (its source is not rewritten before the ack
        // below): on a plain link its data is sent from the region itself.
        n1.post_write(NodeId(0), WriteOp { stable: k % 2 == 0, ..WriteOp::same(R, off, len) }).unwrap();
        src.apply_write(FLAG, &[k]);
        let seq = n1.post_write(NodeId(0), WriteOp { signaled: true, ..WriteOp::same(R, FLAG, 8) }).unwrap();
        n1.flush();
        let end = Instant::now() + DEADLINE;
        while !n1.wait_completed(NodeId(0), seq, Instant::now() + Duration::from_millis(20)) {
            assert!(Instant::now() < end, "write {k} ({len} bytes at {off}) was not acknowledged");
            n1.flush(); // what a flush left carried goes on
        }
        assert_eq!(dst.load(FLAG, Ordering::Acquire), k, "the flag after write {k}");
        let mut got = vec![0u64; len / 8];
        dst.read_words(off, &mut got);
        let bad = got.iter().enumerate().position(|(i, w)| *w != word(k, i));
        assert_eq!(bad, None, "write {k} ({len} bytes at {off}, sealed {sealed}, driven {driven}): first wrong word");
    }
    drop(pt);
}

#[test]
fn large_writes_land_whole_and_in_order_plain() {
    writes_land_whole(false, false);
}

#[test]
fn large_writes_land_whole_and_in_order_driven() {
    writes_land_whole(false, true);
}

#[test]
fn large_writes_land_whole_and_in_order_sealed() {
    writes_land_whole(true, true);
}

/// Node 0 is real; node 1 is this test speaking raw bytes. Returns node 0 and the
/// fake's connection to it.
fn node_with_fake() -> (TcpTransport, TcpStream) {
    let l0 = tcp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let a0 = l0.local_addr();
    let fake: SocketAddr = "127.0.0.1:9".parse().unwrap(); // never dialled: node 1 dials node 0
    let n0 = std::thread::spawn(move || l0.establish(&cfg(0, vec![(NodeId(1), fake)], false)).unwrap());
    let mut s = TcpStream::connect(a0).unwrap();
    let mut hello = Vec::new();
    let regions = vec![RegionSpec { id: R, len: LEN }];
    frame::encode_hello(&mut hello, &Hello { node: NodeId(1), group: GROUP, regions });
    s.write_all(&hello).unwrap();
    let mut head = [0u8; 4];
    s.read_exact(&mut head).unwrap();
    let mut body = vec![0u8; frame::body_len(&head).unwrap().unwrap()];
    s.read_exact(&mut body).unwrap();
    (n0.join().unwrap(), s)
}

/// The head of a write of `len` bytes at `offset`, and `have` of its data bytes.
fn partial_write(offset: u64, len: usize, have: usize) -> Vec<u8> {
    let mut b = Vec::new();
    frame::encode_write_header(&mut b, R, offset, len, frame::WriteFlags { signaled: true, quiet: false });
    b.extend((0..have).map(|i| i as u8 | 1));
    b
}

#[test]
fn a_large_write_past_the_region_is_refused_at_its_head() {
    let (n0, mut s) = node_with_fake();
    // 1 MiB that would end past the region: refused before its data has come (the
    // stream stays open, so only the head can tell).
    s.write_all(&partial_write((LEN - (1 << 19)) as u64, 1 << 20, 1000)).unwrap();
    assert!(wait_broken(&n0, NodeId(1), DEADLINE), "the lying peer was cut off");
    assert_eq!(n0.region(R).unwrap().load(LEN - (1 << 19), Ordering::Acquire), 0, "nothing of it landed");
}

#[test]
fn a_peer_that_stops_inside_a_large_write_is_cut_off_without_an_ack() {
    let (n0, mut s) = node_with_fake();
    // Half of a 1 MiB signaled write, then the end of the stream.
    s.write_all(&partial_write(0, 1 << 20, 1 << 19)).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(wait_broken(&n0, NodeId(1), DEADLINE), "the peer that stopped was cut off");
    // The fake sees no ack: a write cut short never counts as applied.
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "node 0 acknowledged a write it never got whole: {:?}", &rest[..rest.len().min(16)]);
}
