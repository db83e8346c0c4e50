//! The write path shared by `mem` and `shm`: a node's memory is one segment (a heap
//! block or a mapped file) holding a header and its regions, and a peer writes into it
//! directly.
//!
//! Header layout (bytes):
//! ```text
//!   0 magic   8 version   16 pid   24 region count
//!   32 + 24*i  region i: id, offset, length          (i < MAX_REGIONS)
//!   2048       doorbell futex word
//!   2304       publication sequence word (see `crate::publish`)
//!   4096 + 64*w  gate of writer w: busy word, cut word   (w < MAX_NODE_ID)
//! ```
//!
//! # Pushes: one copy, read in place
//! A table made with `Table::create_shared` reads each peer's row straight from the
//! peer's memory and pushes through [`Transport::publish`]: one copy into this node's
//! own publication row, whatever the group size (`crate::publish`). Writes posted with
//! [`Transport::post_write`] still copy into the peer's memory, for callers that
//! address a peer's region directly.
//!
//! The gate makes [`Transport::disconnect`] real for writers that can store into our
//! memory at will. A writer stores `busy = 1` and then loads `cut` (both `SeqCst`),
//! writes, and stores `busy = 0`; `disconnect` stores `cut = 1` and then waits for
//! `busy == 0`. By the single total order of `SeqCst` operations, either the writer
//! sees `cut` and stops, or its write finished before `disconnect` returns (Dekker).
//! A writer is cooperative code of this crate: a process that maps the file with other
//! code could ignore the gate, which RDMA's revocable keys would prevent.

use super::{
    check_peers, EventQueue, NodeId, PeerEvent, RegionId, RegionSpec, SetupError, Transport, WriteError, WriteOp,
};
use crate::doorbell::Doorbell;
use crate::publish::PeerView;
use crate::region::{round_up, Region, Segment, PAGE, WORD};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{lock, Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"SPNDLSST");
pub(crate) const VERSION: u64 = 2;
/// Regions a node's segment holds (the tcp and rdma transports' limit too: a
/// group with several replicated logs, three regions each, needs dozens).
pub(crate) const MAX_REGIONS: usize = 64;
/// Node ids of `mem` and `shm` nodes must be below this (one gate per writer).
pub const MAX_NODE_ID: u32 = 1024;
const REGIONS_OFF: usize = 32;
const DOORBELL_OFF: usize = 2048;
const PUB_SEQ_OFF: usize = 2304;
const GATES_OFF: usize = 4096;
const _: () = assert!(REGIONS_OFF + 24 * MAX_REGIONS <= DOORBELL_OFF, "the region table ends before the doorbell");
const GATE_STRIDE: usize = 64;
pub(crate) const HEADER_BYTES: usize = (GATES_OFF + GATE_STRIDE * MAX_NODE_ID as usize).div_ceil(PAGE) * PAGE;
/// How long `disconnect` waits for a writer that is inside a write.
const CUT_WAIT: Duration = Duration::from_secs(1);

/// Bytes a node's segment needs for `regions`.
pub(crate) fn segment_bytes(regions: &[RegionSpec]) -> usize {
    HEADER_BYTES + regions.iter().map(|r| round_up(r.len, PAGE)).sum::<usize>()
}

/// A node's memory: header (doorbell, gates) and regions.
#[derive(Debug)]
pub(crate) struct NodeMem {
    seg: Arc<Segment>,
    regions: Vec<(RegionId, Arc<Region>)>,
    doorbell: Arc<Doorbell>,
    pid: u64,
}

