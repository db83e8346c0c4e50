//! Transports: one-sided writes from this node's registered regions into the same
//! region ids at peers.
//!
//! The [`Transport`] trait is shaped so that an RDMA RC implementation could satisfy
//! it: regions are registered up front and named by a [`RegionId`] (the remote key),
//! whose sizes peers learn at connection setup; [`Transport::post_write`] is an RDMA
//! WRITE; [`Transport::completed`] reports work completions of signaled writes;
//! [`Transport::disconnect`] is tearing down the queue pair.
//!
//! # The ordering guarantee
//! Every transport gives what RDMA RC gives Derecho: writes from one node to one peer
//! are applied in the order posted, and a write is wholly visible before any later
//! write from the same node to the same peer becomes visible. Inside one write no order
//! is promised. So data and the counter that proves it arrived go in separate writes,
//! data first, and readers load the counter with `Acquire`. A writer that dies
//! mid-write may leave any part of that one write applied, and nothing after it.
//!
//! | transport | nodes are | a write is | the peer learns by |
//! |---|---|---|---|
//! | [`mem`] | threads of one process | word copies into the peer's heap region | its doorbell, rung at `flush` |
//! | [`shm`] | processes on one host | word copies into the peer's mapped `/dev/shm` file | the futex doorbell in that file |
//! | [`tcp`] | processes on any hosts | a frame applied in order by the peer's predicate thread (or a fallback thread) | the predicate thread reads its sockets in every pass and sleeps on them with the doorbell |

use crate::doorbell::Doorbell;
use crate::region::{RangeError, Region};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{lock, Arc, Mutex};
use std::fmt;
use thiserror::Error;

// Copies between mapped regions, word by word.
#[cfg(not(loom))]
#[allow(unsafe_code)]
pub(crate) mod direct;
#[cfg(not(loom))]
pub mod frame;
#[cfg(not(loom))]
pub mod mem;
#[cfg(not(loom))]
pub mod rdma;
// Maps peers' /dev/shm files.
#[cfg(not(loom))]
#[allow(unsafe_code)]
pub mod shm;
#[cfg(not(loom))]
pub mod tcp;

#[cfg(not(loom))]
pub use direct::MAX_NODE_ID;

/// A node's identity, unique in a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// A registered region's name, the same on every node (the "remote key").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegionId(pub u16);

/// A region to register: its id and size in bytes (rounded up to a word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionSpec {
    /// The region's id.
    pub id: RegionId,
    /// Size in bytes.
    pub len: usize,
}

/// One one-sided write: `len` bytes at `src_offset` of local region `region` go to
/// `dst_offset` of the peer's region with the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOp {
    /// Region id (same at both ends).
    pub region: RegionId,
    /// Offset in the local region.
    pub src_offset: usize,
    /// Offset in the peer's region.
    pub dst_offset: usize,
    /// Bytes (a multiple of 8).
    pub len: usize,
    /// Ask for a completion (see [`Transport::completed`]).
    pub signaled: bool,
    /// Ring the peer's doorbell when the write lands. Clear it for writes that nobody
    /// waits on (heartbeats: the peer reads them on its own timer), so they do not
    /// wake an idle peer.
    pub wake: bool,
    /// The source range is not written again before the peer has applied this write
    /// (a large message's payload in its sender's arena, a run of ring slots not
    /// reused before every member delivered them): a transport may send it
    /// from where it lies, later, instead of copying it when the write is posted.
    pub stable: bool,
}

impl WriteOp {
    /// A write of `[offset, offset + len)` to the same offsets at the peer (an SST push).
    pub fn same(region: RegionId, offset: usize, len: usize) -> WriteOp {
        WriteOp { region, src_offset: offset, dst_offset: offset, len, signaled: false, wake: true, stable: false }
    }
}

/// Why a write could not be posted.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum WriteError {
    /// Not a peer of this transport.
    #[error("{0} is not a peer")]
    UnknownPeer(NodeId),
    /// The connection to the peer is gone (cut off, failed, or closed).
    #[error("{0} is disconnected")]
    Disconnected(NodeId),
    /// The region is not registered here or at the peer.
    #[error("region {0:?} is not registered at both ends")]
    UnknownRegion(RegionId),
    /// The range does not fit the local or the remote region.
    #[error(transparent)]
    Range(#[from] RangeError),
}

/// Something that happened to a peer's connection; drained by the predicate thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerEvent {
    /// The connection broke: reset, closed, a bad frame, a dead peer process, or this
    /// node cut the peer off. An immediate failure signal for the failure detector.
    Broken {
        /// The peer.
        peer: NodeId,
        /// What happened, for the log.
        reason: String,
    },
}

