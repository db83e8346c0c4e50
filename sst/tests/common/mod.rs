//! Test helpers over `testkit`: groups on any transport, in one process or as
//! child processes of the test binary, with deadlines and cleanup.
#![allow(dead_code, missing_docs)]

use spindle_sst::sync::Arc;
use spindle_sst::transport::{NodeId, PeerEvent, RegionSpec, Transport};
use std::process::Command;
use std::time::Duration;
pub use testkit::TransportKind as Kind;
use testkit::{ChildSet, LocalGroup};

pub const SETUP: Duration = Duration::from_secs(20);

/// A relay's way back: copies what `dest` sends to `from` on a thread of its own,
/// until either side closes.
pub fn pass_back(dest: &std::net::TcpStream, from: &std::net::TcpStream) {
    let (mut back, mut to) = (dest.try_clone().unwrap(), from.try_clone().unwrap());
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut back, &mut to);
        let _ = to.shutdown(std::net::Shutdown::Both);
    });
}

pub fn ids(n: usize) -> Vec<NodeId> {
    (0..n as u32).map(NodeId).collect()
}

/// `n` nodes in this process.
pub fn group(kind: Kind, n: usize, regions: &[RegionSpec]) -> LocalGroup {
    testkit::local_group(kind, n, regions, SETUP).expect("group setup")
}

/// Polls `f` until it returns true or `within` passes; returns whether it did.
pub fn eventually(within: Duration, f: impl FnMut() -> bool) -> bool {
    testkit::poll_until(within, Duration::from_micros(200), f)
}

/// Waits for a Broken event about `peer` on `t` (flushing, so tcp acks and errors move).
pub fn wait_broken(t: &dyn Transport, peer: NodeId, within: Duration) -> bool {
    let mut evs = Vec::new();
    eventually(within, || {
        t.flush();
        t.drain_events(&mut evs);
        evs.iter().any(|PeerEvent::Broken { peer: p, .. }| *p == peer)
    })
}

/// Starts `n` children running the ignored test `entry` of this binary.
pub fn children(entry: &str, kind: Kind, n: usize, env: &[(&str, String)], deadline: Duration) -> ChildSet {
    let exe = std::env::current_exe().unwrap();
    let command = |_| {
        let mut c = Command::new(&exe);
        c.args([entry, "--exact", "--ignored", "--nocapture", "--test-threads=1"]);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    };
    ChildSet::start(command, kind, n, deadline).expect("children set up")
}

/// In a child: this node's transport.
pub fn child_transport(regions: &[RegionSpec]) -> (NodeId, usize, Arc<dyn Transport>) {
    testkit::child_transport(regions, SETUP).expect("child transport")
}

/// A stand-in for the group layer's link proof and ciphers (a test double, not
/// cryptography): proofs and tags are digests of a key and the bytes; a record is
/// "encrypted" by XOR with a keystream of digests, so its plaintext does not show
/// on the wire and a changed byte fails its tag.
#[derive(Debug)]
pub struct ToyAuth(pub u64);

impl spindle_sst::transport::tcp::SecretProof for ToyAuth {
    fn nonce(&self) -> std::io::Result<[u8; 32]> {
        static N: spindle_sst::sync::atomic::AtomicU64 = spindle_sst::sync::atomic::AtomicU64::new(1);
        let n = N.fetch_add(1, spindle_sst::sync::atomic::Ordering::Relaxed);
        Ok([n.to_le_bytes(); 4].concat().try_into().unwrap())
    }
    fn prove(&self, t: &[u8]) -> [u8; 32] {
        let d = spindle_sst::hash::digest(&[&self.0.to_le_bytes()[..], t].concat());
        [d.to_le_bytes(); 4].concat().try_into().unwrap()
    }
    fn check(&self, t: &[u8], proof: &[u8; 32]) -> bool {
        self.prove(t) == *proof
    }
    fn ciphers(&self, send: &[u8], receive: &[u8]) -> spindle_sst::transport::tcp::Ciphers {
        let key = |t: &[u8]| spindle_sst::hash::digest(&[b"key".as_slice(), &self.0.to_le_bytes(), t].concat());
        (Box::new(ToyCipher { key: key(send), seq: 0 }), Box::new(ToyCipher { key: key(receive), seq: 0 }))
    }
}

/// One direction of [`ToyAuth`]'s sealed link.
#[derive(Debug)]
pub struct ToyCipher {
    key: u64,
    seq: u64,
}

impl ToyCipher {
    fn xor(&self, body: &mut [u8]) {
        for (i, chunk) in body.chunks_mut(8).enumerate() {
            let k = spindle_sst::hash::digest(&[self.key, self.seq, i as u64].map(u64::to_le_bytes).concat());
            for (b, k) in chunk.iter_mut().zip(k.to_le_bytes()) {
                *b ^= k;
            }
        }
    }
    fn tag(&self, header: &[u8], body: &[u8]) -> [u8; 16] {
        let d =
            spindle_sst::hash::digest(&[&self.key.to_le_bytes()[..], &self.seq.to_le_bytes(), header, body].concat());
        [d.to_le_bytes(); 2].concat().try_into().unwrap()
    }
}

impl spindle_sst::transport::tcp::LinkCipher for ToyCipher {
    fn seal(&mut self, header: &[u8], body: &mut [u8]) -> [u8; 16] {
        self.xor(body);
        let tag = self.tag(header, body);
        self.seq += 1;
        tag
    }
    fn open(&mut self, header: &[u8], body: &mut [u8], tag: &[u8; 16]) -> bool {
        if self.tag(header, body) != *tag {
            return false;
        }
        self.xor(body);
        self.seq += 1;
        true
    }
}
