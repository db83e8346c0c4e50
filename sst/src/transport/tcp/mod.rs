//! The `tcp` transport: nodes on any hosts, one connection per peer pair.
//!
//! A write is a frame ([`super::frame`]) carrying the source bytes, copied when the
//! write is posted and sent at [`Transport::flush`]. One receiver thread per peer
//! blocks in `read`, applies every complete frame in order (a `Release` fence, then the
//! words, exactly as a landed `mem` write) and rings the doorbell once per batch.
//! Signaled writes are acknowledged with an Ack frame, which the receiver queues and
//! then tries to send at once without blocking (if no flush is sending and the
//! socket takes it); whatever the socket does not take waits for the next `flush`.
//! So a receiver never blocks on a write and two busy nodes cannot deadlock on full
//! socket buffers, and a signaled write's completion does not wait for the target's
//! own threads (as an RDMA NIC acknowledges a write without its host's CPU).
//!
//! Setup: node `i` connects to every peer with a lower id and accepts from every peer
//! with a higher one, all at once: each peer has the whole setup deadline, whatever
//! the others do (one thread per outgoing connection, for the setup only). The
//! connecting side sends a Hello (magic, protocol version, node id, group id, its
//! regions); the accepting side checks it and answers with its own.
//! A connection with a bad Hello (garbage, wrong version, wrong group, unknown or
//! duplicate id) is logged and closed, and setup goes on waiting for the real peer.
//!
//! After setup, a peer that sends a bad frame (garbage, an unknown kind, a truncated
//! frame, a write outside a region) is disconnected with a logged error and reported
//! as [`PeerEvent::Broken`]; this node and its other links keep working.

use super::frame::{self, Frame};
use super::{EventQueue, NodeId, PeerEvent, RegionId, RegionSpec, SetupError, Transport, WriteError, WriteOp};
use crate::doorbell::Doorbell;
use crate::region::Region;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{lock, Arc, Mutex};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod setup;

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
    /// A send blocked this long means the peer is stuck: it is disconnected.
    pub write_timeout: Duration,
    /// At the deadline, go on without the peers not connected (left out of
    /// [`Transport::peers`]) instead of failing (see `shm::ShmConfig::partial`).
    pub partial: bool,
    /// Stops waiting for a peer this says is gone (see `shm::ShmConfig::gone`).
    pub gone: Option<super::GoneProbe>,
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
        }
    }
}

#[derive(Debug)]
struct TcpPeer {
    id: NodeId,
    remote: Vec<RegionSpec>,
    /// Frames posted and not yet sent.
    out: Mutex<Vec<u8>>,
    dirty: AtomicBool,
    /// The socket's write side; held for the whole of a flush so frames keep their order.
    tx: Mutex<TcpStream>,
    posted: AtomicU64,
    acked: AtomicU64,
    /// Threads in `wait_completed` (the receiver notifies only when there are any).
    ack_waiters: AtomicU64,
    ack_lock: Mutex<()>,
    ack_cv: std::sync::Condvar,
    cut: AtomicBool,
    /// Held by the receiver while it applies frames; `disconnect` takes it to be sure
    /// that no frame is being applied.
    applying: Mutex<()>,
}

#[derive(Debug)]
struct Shared {
    me: NodeId,
    regions: Vec<(RegionId, Arc<Region>)>,
    peers: Vec<TcpPeer>,
    doorbell: Arc<Doorbell>,
    events: EventQueue,
}

