//! The device side of the `rdma` transport (see the module docs of `rdma`).

use super::handshake::{PeerInfo, RemoteRegion};
use super::schedule::{status_text, QueueFull, Signaler};
use super::RdmaConfig;
use crate::doorbell::Doorbell;
use crate::region::Region;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{lock, Arc, Mutex};
use crate::transport::{
    check_peers, EventQueue, NodeId, PeerEvent, RegionId, SetupError, Transport, WriteError, WriteOp,
};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{ExtendedCompletionQueue, GenericCompletionQueue};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    ExtendedQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState, SetInlineData,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Inline data this transport asks for (the device may offer less).
const INLINE: u32 = 64;
/// The low bits of a work request id are the write's sequence number, the high
/// bits the peer's index.
const SEQ_BITS: u32 = 48;
/// The largest handshake a peer may send.
const MAX_HANDSHAKE: usize = 64 * 1024;

pub(super) fn first_device() -> Result<String, String> {
    let list = DeviceList::new().map_err(|e| {
        format!("no RDMA device list ({e}): rdma-core's libibverbs and a device (or a soft-RoCE rxe link) are needed")
    })?;
    let name = list.iter().next().map(|d| d.name());
    name.ok_or_else(|| "rdma-core found no RDMA device".to_string())
}

struct Qp {
    qp: ExtendedQueuePair,
    sig: Signaler,
}

struct Peer {
    id: NodeId,
    index: u64,
    info: PeerInfo,
    qp: Mutex<Qp>,
    completed: AtomicU64,
    cut: AtomicBool,
}

/// The `rdma` transport (see the module docs).
pub struct RdmaTransport {
    me: NodeId,
    regions: Vec<(RegionId, Arc<Region>, Arc<MemoryRegion>)>,
    peers: Vec<Peer>,
    cq: Arc<ExtendedCompletionQueue>,
    polling: Mutex<()>,
    doorbell: Arc<Doorbell>,
    events: EventQueue,
    stop: Arc<AtomicBool>,
    waker: Option<JoinHandle<()>>,
    _pd: Arc<ProtectionDomain>,
    _ctx: Arc<DeviceContext>,
}

impl std::fmt::Debug for RdmaTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaTransport").field("me", &self.me).field("peers", &self.peers.len()).finish()
    }
}

fn setup_err(what: &str) -> impl FnOnce(String) -> SetupError + '_ {
    move |e| SetupError::Invalid(format!("rdma {what}: {e}"))
}