/// One-sided writes between nodes (see the module docs for the ordering guarantee).
pub trait Transport: Send + Sync + fmt::Debug {
    /// This node.
    fn local_id(&self) -> NodeId;
    /// The peers this transport connects to (sorted, without this node).
    fn peers(&self) -> Vec<NodeId>;
    /// A registered local region.
    fn region(&self, id: RegionId) -> Option<&Arc<Region>>;
    /// Posts a write to `peer`; returns its sequence number on that link (1, 2, ...).
    /// `mem` and `shm` apply it before returning; the peer is told at [`Transport::flush`].
    fn post_write(&self, peer: NodeId, op: WriteOp) -> Result<u64, WriteError>;
    /// Sends everything posted and rings the peers that got writes.
    fn flush(&self);
    /// Sends what is still queued, for up to `within`, before the transport is
    /// dropped: a node leaving a view lets its last writes (its acknowledgement of
    /// the next view, behind a large payload) reach the peers before its links
    /// close. The default flushes once (`mem`, `shm` and `rdma` queue nothing).
    fn drain(&self, within: std::time::Duration) {
        let _ = within;
        self.flush();
    }
    /// The sequence number of the last signaled write to `peer` known to be applied
    /// there (and therefore every write before it); 0 if none.
    fn completed(&self, peer: NodeId) -> u64;
    /// Waits until `completed(peer) >= seq` or `deadline`; true if it completed.
    /// The default spins briefly, then sleeps 20 µs at a time; a transport whose
    /// completions arrive on a thread of its own (`tcp`) wakes the waiter instead.
    fn wait_completed(&self, peer: NodeId, seq: u64, deadline: std::time::Instant) -> bool {
        let backoff = crossbeam_utils::Backoff::new();
        loop {
            if self.completed(peer) >= seq {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            if backoff.is_completed() {
                std::thread::sleep(std::time::Duration::from_micros(20));
            } else {
                backoff.snooze();
            }
        }
    }
    /// Cuts `peer` off: after this returns no more writes from it are applied here and
    /// none are sent to it. Idempotent.
    fn disconnect(&self, peer: NodeId);
    /// Applies what peers sent that has arrived, without blocking, on the calling
    /// thread (the driver: the node's predicate thread, once per pass). True if
    /// anything was applied. Transports whose writes land by themselves (`mem`,
    /// `shm`, `rdma`) have nothing to do here (the default).
    fn poll_receive(&self) -> bool {
        false
    }
    /// Sleeps until the doorbell rings after `ticket` was taken, something arrives
    /// for [`Transport::poll_receive`], or `timeout` passes. The default sleeps on
    /// the doorbell; `tcp` sleeps on its sockets and the doorbell at once.
    fn park(&self, ticket: crate::doorbell::Ticket, timeout: Option<std::time::Duration>) {
        self.doorbell().wait(ticket, timeout)
    }
    /// A driver (a predicate thread) calls [`Transport::poll_receive`] and
    /// [`Transport::park`] from now on, until [`Transport::detach_driver`]. Without
    /// one, a transport that needs receiving (`tcp`) does it on a thread of its own.
    fn attach_driver(&self) {}
    /// The driver stops (see [`Transport::attach_driver`]).
    fn detach_driver(&self) {}
    /// A count that grows whenever bytes arrive from `peer` (0 where writes land in
    /// place without this node's help: `mem`, `shm`, `rdma`). A failure detector
    /// takes a peer it keeps hearing from as alive even while its heartbeat waits
    /// behind a large write on the same stream (`tcp`).
    fn heard(&self, _peer: NodeId) -> u64 {
        0
    }
    /// The doorbell rung when a peer's write lands or an event is queued.
    fn doorbell(&self) -> &Arc<Doorbell>;
    /// Moves queued peer events into `out`. Cheap when there are none.
    fn drain_events(&self, out: &mut Vec<PeerEvent>);
    /// A cheap liveness probe the predicate thread calls on its timer (the `shm`
    /// transport checks that peer processes still exist). Queues events.
    fn check_peers(&self) {}
    /// Where this node maps its peers' memory (`mem`, `shm`): `peer`'s region `id`, to
    /// read its rows in place (see [`crate::publish`]). `None` where rows arrive as
    /// copies (`tcp`), the default.
    fn peer_view(&self, _peer: NodeId, _id: RegionId) -> Option<Arc<crate::publish::PeerView>> {
        None
    }
    /// Publishes `op` once in this node's own memory (`src_offset` to `dst_offset` of
    /// region `op.region`, the table's publication row) for `targets`, which read it in
    /// place through their [`Transport::peer_view`]; rings them at [`Transport::flush`]
    /// if `op.wake`. Returns (targets reached, targets refused). Only for transports
    /// with peer views; the default posts `op`'s source range to each target as an
    /// ordinary write.
    fn publish(&self, op: WriteOp, targets: &mut dyn Iterator<Item = NodeId>) -> (u64, u64) {
        let op = WriteOp { dst_offset: op.src_offset, ..op };
        let (mut ok, mut err) = (0, 0);
        for peer in targets {
            match self.post_write(peer, op) {
                Ok(_) => ok += 1,
                Err(_) => err += 1,
            }
        }
        (ok, err)
    }
}

/// A queue of [`PeerEvent`]s with a lock-free emptiness check.
#[cfg_attr(loom, allow(dead_code))]
#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    pending: AtomicBool,
    events: Mutex<Vec<PeerEvent>>,
}