impl Shared {
    fn peer(&self, id: NodeId) -> Option<&TcpPeer> {
        self.peers.binary_search_by_key(&id, |p| p.id).ok().map(|i| &self.peers[i])
    }
    fn region(&self, id: RegionId) -> Option<&Arc<Region>> {
        self.regions.iter().find(|(r, _)| *r == id).map(|(_, r)| r)
    }
    /// Sends what is queued for `p` if no flush is sending and the socket takes it
    /// without blocking; the rest stays queued, in order, for the next flush.
    fn send_now(&self, p: &TcpPeer) {
        let Ok(tx) = p.tx.try_lock() else { return }; // a flush is sending: it or the next one takes it
        if p.cut.load(Ordering::Acquire) {
            return;
        }
        let mut out = lock(&p.out);
        if out.is_empty() {
            return;
        }
        match socket2::SockRef::from(&*tx).send_with_flags(&out, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) {
            Ok(n) => {
                out.drain(..n);
                if out.is_empty() {
                    p.dirty.store(false, Ordering::Release);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                drop(out);
                drop(tx);
                self.broken(p, format!("send: {e}"));
            }
        }
    }

    /// Marks the link broken, closes the socket and reports it once.
    fn broken(&self, p: &TcpPeer, reason: String) {
        if !p.cut.swap(true, Ordering::AcqRel) {
            tracing::warn!(node = %self.me, peer = %p.id, %reason, "tcp link broken, peer disconnected");
            if let Ok(tx) = p.tx.try_lock() {
                let _ = tx.shutdown(Shutdown::Both);
            }
            self.events.push(PeerEvent::Broken { peer: p.id, reason }, &self.doorbell);
        }
    }
}

/// The `tcp` transport (see the module docs).
#[derive(Debug)]
pub struct TcpTransport {
    shared: Arc<Shared>,
    /// Clones of the sockets, to shut them down without taking the send locks.
    sockets: Vec<(NodeId, TcpStream)>,
    threads: Vec<JoinHandle<()>>,
}

impl TcpTransport {
    pub(super) fn start(
        cfg: &TcpConfig,
        links: Vec<(NodeId, TcpStream, Vec<RegionSpec>)>,
    ) -> Result<TcpTransport, SetupError> {
        let regions = cfg.regions.iter().map(|r| (r.id, Arc::new(Region::new(r.len)))).collect();
        let mut peers = Vec::new();
        let mut readers = Vec::new();
        let mut sockets = Vec::new();
        for (id, stream, remote) in links {
            let err = SetupError::io(format!("socket to {id}"));
            stream.set_read_timeout(None).map_err(err)?;
            stream.set_write_timeout(Some(cfg.write_timeout)).map_err(SetupError::io("write timeout"))?;
            readers.push((id, stream.try_clone().map_err(SetupError::io("clone socket"))?));
            sockets.push((id, stream.try_clone().map_err(SetupError::io("clone socket"))?));
            peers.push(TcpPeer {
                id,
                remote,
                out: Mutex::new(Vec::new()),
                dirty: AtomicBool::new(false),
                tx: Mutex::new(stream),
                posted: AtomicU64::new(0),
                acked: AtomicU64::new(0),
                ack_waiters: AtomicU64::new(0),
                ack_lock: Mutex::new(()),
                ack_cv: std::sync::Condvar::new(),
                cut: AtomicBool::new(false),
                applying: Mutex::new(()),
            });
        }
        peers.sort_by_key(|p| p.id);
        let shared = Arc::new(Shared {
            me: cfg.me,
            regions,
            peers,
            doorbell: Arc::new(Doorbell::new()),
            events: EventQueue::default(),
        });
        let mut threads = Vec::new();
        for (id, stream) in readers {
            let sh = shared.clone();
            let t = std::thread::Builder::new()
                .name(format!("sst-tcp-rx-{}-{}", cfg.me.0, id.0))
                .spawn(move || receive(&sh, id, stream))
                .map_err(SetupError::io("spawn receiver"))?;
            threads.push(t);
        }
        Ok(TcpTransport { shared, sockets, threads })
    }
}

/// The receiver loop of the link from `id`.
fn receive(sh: &Shared, id: NodeId, mut stream: TcpStream) {
    let p = sh.peer(id).expect("receiver for a known peer");
    let mut buf = vec![0u8; 256 << 10];
    let (mut start, mut end) = (0usize, 0usize);
    let mut applied: u64 = 0;
    let result: Result<(), String> = loop {
        if end == buf.len() {
            if start > 0 {
                buf.copy_within(start..end, 0);
                end -= start;
                start = 0;
            } else {
                // One frame larger than the buffer: grow to fit it (bounded by MAX_BODY,
                // which `body_len` enforces).
                let need = match frame::body_len(&buf[start..end]) {
                    Ok(Some(n)) => n + 4,
                    Ok(None) => buf.len() * 2,
                    Err(e) => break Err(e.to_string()),
                };
                buf.resize(need.max(buf.len() * 2).min(frame::MAX_BODY + 4), 0);
            }
        }
        let n = match stream.read(&mut buf[end..]) {
            Ok(0) if end > start => {
                break Err(format!("connection closed inside a frame ({} bytes buffered)", end - start))
            }
            Ok(0) => break Err("connection closed by peer".into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(format!("read: {e}")),
        };
        end += n;
        let guard = lock(&p.applying);
        if p.cut.load(Ordering::Acquire) {
            break Ok(());
        }
        let mut ack = None;
        let mut ring = false;
        let step: Result<(), String> = loop {
            match frame::decode(&buf[start..end]) {
                Ok(None) => break Ok(()),
                Err(e) => break Err(format!("bad frame: {e}")),
                Ok(Some((f, used))) => {
                    match f {
                        Frame::Write { region, offset, signaled, wake, data } => {
                            let Some(r) = sh.region(region) else {
                                break Err(format!("bad frame: write to unknown region {region:?}"));
                            };
                            if let Err(e) = r.check_range(offset, data.len() as u64) {
                                break Err(format!("bad frame: {e}"));
                            }
                            r.apply_write_bytes(offset as usize, data);
                            applied += 1;
                            if signaled {
                                ack = Some(applied);
                            }
                            ring |= wake;
                        }
                        Frame::Ack { seq } => {
                            if seq > p.posted.load(Ordering::Acquire) {
                                break Err(format!("bad frame: ack of write {seq}, never posted"));
                            }
                            p.acked.fetch_max(seq, Ordering::SeqCst);
                            // Completions wake `wait_completed`'s waiters, not the
                            // doorbell: no predicate-thread work depends on them.
                            if p.ack_waiters.load(Ordering::SeqCst) > 0 {
                                // Under the lock, so a waiter between its check and
                                // its wait cannot miss this.
                                drop(lock(&p.ack_lock));
                                p.ack_cv.notify_all();
                            }
                        }
                        Frame::Hello(_) => break Err("bad frame: hello after setup".into()),
                    }
                    start += used;
                }
            }
        };
        drop(guard);
        if start == end {
            start = 0;
            end = 0;
        }
        if let Some(seq) = ack {
            frame::encode_ack(&mut lock(&p.out), seq);
            p.dirty.store(true, Ordering::SeqCst);
            sh.send_now(p);
        }
        if ring {
            sh.doorbell.ring();
        }
        if let Err(e) = step {
            break Err(e);
        }
    };
    match result {
        Ok(()) => {}
        Err(reason) if p.cut.load(Ordering::Acquire) => {
            tracing::debug!(node = %sh.me, peer = %id, %reason, "receiver stopped after cut-off")
        }
        Err(reason) => sh.broken(p, reason),
    }
    let _ = stream.shutdown(Shutdown::Both);
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
        // Larger writes are split into frames of at most MAX_WRITE bytes. Frames of one
        // link are applied in order, so the split only means that the pieces of one
        // write may land at different times, which the ordering guarantee allows.
        let pieces = op.len.div_ceil(frame::MAX_WRITE).max(1);
        for i in 0..pieces {
            let at = i * frame::MAX_WRITE;
            let n = (op.len - at).min(frame::MAX_WRITE);
            frame::encode_write_header(
                &mut out,
                op.region,
                (op.dst_offset + at) as u64,
                n,
                frame::WriteFlags { signaled: op.signaled && i + 1 == pieces, quiet: !op.wake },
            );
            src.append_to(op.src_offset + at, n, &mut out);
        }
        // Sequence numbers count frames, as the receiver's acks do.
        let seq = p.posted.fetch_add(pieces as u64, Ordering::AcqRel) + pieces as u64;
        drop(out);
        p.dirty.store(true, Ordering::Release);
        Ok(seq)
    }

    fn flush(&self) {
        for p in &self.shared.peers {
            if !p.dirty.load(Ordering::Acquire) || p.cut.load(Ordering::Relaxed) {
                continue;
            }
            // Send until nothing is queued. A receiver that queued an ack while this
            // held the send lock left it to this loop (`send_now`), so the queue is
            // checked again after the lock is let go.
            loop {
                let mut tx = lock(&p.tx);
                let mut failed = None;
                while p.dirty.swap(false, Ordering::SeqCst) {
                    let bytes = std::mem::take(&mut *lock(&p.out));
                    if bytes.is_empty() {
                        continue;
                    }
                    let res = tx.write_all(&bytes);
                    // Give the buffer back so the next posts reuse its capacity.
                    {
                        let mut out = lock(&p.out);
                        if out.is_empty() {
                            let mut b = bytes;
                            b.clear();
                            *out = b;
                        }
                    }
                    if let Err(e) = res {
                        failed = Some(e);
                        break;
                    }
                }
                drop(tx);
                if let Some(e) = failed {
                    self.shared.broken(p, format!("send: {e}"));
                    break;
                }
                if !p.dirty.load(Ordering::SeqCst) || p.cut.load(Ordering::Acquire) {
                    break;
                }
            }
        }
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

    fn disconnect(&self, peer: NodeId) {
        let Some(p) = self.shared.peer(peer) else { return };
        p.cut.store(true, Ordering::Release);
        if let Some((_, s)) = self.sockets.iter().find(|(id, _)| *id == peer) {
            let _ = s.shutdown(Shutdown::Both);
        }
        // Wait out a batch being applied; the receiver checks `cut` before the next.
        drop(lock(&p.applying));
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
        }
        for (_, s) in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