impl NodeMem {
    /// Lays out a fresh (zeroed) segment and writes the header.
    pub(crate) fn create(seg: Segment, regions: &[RegionSpec]) -> Result<NodeMem, SetupError> {
        super::check_regions(regions)?;
        if regions.len() > MAX_REGIONS {
            return Err(SetupError::Invalid(format!("at most {MAX_REGIONS} regions")));
        }
        // The header's pages first, where the segment is a file (`shm`): a full
        // /dev/shm is this error, not a SIGBUS at the first store below.
        seg.populate(0, HEADER_BYTES).map_err(SetupError::NoRoom)?;
        let seg = Arc::new(seg);
        let hdr = seg.words(0, HEADER_BYTES / WORD);
        let pid = std::process::id() as u64;
        hdr[1].store(VERSION, Ordering::Relaxed);
        hdr[2].store(pid, Ordering::Relaxed);
        hdr[3].store(regions.len() as u64, Ordering::Relaxed);
        let mut off = HEADER_BYTES;
        let mut out = Vec::new();
        for (i, r) in regions.iter().enumerate() {
            let len = round_up(r.len, WORD);
            let e = REGIONS_OFF / WORD + 3 * i;
            hdr[e].store(r.id.0 as u64, Ordering::Relaxed);
            hdr[e + 1].store(off as u64, Ordering::Relaxed);
            hdr[e + 2].store(len as u64, Ordering::Relaxed);
            out.push((r.id, Arc::new(Region::in_segment(seg.clone(), off, len))));
            off += round_up(len, PAGE);
        }
        // The magic goes last: a peer that sees it sees a complete header.
        hdr[0].store(MAGIC, Ordering::Release);
        let doorbell = Arc::new(Doorbell::in_segment(seg.clone(), DOORBELL_OFF));
        Ok(NodeMem { seg, regions: out, doorbell, pid })
    }

    /// Reads and validates the header of a peer's segment (its file may be anything).
    pub(crate) fn attach(seg: Segment, peer: NodeId) -> Result<NodeMem, SetupError> {
        let bad = |why: String| SetupError::Mismatch { peer, why };
        if seg.len() < HEADER_BYTES {
            return Err(bad(format!("segment of {} bytes has no full header", seg.len())));
        }
        let seg = Arc::new(seg);
        let hdr = seg.words(0, HEADER_BYTES / WORD);
        if hdr[0].load(Ordering::Acquire) != MAGIC {
            return Err(bad("bad magic".into()));
        }
        let version = hdr[1].load(Ordering::Relaxed);
        if version != VERSION {
            return Err(bad(format!("protocol version {version}, we speak {VERSION}")));
        }
        let pid = hdr[2].load(Ordering::Relaxed);
        let n = hdr[3].load(Ordering::Relaxed) as usize;
        if n > MAX_REGIONS {
            return Err(bad(format!("{n} regions")));
        }
        let mut regions = Vec::new();
        for i in 0..n {
            let e = REGIONS_OFF / WORD + 3 * i;
            let id = hdr[e].load(Ordering::Relaxed);
            let off = hdr[e + 1].load(Ordering::Relaxed);
            let len = hdr[e + 2].load(Ordering::Relaxed);
            let fits = off.checked_add(len).is_some_and(|end| end <= seg.len() as u64);
            if id > u16::MAX as u64
                || off % PAGE as u64 != 0
                || len % WORD as u64 != 0
                || !fits
                || off < HEADER_BYTES as u64
            {
                return Err(bad(format!("region entry {i} is invalid")));
            }
            regions.push((RegionId(id as u16), Arc::new(Region::in_segment(seg.clone(), off as usize, len as usize))));
        }
        let doorbell = Arc::new(Doorbell::in_segment(seg.clone(), DOORBELL_OFF));
        Ok(NodeMem { seg, regions, doorbell, pid })
    }

    pub(crate) fn region(&self, id: RegionId) -> Option<&Arc<Region>> {
        self.regions.iter().find(|(r, _)| *r == id).map(|(_, r)| r)
    }

    pub(crate) fn pid(&self) -> u64 {
        self.pid
    }

    /// The publication sequence word (written by the owner only).
    fn pub_seq(&self) -> &AtomicU64 {
        &self.seg.words(PUB_SEQ_OFF, 1)[0]
    }

    /// The (busy, cut) words of writer `w`'s gate.
    fn gate(&self, w: NodeId) -> (&AtomicU64, &AtomicU64) {
        let g = self.seg.words(GATES_OFF + GATE_STRIDE * w.0 as usize, 2);
        (&g[0], &g[1])
    }

    /// Checks that our regions match a peer's (same ids and sizes).
    pub(crate) fn same_regions(&self, other: &NodeMem) -> Result<(), String> {
        for (id, r) in &self.regions {
            match other.region(*id) {
                Some(o) if o.len() == r.len() => {}
                Some(o) => return Err(format!("region {id:?} is {} bytes there, {} here", o.len(), r.len())),
                None => return Err(format!("region {id:?} is missing there")),
            }
        }
        Ok(())
    }
}

