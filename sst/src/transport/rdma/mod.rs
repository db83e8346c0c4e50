//! The `rdma` transport: one reliable-connection (RC) queue pair per peer, and a
//! write is an `IBV_WR_RDMA_WRITE` straight into the peer's registered region, on
//! the `sideway` crate (rdma-core's verbs). Built with the cargo feature `rdma`;
//! without it, `RdmaListener::establish` says so.
//!
//! **Not run on hardware.** The machines this project is developed on have no RDMA
//! device (their kernel has no InfiniBand support, so not even a soft-RoCE `rxe`
//! device can be made): the device code below is built and clippy-checked in CI,
//! the parts that need no device ([`handshake`], [`schedule`]) are unit-tested, and
//! the transport suite (`sst/tests/transports.rs`) runs over `rdma` where a device
//! exists and says why it skips where none does.
//!
//! - **Setup.** Each node registers every region (local write and remote write),
//!   creates one completion queue and one RC queue pair per peer, and exchanges a
//!   [`handshake::PeerInfo`] (address, remote key, queue pair number, GID per
//!   region) with each peer over a TCP connection: node `i` connects to the peers
//!   with lower ids and accepts the others, like the `tcp` transport. Then each
//!   queue pair goes INIT → RTR → RTS.
//! - **Writes.** `post_write` posts an RDMA WRITE of the source range to the same
//!   region at the peer (inline below the device's inline limit, copied out of the
//!   region word by word first: no byte slice is formed over region memory).
//!   Posts are unsignaled except every k-th and those the caller asked a
//!   completion for ([`schedule::Signaler`]), so the send queue never overflows;
//!   `flush` polls the completion queue, and a signaled completion completes that
//!   write and every earlier one to the same peer.
//! - **Ordering.** RC delivers a queue pair's writes in posting order, and a write
//!   is placed in the target's memory before a later write of the same queue pair
//!   is (InfiniBand Architecture Specification, vol. 1, ch. 9.5, "Transaction
//!   ordering"; the ordering Derecho's SST relies on). The receiver loads the guard
//!   word with Acquire before it reads the data (`spindle_sst::region`), so a guard written
//!   after its data is never seen before it. Inside one write no order is promised,
//!   as on every transport.
//! - **Failures.** A completion with an error status, or a post the queue pair
//!   refuses, breaks the link: a `PeerEvent::Broken` (with the status's meaning,
//!   [`schedule::status_text`]) goes to the predicate thread, as a tcp reset does.
//!   `disconnect` moves the queue pair to the error state: the peer's writes on it
//!   are no longer accepted here, and nothing more is sent.
//! - **The doorbell.** An RDMA write does not wake the target's CPU. A busy
//!   predicate thread polls and sees writes at once; an idle one sleeps, so this
//!   transport rings its own doorbell every `wake_every` (default 1 ms): an idle
//!   node's first reaction to a write is up to that late, and the wake-ups cost an
//!   idle node some CPU. The alternative, a write-with-immediate to a receive
//!   queue watched by a blocking completion channel, wakes the target exactly when
//!   data arrives but costs a receive per woken write; it is not built, and the
//!   periodic wake is not measured (no device here).
//! - **Devices.** `device` (default: the first), `port` (default 1) and
//!   `gid_index` (default 0; RoCE v2 over IPv4 is often index 1 or 3) come from
//!   [`RdmaConfig`]; a missing device or missing libraries is a setup error that
//!   names what is missing.

pub mod handshake;
pub mod schedule;

// Registers memory with the device and posts writes from it.
#[cfg(feature = "rdma")]
#[allow(unsafe_code)]
mod device;

use super::{NodeId, RegionSpec, SetupError};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

/// How to connect an `rdma` node to its peers.
#[derive(Debug, Clone)]
pub struct RdmaConfig {
    /// This node.
    pub me: NodeId,
    /// Every peer's setup address (where its [`RdmaListener`] listens).
    pub peers: Vec<(NodeId, SocketAddr)>,
    /// A number naming the group (peers of another group are refused).
    pub group: u64,
    /// Regions to register (the same at every node).
    pub regions: Vec<RegionSpec>,
    /// The device's name (`ibv_devices`); the first device if `None`.
    pub device: Option<String>,
    /// The device port.
    pub port: u8,
    /// The GID table index of the port.
    pub gid_index: u8,
    /// How long setup waits for the peers.
    pub timeout: Duration,
    /// How often the transport rings its own doorbell (see the module docs).
    pub wake_every: Duration,
    /// Send queue depth per queue pair.
    pub sq_depth: u32,
    /// Signal at least every this many posts.
    pub signal_every: u32,
    /// Start without the peers that have not connected by the deadline (the Group
    /// runtime's setup of a view: they start out suspected) instead of failing.
    pub partial: bool,
}

