//! The `mem` transport: nodes are threads of one process.
//!
//! Each node's memory is a heap segment laid out like an `shm` file, and a write is a
//! word copy straight into the peer's region, so `mem` exercises the same write path
//! and gates as `shm`. Nodes find each other through a shared [`MemFabric`].
//!
//! ```
//! use spindle_sst::transport::{mem::MemFabric, NodeId, RegionId, RegionSpec, Transport, WriteOp};
//! use std::time::Duration;
//! let fabric = MemFabric::new();
//! let regions = [RegionSpec { id: RegionId(0), len: 64 }];
//! let f2 = fabric.clone();
//! let b = std::thread::spawn(move || f2.join(NodeId(1), &[NodeId(0)], &regions, Duration::from_secs(5)).unwrap());
//! let a = fabric.join(NodeId(0), &[NodeId(1)], &regions, Duration::from_secs(5)).unwrap();
//! let b = b.join().unwrap();
//! a.region(RegionId(0)).unwrap().apply_write(8, &[42]);
//! a.post_write(NodeId(1), WriteOp::same(RegionId(0), 8, 8)).unwrap();
//! a.flush();
//! assert_eq!(b.region(RegionId(0)).unwrap().load(8, spindle_sst::sync::atomic::Ordering::Acquire), 42);
//! ```

use super::direct::{segment_bytes, DirectTransport, Flavor, NodeMem, MAX_NODE_ID};
use super::{check_peers, NodeId, RegionSpec, SetupError};
use crate::region::Segment;
use crate::sync::{lock, Arc, Condvar, Mutex};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Where `mem` nodes of one process meet.
#[derive(Debug, Default)]
pub struct MemFabric {
    nodes: Mutex<HashMap<NodeId, Arc<NodeMem>>>,
    joined: Condvar,
}

impl MemFabric {
    /// A new, empty fabric.
    pub fn new() -> Arc<MemFabric> {
        Arc::new(MemFabric::default())
    }

    /// Registers node `me` with `regions` and waits (up to `timeout`) until all
    /// `peers` have joined too.
    pub fn join(
        &self,
        me: NodeId,
        peers: &[NodeId],
        regions: &[RegionSpec],
        timeout: Duration,
    ) -> Result<DirectTransport, SetupError> {
        let peers = check_peers(me, peers)?;
        if me.0 >= MAX_NODE_ID || peers.iter().any(|p| p.0 >= MAX_NODE_ID) {
            return Err(SetupError::Invalid(format!("mem node ids must be below {MAX_NODE_ID}")));
        }
        let local = Arc::new(NodeMem::create(Segment::heap(segment_bytes(regions)), regions)?);
        let deadline = Instant::now() + timeout;
        let mut nodes = lock(&self.nodes);
        if nodes.contains_key(&me) {
            return Err(SetupError::Invalid(format!("{me} already joined this fabric")));
        }
        nodes.insert(me, local.clone());
        self.joined.notify_all();
        loop {
            let missing: Vec<NodeId> = peers.iter().filter(|p| !nodes.contains_key(p)).copied().collect();
            if missing.is_empty() {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                nodes.remove(&me);
                return Err(SetupError::Timeout(missing));
            }
            nodes = match self.joined.wait_timeout(nodes, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        let peer_mems = peers.iter().map(|p| (*p, nodes[p].clone())).collect();
        drop(nodes);
        DirectTransport::new(me, local, peer_mems, Flavor::Mem)
    }
}