pub(super) fn establish(listener: &TcpListener, cfg: &RdmaConfig) -> Result<RdmaTransport, SetupError> {
    let ids: Vec<NodeId> = cfg.peers.iter().map(|p| p.0).collect();
    let peer_ids = check_peers(cfg.me, &ids)?;
    let list = DeviceList::new().map_err(|e| setup_err("device list")(e.to_string()))?;
    let device = match &cfg.device {
        Some(name) => list.iter().find(|d| d.name() == *name),
        None => list.iter().next(),
    }
    .ok_or_else(|| match &cfg.device {
        Some(name) => SetupError::Invalid(format!("no RDMA device named {name:?}")),
        None => SetupError::Invalid("rdma-core found no RDMA device".into()),
    })?;
    let ctx = device.open().map_err(|e| setup_err("open device")(e.to_string()))?;
    let port = ctx.query_port(cfg.port).map_err(|e| setup_err("query port")(e.to_string()))?;
    let gid = ctx.query_gid(cfg.port, cfg.gid_index.into()).map_err(|e| setup_err("query GID")(e.to_string()))?;
    let pd = ctx.alloc_pd().map_err(|e| setup_err("protection domain")(e.to_string()))?;
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    let mut regions = Vec::new();
    for spec in &cfg.regions {
        let r = Arc::new(Region::new(spec.len));
        // SAFETY: the region's memory starts at `base_addr` and is `len` bytes long;
        // the transport keeps the `Arc<Region>` next to the memory region and drops
        // the registration first (field order in `regions`), so the memory outlives
        // it. The device writes it only as the peers' RDMA writes, which the
        // ordering contract covers like any transport's remote writes.
        let mr = unsafe { pd.reg_mr(r.base_addr(), r.len(), access) }
            .map_err(|e| setup_err("register memory")(e.to_string()))?;
        regions.push((spec.id, r, mr));
    }
    let depth = cfg.sq_depth.max(2);
    let cq = ctx
        .create_cq_builder()
        .setup_cqe(depth * peer_ids.len().max(1) as u32)
        .build_ex()
        .map_err(|e| setup_err("completion queue")(e.to_string()))?;
    let psn = (std::process::id() ^ (cfg.me.0 << 8)) & 0x00ff_ffff;
    let mut qps = Vec::new();
    for _ in &peer_ids {
        let handle = GenericCompletionQueue::from(Arc::clone(&cq));
        let mut qp = pd
            .create_qp_builder()
            .setup_max_inline_data(INLINE)
            .setup_send_cq(handle.clone())
            .setup_recv_cq(handle)
            .setup_max_send_wr(depth)
            .setup_max_recv_wr(1)
            .build_ex()
            .map_err(|e| setup_err("queue pair")(e.to_string()))?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init).setup_pkey_index(0).setup_port(cfg.port).setup_access_flags(access);
        qp.modify(&attr).map_err(|e| setup_err("queue pair to INIT")(e.to_string()))?;
        qps.push(qp);
    }
    let mine = |qp: &ExtendedQueuePair| PeerInfo {
        node: cfg.me,
        group: cfg.group,
        qpn: qp.qp_number(),
        psn,
        lid: port.lid(),
        gid: gid.raw,
        regions: regions
            .iter()
            .map(|(id, r, mr)| RemoteRegion {
                id: *id,
                len: r.len() as u64,
                addr: r.base_addr() as u64,
                rkey: mr.rkey(),
            })
            .collect(),
    };
    let infos = exchange(listener, cfg, &peer_ids, |i| mine(&qps[i]).encode())?;
    let mut peers = Vec::new();
    // Peers that did not connect (a partial setup) lose their queue pairs here.
    let connected = qps.into_iter().zip(infos).filter_map(|(qp, info)| info.map(|i| (qp, i)));
    for (i, (mut qp, info)) in connected.enumerate() {
        connect(&mut qp, &info, cfg, psn).map_err(|why| SetupError::Mismatch { peer: info.node, why })?;
        peers.push(Peer {
            id: info.node,
            index: i as u64,
            info,
            qp: Mutex::new(Qp { qp, sig: Signaler::new(depth, cfg.signal_every) }),
            completed: AtomicU64::new(0),
            cut: AtomicBool::new(false),
        });
    }
    let doorbell = Arc::new(Doorbell::new());
    let stop = Arc::new(AtomicBool::new(false));
    let waker = {
        let (bell, stop, every) = (doorbell.clone(), stop.clone(), cfg.wake_every.max(Duration::from_micros(50)));
        std::thread::Builder::new()
            .name("spindle-rdma-wake".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(every);
                    bell.ring();
                }
            })
            .map_err(SetupError::io("wake thread"))?
    };
    Ok(RdmaTransport {
        me: cfg.me,
        regions,
        peers,
        cq,
        polling: Mutex::new(()),
        doorbell,
        events: EventQueue::default(),
        stop,
        waker: Some(waker),
        _pd: pd,
        _ctx: ctx,
    })
}