impl RdmaConfig {
    /// The defaults: first device, port 1, GID index 0, 10 s setup, a wake every
    /// millisecond, 512-deep send queues signalled every 64 posts.
    pub fn new(me: NodeId, peers: Vec<(NodeId, SocketAddr)>, group: u64, regions: Vec<RegionSpec>) -> RdmaConfig {
        RdmaConfig {
            me,
            peers,
            group,
            regions,
            device: None,
            port: 1,
            gid_index: 0,
            timeout: Duration::from_secs(10),
            wake_every: Duration::from_millis(1),
            sq_depth: 512,
            signal_every: 64,
            partial: false,
        }
    }
}

/// The setup listener of an `rdma` node (a TCP socket for the handshakes).
#[derive(Debug)]
pub struct RdmaListener {
    #[cfg_attr(not(feature = "rdma"), allow(dead_code))]
    inner: TcpListener,
    addr: SocketAddr,
}

/// Binds the setup listener.
pub fn bind(addr: SocketAddr) -> Result<RdmaListener, SetupError> {
    let inner = TcpListener::bind(addr).map_err(SetupError::io(format!("bind {addr}")))?;
    let addr = inner.local_addr().map_err(SetupError::io("local address"))?;
    Ok(RdmaListener { inner, addr })
}

impl RdmaListener {
    /// Where peers reach this node's setup.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets up a transport (see the module docs); a listener serves one setup at
    /// a time, any number of times (the Group runtime sets up one per view).
    #[cfg(feature = "rdma")]
    pub fn establish(&self, cfg: &RdmaConfig) -> Result<RdmaTransport, SetupError> {
        device::establish(&self.inner, cfg)
    }

    /// Sets up the transport as a trait object; without the `rdma` feature, an
    /// error that says so.
    pub fn establish_dyn(&self, cfg: &RdmaConfig) -> Result<std::sync::Arc<dyn super::Transport>, SetupError> {
        #[cfg(feature = "rdma")]
        {
            Ok(std::sync::Arc::new(self.establish(cfg)?))
        }
        #[cfg(not(feature = "rdma"))]
        {
            let _ = cfg;
            Err(SetupError::Invalid(NO_FEATURE.into()))
        }
    }
}

#[cfg(not(feature = "rdma"))]
const NO_FEATURE: &str = "this build has no RDMA support: rebuild with `--features rdma`";

/// The device settings from the environment, for programs and tests that set up
/// nodes themselves: `SPINDLE_RDMA_DEVICE` (a device name), `SPINDLE_RDMA_PORT`
/// and `SPINDLE_RDMA_GID` (a GID index); unset or unparsable values keep the
/// defaults.
pub fn config_from_env(mut cfg: RdmaConfig) -> RdmaConfig {
    if let Ok(d) = std::env::var("SPINDLE_RDMA_DEVICE") {
        cfg.device = Some(d);
    }
    if let Some(p) = std::env::var("SPINDLE_RDMA_PORT").ok().and_then(|p| p.parse().ok()) {
        cfg.port = p;
    }
    if let Some(g) = std::env::var("SPINDLE_RDMA_GID").ok().and_then(|g| g.parse().ok()) {
        cfg.gid_index = g;
    }
    cfg
}

/// A number naming a group, from its name (both ends of a handshake compare it).
pub fn group_number(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

#[cfg(feature = "rdma")]
pub use device::RdmaTransport;

/// Whether this build can open an RDMA device: `Ok(name)` of the first device,
/// or why not (no `rdma` feature, no rdma-core libraries, no device).
pub fn available() -> Result<String, String> {
    #[cfg(feature = "rdma")]
    {
        device::first_device()
    }
    #[cfg(not(feature = "rdma"))]
    {
        Err(NO_FEATURE.into())
    }
}
