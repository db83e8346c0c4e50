//! The `tcp` transport: nodes on any hosts, one connection per peer pair.
//!
//! A write is a frame ([`super::frame`]) carrying the source bytes, copied when the
//! write is posted and sent at [`Transport::flush`]; the data of a large stable write
//! ([`WriteOp::stable`], a large message's payload) is not copied but sent from its
//! region (module `outbox`), and a large write's data is received straight into the
//! target region, so on a plain link its bytes are copied only by the kernel, once
//! each way.
//!
//! Receiving is done by the node's predicate thread, the transport's *driver*
//! ([`Transport::attach_driver`]): every pass reads each socket without blocking and
//! applies every complete frame in order (a `Release` fence, then the words, exactly
//! as a landed `mem` write), and an idle driver sleeps in `ppoll` on the sockets and
//! the doorbell's eventfd at once ([`Transport::park`]). So a message needs no thread
//! hand-off between the socket and the predicates, and a busy receiver is not woken
//! by the kernel for every segment. A fallback thread (module `helper`) receives instead
//! while no driver is attached (a transport used on its own) and stands in while the
//! driver makes no pass for a while (a long trigger), so that completions and the
//! peers' writes never wait on the application. Receiving from one link is always
//! done by one thread at a time, under the link's `rx` lock.
//!
//! Signaled writes are acknowledged with an Ack frame. The driver queues it for its
//! own `flush` at the end of the pass; the fallback thread tries to send it at once
//! without blocking (if no flush is sending, no earlier flush left bytes carried, and
//! the socket takes it) and leaves the rest for the next `flush`. So a receiver never
//! blocks on a write and two busy nodes cannot deadlock on full socket buffers.
//!
//! Sending (module `send`) never blocks on one socket either. A flush sends to every
//! peer with something queued, round robin a piece at a time, what each socket takes
//! without blocking, and waits in `ppoll` only while every socket is full. The
//! driver's flush stops after a short budget and carries what is left to the next
//! pass (an idle driver parks until a socket takes more). So megabytes queued for a
//! slow peer never hold the predicate thread away from its other peers, its
//! heartbeat or its receiving: bulk payload and liveness share the link, not the
//! thread. A peer whose socket takes nothing for [`TcpConfig::write_timeout`] is cut.
//!
//! Setup: node `i` connects to every peer with a lower id and accepts from every peer
//! with a higher one, all at once: each peer has the whole setup deadline, whatever
//! the others do (one thread per outgoing connection, for the setup only). The
//! connecting side sends a Hello (magic, protocol version, node id, group id, its
//! regions); the accepting side checks it and answers with its own.
//! A connection with a bad Hello (garbage, wrong version, wrong group, unknown or
//! duplicate id) is logged and closed, and setup goes on waiting for the real peer.
//!
//! With credentials ([`TcpConfig::auth`]: a group secret's proof, or a handshake of
//! the caller's own) each link proves itself both ways after the Hellos, and from
//! then on carries its frames sealed in records by a cipher per
//! direction (module `seal`): a record whose tag fails breaks the link before any of
//! its bytes are applied.
//!
//! After setup, a peer that sends a bad frame (garbage, an unknown kind, a truncated
//! frame, a write outside a region) is disconnected with a logged error and reported
//! as [`PeerEvent::Broken`]; this node and its other links keep working.

use super::frame;
use super::{EventQueue, NodeId, PeerEvent, RegionId, RegionSpec, SetupError, Transport, WriteError, WriteOp};
use crate::doorbell::{Doorbell, Ticket};
use crate::region::Region;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{lock, Arc, Mutex};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod helper;
// sendmsg of pieces that point into regions, and sealing from them (the spans' data,
// sent or sealed where it lies).
#[allow(unsafe_code)]
mod outbox;
mod quiet;
mod rx;
mod seal;
mod send;
mod setup;
mod tx;

pub use seal::{Ciphers, RECORD, TAG};
pub use setup::{bind, Listener};