/// Exchanges handshakes with every peer (connect to lower ids, accept higher);
/// returns the peers' infos in the order of `peer_ids`.
fn exchange(
    listener: &TcpListener,
    cfg: &RdmaConfig,
    peer_ids: &[NodeId],
    mine: impl Fn(usize) -> Vec<u8>,
) -> Result<Vec<Option<PeerInfo>>, SetupError> {
    let deadline = Instant::now() + cfg.timeout;
    let mut got: Vec<Option<PeerInfo>> = vec![None; peer_ids.len()];
    let send = |s: &mut TcpStream, bytes: &[u8]| -> std::io::Result<()> {
        s.write_all(&(bytes.len() as u32).to_le_bytes())?;
        s.write_all(bytes)
    };
    let recv = |s: &mut TcpStream| -> Result<Vec<u8>, String> {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).map_err(|e| e.to_string())?;
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_HANDSHAKE {
            return Err(format!("a handshake of {len} bytes"));
        }
        let mut b = vec![0u8; len];
        s.read_exact(&mut b).map_err(|e| e.to_string())?;
        Ok(b)
    };
    // Lower ids: connect (retrying until they listen).
    for (i, &p) in peer_ids.iter().enumerate().filter(|(_, p)| p.0 < cfg.me.0) {
        let addr = cfg.peers.iter().find(|x| x.0 == p).map(|x| x.1).ok_or(SetupError::Invalid(format!("{p}")))?;
        let s = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Ok(s) => break Some(s),
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Err(_) if cfg.partial => break None,
                Err(_) => return Err(SetupError::Timeout(vec![p])),
            }
        };
        let Some(mut s) = s else { continue }; // partial: this peer starts out missing
        let _ =
            s.set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))));
        send(&mut s, &mine(i)).map_err(SetupError::io(format!("handshake to {p}")))?;
        let b = recv(&mut s).map_err(|why| SetupError::Mismatch { peer: p, why })?;
        let info = PeerInfo::decode(&b, p, cfg.group, &cfg.regions)
            .map_err(|e| SetupError::Mismatch { peer: p, why: e.to_string() })?;
        got[i] = Some(info);
    }
    // Higher ids: accept; a connection with a bad handshake is closed and ignored.
    listener.set_nonblocking(true).map_err(SetupError::io("listener"))?;
    while got.iter().zip(peer_ids).any(|(g, p)| g.is_none() && p.0 > cfg.me.0) {
        if Instant::now() > deadline {
            if cfg.partial {
                break;
            }
            let missing = got.iter().zip(peer_ids).filter(|(g, _)| g.is_none()).map(|(_, p)| *p).collect();
            return Err(SetupError::Timeout(missing));
        }
        let mut s = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) => return Err(SetupError::io("accept")(e)),
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let Ok(b) = recv(&mut s) else { continue };
        let Some(node) = b.get(6..10).map(|n| NodeId(u32::from_le_bytes([n[0], n[1], n[2], n[3]]))) else { continue };
        let Some(i) = peer_ids.iter().position(|p| *p == node && p.0 > cfg.me.0) else { continue };
        if got[i].is_some() {
            continue;
        }
        match PeerInfo::decode(&b, node, cfg.group, &cfg.regions) {
            Ok(info) => {
                if send(&mut s, &mine(i)).is_ok() {
                    got[i] = Some(info);
                }
            }
            Err(e) => tracing::warn!(node = %cfg.me, %node, %e, "refused an rdma handshake"),
        }
    }
    let _ = listener.set_nonblocking(false);
    Ok(got)
}

/// Moves a queue pair to RTR and RTS towards `peer`.
fn connect(qp: &mut ExtendedQueuePair, peer: &PeerInfo, cfg: &RdmaConfig, psn: u32) -> Result<(), String> {
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(Mtu::Mtu1024)
        .setup_dest_qp_num(peer.qpn)
        .setup_rq_psn(peer.psn)
        .setup_max_dest_read_atomic(0)
        .setup_min_rnr_timer(12);
    let mut ah = AddressHandleAttribute::new();
    ah.setup_dest_lid(peer.lid)
        .setup_port(cfg.port)
        .setup_service_level(0)
        .setup_grh_src_gid_index(cfg.gid_index)
        .setup_grh_dest_gid(&Gid { raw: peer.gid })
        .setup_grh_hop_limit(1);
    attr.setup_address_vector(&ah);
    qp.modify(&attr).map_err(|e| format!("queue pair to RTR: {e}"))?;
    let mut attr = QueuePairAttribute::new();
    attr.setup_state(QueuePairState::ReadyToSend)
        .setup_sq_psn(psn)
        .setup_timeout(14)
        .setup_retry_cnt(7)
        .setup_rnr_retry(7)
        .setup_max_read_atomic(0);
    qp.modify(&attr).map_err(|e| format!("queue pair to RTS: {e}"))
}

impl RdmaTransport {
    fn peer(&self, id: NodeId) -> Option<&Peer> {
        self.peers.binary_search_by_key(&id, |p| p.id).ok().map(|i| &self.peers[i])
    }

    fn broken(&self, p: &Peer, reason: String) {
        if !p.cut.swap(true, Ordering::AcqRel) {
            tracing::warn!(node = %self.me, peer = %p.id, %reason, "rdma link broken");
            self.events.push(PeerEvent::Broken { peer: p.id, reason }, &self.doorbell);
        }
    }