#[cfg_attr(loom, allow(dead_code))]
impl EventQueue {
    pub(crate) fn push(&self, ev: PeerEvent, bell: &Doorbell) {
        lock(&self.events).push(ev);
        self.pending.store(true, Ordering::Release);
        bell.ring();
    }
    pub(crate) fn drain(&self, out: &mut Vec<PeerEvent>) {
        if self.pending.load(Ordering::Acquire) {
            self.pending.store(false, Ordering::Relaxed);
            out.append(&mut lock(&self.events));
        }
    }
}

/// Errors setting a transport up.
#[derive(Debug, Error)]
pub enum SetupError {
    /// A peer did not show up before the deadline.
    #[error("timed out waiting for peers {0:?}")]
    Timeout(Vec<NodeId>),
    /// A peer's process is gone (a [`GoneProbe`] said so).
    #[error("peer {0} is gone")]
    Gone(NodeId),
    /// Bad arguments (duplicate ids, this node among its peers, ...).
    #[error("invalid setup: {0}")]
    Invalid(String),
    /// A peer's memory or handshake did not match ours.
    #[error("peer {peer}: {why}")]
    Mismatch {
        /// The peer.
        peer: NodeId,
        /// What differed.
        why: String,
    },
    /// The host's shared memory has no room for this node's segment header (a
    /// full `/dev/shm`; see [`crate::region::Region::reserve`]).
    #[error("{0}")]
    NoRoom(crate::region::ReserveError),
    /// An operating-system error.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Tells a setup that a peer it is waiting for is gone for good (its process no longer
/// exists), so the setup stops waiting for it instead of running into its deadline.
/// Asked at most every [`GoneProbe::EVERY`] per missing peer; "don't know" is `false`.
/// A wrong `true` only leaves that peer out, as a missed deadline would.
#[derive(Clone)]
pub struct GoneProbe(std::sync::Arc<dyn Fn(NodeId) -> bool + Send + Sync>);

impl GoneProbe {
    /// How often a setup asks about one missing peer.
    pub const EVERY: std::time::Duration = std::time::Duration::from_millis(50);

    /// A probe from a function of the peer.
    pub fn new(f: impl Fn(NodeId) -> bool + Send + Sync + 'static) -> GoneProbe {
        GoneProbe(std::sync::Arc::new(f))
    }

    /// True if `peer` is known to be gone.
    pub fn is_gone(&self, peer: NodeId) -> bool {
        (self.0)(peer)
    }
}

impl std::fmt::Debug for GoneProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GoneProbe")
    }
}

/// Asks `probe` about `peer` if `last` is at least [`GoneProbe::EVERY`] old (and then
/// resets it); false without a probe.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) fn probe_gone(probe: Option<&GoneProbe>, peer: NodeId, last: &mut std::time::Instant) -> bool {
    let Some(p) = probe else { return false };
    if last.elapsed() < GoneProbe::EVERY {
        return false;
    }
    *last = std::time::Instant::now();
    p.is_gone(peer)
}

#[cfg_attr(loom, allow(dead_code))]
impl SetupError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> SetupError {
        let context = context.into();
        move |source| SetupError::Io { context, source }
    }
}

/// Checks a peer list: sorted copy, without duplicates or `me`.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) fn check_peers(me: NodeId, peers: &[NodeId]) -> Result<Vec<NodeId>, SetupError> {
    let mut p = peers.to_vec();
    p.sort();
    if p.windows(2).any(|w| w[0] == w[1]) {
        return Err(SetupError::Invalid("duplicate peer id".into()));
    }
    if p.contains(&me) {
        return Err(SetupError::Invalid(format!("{me} is listed as its own peer")));
    }
    Ok(p)
}

/// Checks region specs: no duplicate ids, non-zero sizes.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) fn check_regions(regions: &[RegionSpec]) -> Result<(), SetupError> {
    for (i, r) in regions.iter().enumerate() {
        if r.len == 0 {
            return Err(SetupError::Invalid(format!("region {:?} has size 0", r.id)));
        }
        if regions[..i].iter().any(|o| o.id == r.id) {
            return Err(SetupError::Invalid(format!("region {:?} registered twice", r.id)));
        }
    }
    Ok(())
}