#[derive(Debug)]
struct DirectPeer {
    id: NodeId,
    mem: Arc<NodeMem>,
    /// The peer's regions as this node reads them (frozen when it is cut off).
    views: Vec<(RegionId, Arc<PeerView>)>,
    posted: AtomicU64,
    cut: AtomicBool,
    ring: AtomicBool,
}

/// Which flavour of direct transport this is.
#[derive(Debug)]
pub(crate) enum Flavor {
    Mem,
    Shm { path: std::path::PathBuf },
}

/// The `mem`/`shm` transport: writes go straight into peers' memory.
#[derive(Debug)]
pub struct DirectTransport {
    me: NodeId,
    local: Arc<NodeMem>,
    peers: Vec<DirectPeer>,
    events: EventQueue,
    flavor: Flavor,
    /// Serializes publications (the sequence word has one writer at a time).
    publishing: Mutex<()>,
}

impl DirectTransport {
    pub(crate) fn new(
        me: NodeId,
        local: Arc<NodeMem>,
        peers: Vec<(NodeId, Arc<NodeMem>)>,
        flavor: Flavor,
    ) -> Result<Self, SetupError> {
        let ids: Vec<NodeId> = peers.iter().map(|(id, _)| *id).collect();
        check_peers(me, &ids)?;
        for (id, mem) in &peers {
            local.same_regions(mem).map_err(|why| SetupError::Mismatch { peer: *id, why })?;
        }
        let mut peers: Vec<DirectPeer> = peers
            .into_iter()
            .map(|(id, mem)| DirectPeer {
                id,
                views: mem.regions.iter().map(|(r, region)| (*r, Arc::new(PeerView::new(region.clone())))).collect(),
                mem,
                posted: AtomicU64::new(0),
                cut: AtomicBool::new(false),
                ring: AtomicBool::new(false),
            })
            .collect();
        peers.sort_by_key(|p| p.id);
        Ok(DirectTransport { me, local, peers, events: EventQueue::default(), flavor, publishing: Mutex::new(()) })
    }

    fn peer(&self, id: NodeId) -> Option<&DirectPeer> {
        self.peers.binary_search_by_key(&id, |p| p.id).ok().map(|i| &self.peers[i])
    }

    fn report(&self, p: &DirectPeer, reason: &str) {
        if !p.cut.swap(true, Ordering::AcqRel) {
            tracing::warn!(node = %self.me, peer = %p.id, reason, "peer connection broken");
            self.events.push(PeerEvent::Broken { peer: p.id, reason: reason.into() }, &self.local.doorbell);
        }
    }
}

impl Transport for DirectTransport {
    fn local_id(&self) -> NodeId {
        self.me
    }

    fn peers(&self) -> Vec<NodeId> {
        self.peers.iter().map(|p| p.id).collect()
    }

    fn region(&self, id: RegionId) -> Option<&Arc<Region>> {
        self.local.region(id)
    }