/// How to connect a `tcp` node to its peers.
#[derive(Debug, Clone)]
pub struct TcpConfig {
    /// This node.
    pub me: NodeId,
    /// Every peer and the address it listens on.
    pub peers: Vec<(NodeId, SocketAddr)>,
    /// Group id; connections from other groups are refused.
    pub group: u64,
    /// Regions to register (peers may write into them).
    pub regions: Vec<RegionSpec>,
    /// How long setup may take.
    pub timeout: Duration,
    /// A peer whose socket takes no byte this long while bytes wait for it is stuck:
    /// it is disconnected.
    pub write_timeout: Duration,
    /// At the deadline, go on without the peers not connected (left out of
    /// [`Transport::peers`]) instead of failing (see `shm::ShmConfig::partial`).
    pub partial: bool,
    /// Stops waiting for a peer this says is gone (see `shm::ShmConfig::gone`).
    pub gone: Option<super::GoneProbe>,
    /// With credentials: every link proves itself at setup, both ways, after the
    /// Hellos (see [`LinkAuth`]), and then seals every frame it carries; a peer that
    /// cannot prove itself is refused like one with a bad Hello.
    pub auth: Option<std::sync::Arc<dyn LinkAuth>>,
}

/// How a link proves itself at setup and is keyed, supplied by the layer that
/// holds the credentials (sst holds no key and does no cryptography itself). Runs
/// on the link's blocking stream right after the Hellos, within the setup's
/// deadline, and returns the link's ciphers or why the peer is refused (it is then
/// refused like one with a bad Hello). Credentials that are one shared secret
/// implement [`SecretProof`] instead, whose handshake sst runs; credentials that
/// bring a handshake of their own (a TLS handshake per link, so that each link is
/// keyed by a fresh key agreement and not from a key every member holds) implement
/// this trait.
pub trait LinkAuth: Send + Sync + std::fmt::Debug {
    /// Proves this end to the peer and checks the peer's proof; then the link's
    /// ciphers, `(sending, receiving)`. The two directions' keys must differ and be
    /// fresh per link, as each cipher numbers its records from 0.
    fn handshake(&self, s: &mut TcpStream, ends: LinkEnds) -> Result<Ciphers, String>;
}

/// The two ends of a link being set up, as its handshake sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkEnds {
    /// This end connected (the other accepted).
    pub connector: bool,
    /// This node.
    pub me: NodeId,
    /// The peer, as its Hello named it.
    pub peer: NodeId,
    /// The group (and view) id both Hellos carried.
    pub group: u64,
}

/// Proof of a shared secret at link setup. After the Hellos, each end sends a
/// fresh [`SecretProof::nonce`], then `prove` of a transcript naming its role,
/// both node ids, the group and both nonces; each checks the other's with `check`.
/// A recorded exchange proves nothing on a new link (the nonces differ), and a
/// proof cannot be reflected (the role is in the transcript). Every holder of the
/// secret can derive every link's keys from a recorded exchange.
pub trait SecretProof: Send + Sync + std::fmt::Debug {
    /// 32 fresh random bytes.
    fn nonce(&self) -> std::io::Result<[u8; 32]>;
    /// The proof of `transcript`.
    fn prove(&self, transcript: &[u8]) -> [u8; 32];
    /// Whether `proof` is the proof of `transcript` (compared in constant time).
    fn check(&self, transcript: &[u8], proof: &[u8; 32]) -> bool;
    /// The ciphers of a link whose proofs held: `(sending, receiving)`, keyed from
    /// `send` (this end's transcript) and `receive` (the peer's). The peer derives
    /// its receiving cipher from the same bytes as this end's sending one. Keys must
    /// be fresh per link (the transcripts hold both nonces) and the two directions'
    /// keys must differ, as each cipher numbers its records from 0.
    fn ciphers(&self, send: &[u8], receive: &[u8]) -> Ciphers;
}

impl<T: SecretProof> LinkAuth for T {
    fn handshake(&self, s: &mut TcpStream, ends: LinkEnds) -> Result<Ciphers, String> {
        setup::prove(s, self, ends)
    }
}