    /// Polls the completion queue: completes writes, breaks links whose writes failed.
    fn poll(&self) {
        let Ok(_guard) = self.polling.try_lock() else { return };
        let Ok(mut poller) = self.cq.start_poll() else { return }; // empty
        let mut done: Vec<(u64, u64, u32)> = Vec::new();
        for wc in poller.by_ref() {
            done.push((wc.wr_id() >> SEQ_BITS, wc.wr_id() & ((1 << SEQ_BITS) - 1), wc.status()));
        }
        drop(poller);
        for (index, seq, status) in done {
            let Some(p) = self.peers.get(index as usize) else { continue };
            if status == 0 {
                lock(&p.qp).sig.complete(seq);
                p.completed.fetch_max(seq, Ordering::Release);
            } else {
                self.broken(p, format!("write {seq}: {}", status_text(status)));
            }
        }
    }
}

impl Transport for RdmaTransport {
    fn local_id(&self) -> NodeId {
        self.me
    }

    fn peers(&self) -> Vec<NodeId> {
        self.peers.iter().map(|p| p.id).collect()
    }

    fn region(&self, id: RegionId) -> Option<&Arc<Region>> {
        self.regions.iter().find(|(r, _, _)| *r == id).map(|(_, r, _)| r)
    }

    fn post_write(&self, peer: NodeId, op: WriteOp) -> Result<u64, WriteError> {
        let p = self.peer(peer).ok_or(WriteError::UnknownPeer(peer))?;
        if p.cut.load(Ordering::Acquire) {
            return Err(WriteError::Disconnected(peer));
        }
        let (_, local, mr) =
            self.regions.iter().find(|(r, _, _)| *r == op.region).ok_or(WriteError::UnknownRegion(op.region))?;
        let remote = p.info.regions.iter().find(|r| r.id == op.region).ok_or(WriteError::UnknownRegion(op.region))?;
        local.check_range(op.src_offset as u64, op.len as u64)?;
        if op.dst_offset as u64 + op.len as u64 > remote.len {
            return Err(WriteError::Range(crate::region::RangeError {
                offset: op.dst_offset as u64,
                len: op.len as u64,
                region_len: remote.len,
            }));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut q = lock(&p.qp);
            let (seq, signal) = match q.sig.post(op.signaled) {
                Ok(x) => x,
                Err(QueueFull) => {
                    drop(q);
                    if Instant::now() > deadline {
                        self.broken(p, "the send queue stayed full for 5 s".into());
                        return Err(WriteError::Disconnected(peer));
                    }
                    self.poll();
                    std::hint::spin_loop();
                    continue;
                }
            };
            let mut flags = if signal { WorkRequestFlags::Signaled } else { WorkRequestFlags::none() };
            let inline = op.len <= INLINE as usize;
            let mut copy = [0u8; INLINE as usize];
            if inline {
                flags |= WorkRequestFlags::Inline;
                local.read_bytes(op.src_offset, &mut copy[..op.len]);
            }
            let mut guard = q.qp.start_post_send();
            let wr = guard
                .construct_wr((p.index << SEQ_BITS) | seq, flags)
                .setup_write(remote.rkey, remote.addr + op.dst_offset as u64);
            if inline {
                wr.setup_inline_data(&copy[..op.len]);
            } else {
                // SAFETY: `[src_offset, src_offset + len)` was checked to lie inside
                // the registered region, whose memory outlives the transport's
                // registration; the device reads it for the write.
                unsafe { wr.setup_sge(mr.lkey(), (local.base_addr() + op.src_offset) as u64, op.len as u32) };
            }
            return match guard.post() {
                Ok(()) => Ok(seq),
                Err(e) => {
                    drop(q);
                    self.broken(p, format!("post: {e}"));
                    Err(WriteError::Disconnected(peer))
                }
            };
        }
    }

    fn flush(&self) {
        // Writes are on their way once posted; completions are collected here.
        self.poll();
    }

    fn completed(&self, peer: NodeId) -> u64 {
        self.poll();
        self.peer(peer).map_or(0, |p| p.completed.load(Ordering::Acquire))
    }

    fn disconnect(&self, peer: NodeId) {
        let Some(p) = self.peer(peer) else { return };
        p.cut.store(true, Ordering::Release);
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Error);
        if let Err(e) = lock(&p.qp).qp.modify(&attr) {
            tracing::warn!(node = %self.me, %peer, %e, "could not move the queue pair to the error state");
        }
    }

    fn doorbell(&self) -> &Arc<Doorbell> {
        &self.doorbell
    }

    fn drain_events(&self, out: &mut Vec<PeerEvent>) {
        self.events.drain(out)
    }
}

impl Drop for RdmaTransport {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.waker.take() {
            let _ = w.join();
        }
    }
}