    fn post_write(&self, peer: NodeId, op: WriteOp) -> Result<u64, WriteError> {
        let p = self.peer(peer).ok_or(WriteError::UnknownPeer(peer))?;
        if p.cut.load(Ordering::Relaxed) {
            return Err(WriteError::Disconnected(peer));
        }
        let src = self.local.region(op.region).ok_or(WriteError::UnknownRegion(op.region))?;
        let dst = p.mem.region(op.region).ok_or(WriteError::UnknownRegion(op.region))?;
        src.check_range(op.src_offset as u64, op.len as u64)?;
        dst.check_range(op.dst_offset as u64, op.len as u64)?;
        let (busy, cut) = p.mem.gate(self.me);
        busy.store(1, Ordering::SeqCst);
        if cut.load(Ordering::SeqCst) != 0 {
            busy.store(0, Ordering::Release);
            self.report(p, "the peer cut this node off");
            return Err(WriteError::Disconnected(peer));
        }
        src.copy_to(op.src_offset, dst, op.dst_offset, op.len);
        busy.store(0, Ordering::Release);
        if op.wake {
            p.ring.store(true, Ordering::Relaxed);
        }
        Ok(p.posted.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn peer_view(&self, peer: NodeId, id: RegionId) -> Option<Arc<PeerView>> {
        self.peer(peer)?.views.iter().find(|(r, _)| *r == id).map(|(_, v)| v.clone())
    }

    fn publish(&self, op: WriteOp, targets: &mut dyn Iterator<Item = NodeId>) -> (u64, u64) {
        let Some(region) = self.local.region(op.region) else { return (0, targets.count() as u64) };
        if region.check_range(op.src_offset as u64, op.len as u64).is_err()
            || region.check_range(op.dst_offset as u64, op.len as u64).is_err()
        {
            return (0, targets.count() as u64);
        }
        {
            let _one_writer = lock(&self.publishing);
            crate::publish::publish(self.local.pub_seq(), region, op.src_offset, op.dst_offset, op.len);
        }
        let (mut ok, mut err) = (0, 0);
        for id in targets {
            let Some(p) = self.peer(id) else {
                err += 1;
                continue;
            };
            // A peer that cut us off no longer reads our memory; tell the detector.
            if p.cut.load(Ordering::Relaxed) {
                err += 1;
                continue;
            }
            if p.mem.gate(self.me).1.load(Ordering::Acquire) != 0 {
                self.report(p, "the peer cut this node off");
                err += 1;
                continue;
            }
            if op.wake {
                p.ring.store(true, Ordering::Relaxed);
            }
            p.posted.fetch_add(1, Ordering::Relaxed);
            ok += 1;
        }
        (ok, err)
    }

    fn flush(&self) {
        for p in &self.peers {
            if p.ring.load(Ordering::Relaxed) && p.ring.swap(false, Ordering::Relaxed) {
                p.mem.doorbell.ring();
            }
        }
    }

    fn completed(&self, peer: NodeId) -> u64 {
        // Writes are applied before `post_write` returns.
        self.peer(peer).map_or(0, |p| p.posted.load(Ordering::Relaxed))
    }

    fn disconnect(&self, peer: NodeId) {
        let Some(p) = self.peer(peer) else { return };
        p.cut.store(true, Ordering::Release);
        let (busy, cut) = self.local.gate(peer);
        cut.store(1, Ordering::SeqCst);
        let start = Instant::now();
        // Stop reading what the peer publishes: from now on its rows are a snapshot.
        // A dead peer process (shm) that died inside a push is not waited for.
        let gone = || matches!(self.flavor, Flavor::Shm { .. }) && !process_alive(p.mem.pid);
        for (_, v) in &p.views {
            if !v.freeze(p.mem.pub_seq(), start + CUT_WAIT, gone) {
                tracing::warn!(node = %self.me, %peer, "peer inside a publication at cut-off; kept a torn snapshot");
            }
        }
        while busy.load(Ordering::SeqCst) != 0 {
            if start.elapsed() > CUT_WAIT {
                // The writer died inside a write (a torn write; it will write no more)
                // or is stopped; either way we cannot wait for it forever.
                tracing::warn!(node = %self.me, %peer, "peer still inside a write after cut-off");
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    fn doorbell(&self) -> &Arc<Doorbell> {
        &self.local.doorbell
    }

    fn drain_events(&self, out: &mut Vec<PeerEvent>) {
        self.events.drain(out)
    }

    fn check_peers(&self) {
        if !matches!(self.flavor, Flavor::Shm { .. }) {
            return;
        }
        for p in &self.peers {
            if p.cut.load(Ordering::Relaxed) || p.mem.pid == 0 {
                continue;
            }
            if !process_alive(p.mem.pid) {
                self.report(p, "peer process exited");
            }
        }
    }
}

/// True if process `pid` exists and is not a zombie (an exited child that its parent
/// has not reaped yet still answers `kill(pid, 0)`).
pub(crate) fn process_alive(pid: u64) -> bool {
    if pid == 0 || pid > i32::MAX as u64 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; it only checks that the process exists.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if rc != 0 {
        return std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the command name's closing parenthesis.
        Ok(stat) => {
            !matches!(stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()), Some('Z' | 'X'))
        }
        Err(_) => false,
    }
}

impl Drop for DirectTransport {
    fn drop(&mut self) {
        if let Flavor::Shm { path } = &self.flavor {
            let _ = std::fs::remove_file(path);
        }
    }
}