/// One direction of a sealed link (see module `seal`), supplied by the layer that
/// holds the secret: an AEAD whose nonce is the record's sequence number on the
/// link, counted inside.
pub trait LinkCipher: Send + std::fmt::Debug {
    /// Encrypts the next record's `body` in place, bound to `header` (sent in clear);
    /// returns its tag.
    fn seal(&mut self, header: &[u8], body: &mut [u8]) -> [u8; TAG];
    /// Decrypts the next record's `body` in place if `tag` holds for it and `header`;
    /// false otherwise (the link is then broken, so the sequence need not go on).
    fn open(&mut self, header: &[u8], body: &mut [u8], tag: &[u8; TAG]) -> bool;
    /// Seals the next record, whose body is `first` then `second` (both left as they
    /// are), into `out`: the body's ciphertext, then the tag (`out` is exactly
    /// `first.len() + second.len() + TAG` bytes), bound to `header`. A stable write's
    /// data (a large message, a run of ring slots) is sealed this way from its
    /// region, with no copy first. The default
    /// copies and seals in place; a cipher that reads its input apart from where it
    /// writes overrides it.
    fn seal_into(&mut self, header: &[u8], first: &[u8], second: &[u8], out: &mut [u8]) {
        let (body, tag) = out.split_at_mut(first.len() + second.len());
        body[..first.len()].copy_from_slice(first);
        body[first.len()..].copy_from_slice(second);
        tag.copy_from_slice(&self.seal(header, body));
    }
}

impl TcpConfig {
    /// A config with a 10 s setup timeout and a 5 s write timeout.
    pub fn new(me: NodeId, peers: Vec<(NodeId, SocketAddr)>, group: u64, regions: Vec<RegionSpec>) -> Self {
        TcpConfig {
            me,
            peers,
            group,
            regions,
            timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(5),
            partial: false,
            gone: None,
            auth: None,
        }
    }
}

#[derive(Debug)]
struct TcpPeer {
    id: NodeId,
    remote: Vec<RegionSpec>,
    /// Frames posted and not yet sent.
    out: Mutex<outbox::Outbox>,
    dirty: AtomicBool,
    /// The socket's write side, held while a flush sends; what a flush could not send
    /// stays carried in it, in order, for the next.
    tx: Mutex<tx::Tx>,
    /// A clone of the socket, read without blocking and shut down without taking `tx`.
    sock: TcpStream,
    /// Frames are split to fit a sealed record (see module `seal`).
    sealed: bool,
    posted: AtomicU64,
    acked: AtomicU64,
    /// Reads that returned bytes from this peer (see [`Transport::heard`]).
    heard: AtomicU64,
    /// The driver's quiet streak on this link (see module `quiet`).
    quiet: quiet::Quiet,
    /// Threads in `wait_completed` (acks notify only when there are any).
    ack_waiters: AtomicU64,
    ack_lock: Mutex<()>,
    ack_cv: std::sync::Condvar,
    cut: AtomicBool,
    /// What has been read from the link and not yet applied. Held while frames are
    /// read and applied, by one thread at a time; `disconnect` takes it to be sure
    /// that no frame is being applied.
    rx: Mutex<rx::Rx>,
}

#[derive(Debug)]
struct Shared {
    me: NodeId,
    regions: Vec<(RegionId, Arc<Region>)>,
    peers: Vec<TcpPeer>,
    doorbell: Arc<Doorbell>,
    events: EventQueue,
    driving: helper::Driving,
    /// A peer whose socket takes nothing this long while bytes wait is cut.
    write_timeout: Duration,
}

impl Shared {
    fn peer(&self, id: NodeId) -> Option<&TcpPeer> {
        self.peers.binary_search_by_key(&id, |p| p.id).ok().map(|i| &self.peers[i])
    }
    fn region(&self, id: RegionId) -> Option<&Arc<Region>> {
        self.regions.iter().find(|(r, _)| *r == id).map(|(_, r)| r)
    }
    /// The sockets of the links still up, with `first` in front (a wake descriptor).
    fn wait_fds(&self, first: std::os::fd::RawFd) -> Vec<std::os::fd::RawFd> {
        let mut fds = Vec::with_capacity(self.peers.len() + 1);
        fds.push(first);
        fds.extend(self.peers.iter().filter(|p| !p.cut.load(Ordering::Relaxed)).map(|p| p.sock.as_raw_fd()));
        fds
    }
    /// Marks the link broken, closes the socket and reports it once.
    fn broken(&self, p: &TcpPeer, reason: String) {
        if !p.cut.swap(true, Ordering::AcqRel) {
            tracing::warn!(node = %self.me, peer = %p.id, %reason, "tcp link broken, peer disconnected");
            let _ = p.sock.shutdown(Shutdown::Both);
            self.events.push(PeerEvent::Broken { peer: p.id, reason }, &self.doorbell);
        }
    }
}

