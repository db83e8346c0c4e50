//! `n` nodes of one group as threads of this process.

use crate::TransportKind;
use spindle_sst::sync::atomic::{AtomicU32, Ordering};
use spindle_sst::transport::{mem::MemFabric, rdma, shm, tcp, NodeId, RegionSpec, SetupError, Transport};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// A group name unique to this process and call (for `/dev/shm` files).
pub fn unique_group(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{tag}{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Every node but `me` with its address (node `i` at `addrs[i]`).
pub(crate) fn others_at(me: NodeId, addrs: &[SocketAddr]) -> Vec<(NodeId, SocketAddr)> {
    addrs.iter().enumerate().map(|(i, a)| (NodeId(i as u32), *a)).filter(|(id, _)| *id != me).collect()
}

pub(crate) fn others(me: NodeId, n: usize) -> Vec<NodeId> {
    (0..n as u32).map(NodeId).filter(|p| *p != me).collect()
}

/// `n` nodes (ids `0..n`) in this process. Removes its `/dev/shm` files when dropped.
#[derive(Debug)]
pub struct LocalGroup {
    /// The nodes' transports, by id.
    pub nodes: Vec<Arc<dyn Transport>>,
    shm_group: Option<String>,
}

impl Drop for LocalGroup {
    fn drop(&mut self) {
        self.nodes.clear();
        if let Some(g) = &self.shm_group {
            shm::remove_group_files(g);
        }
    }
}

/// Sets up `n` nodes of `kind` in this process (each joins on its own thread, as
/// separate processes would).
pub fn local_group(
    kind: TransportKind,
    n: usize,
    regions: &[RegionSpec],
    timeout: Duration,
) -> Result<LocalGroup, SetupError> {
    type Join = Box<dyn FnOnce() -> Result<Arc<dyn Transport>, SetupError> + Send>;
    let mut shm_group = None;
    let joins: Vec<Join> = match kind {
        TransportKind::Mem => {
            let fabric = MemFabric::new();
            (0..n as u32)
                .map(|i| {
                    let (f, r, me) = (fabric.clone(), regions.to_vec(), NodeId(i));
                    Box::new(move || f.join(me, &others(me, n), &r, timeout).map(|t| Arc::new(t) as Arc<dyn Transport>))
                        as Join
                })
                .collect()
        }
        TransportKind::Shm => {
            let g = unique_group("local");
            shm_group = Some(g.clone());
            (0..n as u32)
                .map(|i| {
                    let me = NodeId(i);
                    let cfg = shm::ShmConfig::new(g.clone(), me, others(me, n), regions.to_vec(), timeout);
                    Box::new(move || shm::join(&cfg).map(|t| Arc::new(t) as Arc<dyn Transport>)) as Join
                })
                .collect()
        }
        TransportKind::Tcp => {
            let listeners = (0..n).map(|_| tcp::bind(loopback())).collect::<Result<Vec<_>, _>>()?;
            let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr()).collect();
            listeners
                .into_iter()
                .enumerate()
                .map(|(i, l)| {
                    let me = NodeId(i as u32);
                    let cfg = tcp::TcpConfig {
                        timeout,
                        ..tcp::TcpConfig::new(me, others_at(me, &addrs), 1, regions.to_vec())
                    };
                    Box::new(move || l.establish(&cfg).map(|t| Arc::new(t) as Arc<dyn Transport>)) as Join
                })
                .collect()
        }
        TransportKind::Rdma => {
            let listeners = (0..n).map(|_| rdma::bind(loopback())).collect::<Result<Vec<_>, _>>()?;
            let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr()).collect();
            let group = rdma::group_number(&unique_group("rdma"));
            listeners
                .into_iter()
                .enumerate()
                .map(|(i, l)| {
                    let me = NodeId(i as u32);
                    let base = rdma::RdmaConfig::new(me, others_at(me, &addrs), group, regions.to_vec());
                    let cfg = rdma::config_from_env(rdma::RdmaConfig { timeout, ..base });
                    Box::new(move || l.establish_dyn(&cfg)) as Join
                })
                .collect()
        }
    };
    let handles: Vec<_> = joins.into_iter().map(std::thread::spawn).collect();
    let mut group = LocalGroup { nodes: Vec::new(), shm_group };
    let mut first_err = None;
    for h in handles {
        match h.join().expect("join thread panicked") {
            Ok(t) => group.nodes.push(t),
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(group),
    }
}

pub(crate) fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}