/// The `tcp` transport (see the module docs).
#[derive(Debug)]
pub struct TcpTransport {
    shared: Arc<Shared>,
    helper: Option<JoinHandle<()>>,
}

impl TcpTransport {
    fn start(cfg: &TcpConfig, links: Vec<(NodeId, setup::Link)>) -> Result<TcpTransport, SetupError> {
        let regions = cfg.regions.iter().map(|r| (r.id, Arc::new(Region::new(r.len)))).collect();
        let mut peers = Vec::new();
        for (id, setup::Link { stream, remote, ciphers }) in links {
            let (send, receive) = match ciphers {
                Some((s, r)) => (Some(s), Some(r)),
                None => (None, None),
            };
            let err = SetupError::io(format!("socket to {id}"));
            stream.set_read_timeout(None).map_err(err)?;
            peers.push(TcpPeer {
                id,
                remote,
                out: Mutex::new(outbox::Outbox::default()),
                dirty: AtomicBool::new(false),
                sock: stream.try_clone().map_err(SetupError::io("clone socket"))?,
                sealed: send.is_some(),
                tx: Mutex::new(tx::Tx::new(stream, send)),
                posted: AtomicU64::new(0),
                acked: AtomicU64::new(0),
                heard: AtomicU64::new(0),
                quiet: quiet::Quiet::default(),
                ack_waiters: AtomicU64::new(0),
                ack_lock: Mutex::new(()),
                ack_cv: std::sync::Condvar::new(),
                cut: AtomicBool::new(false),
                rx: Mutex::new(rx::Rx::new(receive.map(seal::Opening::new))),
            });
        }
        peers.sort_by_key(|p| p.id);
        let shared = Arc::new(Shared {
            me: cfg.me,
            regions,
            peers,
            doorbell: Arc::new(Doorbell::with_wake_fd().map_err(SetupError::io("doorbell eventfd"))?),
            events: EventQueue::default(),
            driving: helper::Driving::new().map_err(SetupError::io("helper eventfd"))?,
            write_timeout: cfg.write_timeout,
        });
        let sh = shared.clone();
        let helper = std::thread::Builder::new()
            .name(format!("sst-tcp-rx-{}", cfg.me.0))
            .spawn(move || helper::run(&sh))
            .map_err(SetupError::io("spawn receiver"))?;
        Ok(TcpTransport { shared, helper: Some(helper) })
    }
}

impl Transport for TcpTransport {
    fn local_id(&self) -> NodeId {
        self.shared.me
    }

    fn peers(&self) -> Vec<NodeId> {
        self.shared.peers.iter().map(|p| p.id).collect()
    }

    fn region(&self, id: RegionId) -> Option<&Arc<Region>> {
        self.shared.region(id)
    }

    fn post_write(&self, peer: NodeId, op: WriteOp) -> Result<u64, WriteError> {
        let sh = &self.shared;
        let p = sh.peer(peer).ok_or(WriteError::UnknownPeer(peer))?;
        if p.cut.load(Ordering::Relaxed) {
            return Err(WriteError::Disconnected(peer));
        }
        let src = sh.region(op.region).ok_or(WriteError::UnknownRegion(op.region))?;
        src.check_range(op.src_offset as u64, op.len as u64)?;
        let remote = p.remote.iter().find(|r| r.id == op.region).ok_or(WriteError::UnknownRegion(op.region))?;
        let fits = op.dst_offset % 8 == 0 && op.dst_offset.checked_add(op.len).is_some_and(|e| e <= remote.len);
        if !fits {
            return Err(crate::region::RangeError {
                offset: op.dst_offset as u64,
                len: op.len as u64,
                region_len: remote.len as u64,
            }
            .into());
        }
        let mut out = lock(&p.out);
        // Larger writes are split into frames of at most MAX_WRITE bytes (FRAME_DATA on
        // a sealed link, so that a frame fits a record). Frames of one
        // link are applied in order, so the split only means that the pieces of one
        // write may land at different times, which the ordering guarantee allows.
        let most = if p.sealed { seal::FRAME_DATA } else { frame::MAX_WRITE };
        let pieces = op.len.div_ceil(most).max(1);
        // The data of a large stable write is sent from where it lies (on a sealed
        // link, sealed from where it lies).
        let in_place = op.stable && op.len >= if p.sealed { outbox::SEALED_SPAN_MIN } else { outbox::SPAN_MIN };
        for i in 0..pieces {
            let at = i * most;
            let n = (op.len - at).min(most);
            frame::encode_write_header(
                &mut out.bytes,
                op.region,
                (op.dst_offset + at) as u64,
                n,
                frame::WriteFlags { signaled: op.signaled && i + 1 == pieces, quiet: !op.wake },
            );
            match in_place {
                true => out.push_span(src, op.src_offset + at, n),
                false => src.append_to(op.src_offset + at, n, &mut out.bytes),
            }
        }
        // Sequence numbers count frames, as the receiver's acks do.
        let seq = p.posted.fetch_add(pieces as u64, Ordering::AcqRel) + pieces as u64;
        drop(out);
        p.dirty.store(true, Ordering::Release);
        Ok(seq)
    }

    fn flush(&self) {
        self.shared.flush();
    }

    fn drain(&self, within: Duration) {
        self.shared.flush_within(Some(within));
    }

    fn wait_completed(&self, peer: NodeId, seq: u64, deadline: Instant) -> bool {
        let Some(p) = self.shared.peer(peer) else { return false };
        // A short spin first: on a busy link the ack is often microseconds away.
        let backoff = crossbeam_utils::Backoff::new();
        while !backoff.is_completed() {
            if p.acked.load(Ordering::Acquire) >= seq {
                return true;
            }
            backoff.snooze();
        }
        p.ack_waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = lock(&p.ack_lock);
        let done = loop {
            if p.acked.load(Ordering::SeqCst) >= seq {
                break true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || p.cut.load(Ordering::Acquire) {
                break false;
            }
            g = p.ack_cv.wait_timeout(g, left).unwrap_or_else(|e| e.into_inner()).0;
        };
        drop(g);
        p.ack_waiters.fetch_sub(1, Ordering::SeqCst);
        done
    }

    fn completed(&self, peer: NodeId) -> u64 {
        self.shared.peer(peer).map_or(0, |p| p.acked.load(Ordering::Acquire))
    }

    fn heard(&self, peer: NodeId) -> u64 {
        self.shared.peer(peer).map_or(0, |p| p.heard.load(Ordering::Relaxed))
    }

    fn disconnect(&self, peer: NodeId) {
        let Some(p) = self.shared.peer(peer) else { return };
        p.cut.store(true, Ordering::Release);
        let _ = p.sock.shutdown(Shutdown::Both);
        // Wait out a batch being applied; a receiver checks `cut` before the next.
        drop(lock(&p.rx));
    }

    fn poll_receive(&self) -> bool {
        let sh = &self.shared;
        sh.driving.passed();
        let mut got = false;
        for p in &sh.peers {
            p.quiet.poll(|| {
                let heard = p.heard.load(Ordering::Relaxed);
                got |= sh.receive(p, true);
                p.heard.load(Ordering::Relaxed) != heard
            });
        }
        got
    }

    fn park(&self, ticket: Ticket, timeout: Option<Duration>) {
        let sh = &self.shared;
        for p in &sh.peers {
            p.quiet.reset();
        }
        if sh.doorbell.pending(&ticket) {
            let fds = sh.wait_fds(sh.doorbell.wake_fd().expect("the tcp doorbell has a wake fd"));
            // A flush that ran out of budget left bytes: wake when a socket takes them.
            let unsent: Vec<_> = (sh.peers.iter())
                .filter(|p| p.dirty.load(Ordering::Acquire) && !p.cut.load(Ordering::Relaxed))
                .map(|p| p.sock.as_raw_fd())
                .collect();
            sh.driving.parked(true);
            crate::sys::wait_for(&fds, &unsent, timeout);
            sh.driving.parked(false);
        }
        sh.doorbell.finish(ticket);
    }

    fn attach_driver(&self) {
        self.shared.driving.attach(true);
    }

    fn detach_driver(&self) {
        self.shared.driving.attach(false);
    }

    fn doorbell(&self) -> &Arc<Doorbell> {
        &self.shared.doorbell
    }

    fn drain_events(&self, out: &mut Vec<PeerEvent>) {
        self.shared.events.drain(out)
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        for p in &self.shared.peers {
            p.cut.store(true, Ordering::Release);
            let _ = p.sock.shutdown(Shutdown::Both);
        }
        self.shared.driving.stop();
        if let Some(t) = self.helper.take() {
            let _ = t.join();
        }
    }
}
