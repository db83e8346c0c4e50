//! Who the members are and where they listen, and the joiners waiting for the view
//! that adds them.

use crate::link::Link;
use crate::view::View;
use crate::wire::MemberInfo;
use spindle_sst::sync::lock;
use spindle_sst::transport::{GoneProbe, NodeId};
use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::Duration;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Directory {
    me: NodeId,
    members: Mutex<HashMap<NodeId, MemberInfo>>,
    /// Joiners this node took, each with the connection their view goes out on.
    joiners: Mutex<HashMap<NodeId, Link>>,
    /// Ids given to joiners that asked for one: the next to give, and the last
    /// given per control address (a joiner that asks again before its view is
    /// installed gets the same one).
    grants: Mutex<(u32, HashMap<std::net::SocketAddrV4, u32>)>,
}

impl Directory {
    /// A directory that knows only this node, `me`, whose control plane is `listen`.
    pub(crate) fn new(me: NodeId, listen: SocketAddr) -> Directory {
        Directory {
            me,
            members: Mutex::new(HashMap::from([(me, member_info(me, listen))])),
            joiners: Mutex::new(HashMap::new()),
            grants: Mutex::default(),
        }
    }

    /// Where member `node`'s control plane listens.
    pub(crate) fn control_of(&self, node: NodeId) -> Option<SocketAddr> {
        lock(&self.members).get(&node).map(|m| m.control)
    }

    /// The member whose control plane listens at `addr`, if this node knows one.
    pub(crate) fn node_at(&self, addr: SocketAddr) -> Option<NodeId> {
        lock(&self.members).iter().find(|(_, m)| m.control == addr).map(|(n, _)| *n)
    }

    /// The control addresses of every member this node knows but itself (where a
    /// removed node asks to be taken back).
    pub(crate) fn others(&self) -> Vec<SocketAddr> {
        let me = self.me;
        let mut list: Vec<(NodeId, SocketAddr)> =
            lock(&self.members).iter().filter(|(n, _)| **n != me).map(|(n, m)| (*n, m.control)).collect();
        list.sort();
        list.into_iter().map(|(_, a)| a).collect()
    }

    /// Adds (or updates) `members`, as a joiner's view lists them.
    pub(crate) fn learn(&self, members: &[MemberInfo]) {
        let mut dir = lock(&self.members);
        for m in members {
            dir.insert(NodeId(m.node), m.clone());
        }
    }

    /// Keeps only the members of `next` and adds its joiners (with the control
    /// address they asked from).
    pub(crate) fn enter(&self, next: &View, joins: &[crate::membership::Joiner]) {
        let mut dir = lock(&self.members);
        dir.retain(|n, _| next.rank_of(*n).is_some());
        for j in joins {
            if let Some(a) = j.addr {
                dir.insert(j.node, member_info(j.node, SocketAddr::V4(a)));
            }
        }
    }

    /// The wire form of `view`'s members that this directory knows.
    pub(crate) fn members_of(&self, view: &View) -> Vec<MemberInfo> {
        let dir = lock(&self.members);
        view.members().iter().filter_map(|n| dir.get(n).cloned()).collect()
    }

    /// The data-plane address of each of `peers`; an error names one it lacks.
    pub(crate) fn data_addrs(&self, peers: &[NodeId]) -> Result<Vec<(NodeId, SocketAddr)>, String> {
        let dir = lock(&self.members);
        peers
            .iter()
            .map(|p| {
                let info = dir.get(p).ok_or_else(|| format!("no address known for {p}"))?;
                Ok((*p, info.data.unwrap_or_else(|| data_addr(info.control))))
            })
            .collect()
    }

    /// Tells a view's setup which of the members it waits for are gone: their
    /// control port refuses connections (see [`control_gone`]).
    pub(crate) fn gone_probe(&self) -> GoneProbe {
        let controls: HashMap<NodeId, SocketAddr> = lock(&self.members).iter().map(|(n, m)| (*n, m.control)).collect();
        GoneProbe::new(move |n| controls.get(&n).is_some_and(|a| control_gone(*a)))
    }

    /// Keeps joiner `node`'s connection until the view that adds it.
    /// An id for a joiner at `addr` that asked for one, while `view` is current: at
    /// or above every id the group ever had, and not one given to another joiner
    /// by this node.
    pub(crate) fn grant(&self, addr: std::net::SocketAddrV4, view: &View) -> NodeId {
        let mut g = lock(&self.grants);
        if let Some(&n) = g.1.get(&addr) {
            if n >= view.next_node() && view.rank_of(NodeId(n)).is_none() {
                return NodeId(n); // asked again before its view came
            }
        }
        let n = g.0.max(view.next_node());
        g.0 = n.saturating_add(1);
        g.1.insert(addr, n);
        NodeId(n)
    }

    pub(crate) fn add_joiner(&self, node: NodeId, stream: Link) {
        lock(&self.joiners).insert(node, stream);
    }

    /// Joiner `node`'s connection, taken out.
    pub(crate) fn take_joiner(&self, node: NodeId) -> Option<Link> {
        lock(&self.joiners).remove(&node)
    }

    /// Drops the joiners no view took (they retry).
    pub(crate) fn clear_joiners(&self) {
        lock(&self.joiners).clear();
    }
}

/// The wire form of a member.
pub(crate) fn member_info(node: NodeId, control: SocketAddr) -> MemberInfo {
    MemberInfo { node: node.0, control, data: Some(data_addr(control)) }
}

/// The data-plane address of a member: its control port plus one.
pub(crate) fn data_addr(control: SocketAddr) -> SocketAddr {
    SocketAddr::new(control.ip(), control.port() + 1)
}

/// True if the member whose control plane listens at `addr` is gone: its port refuses
/// connections. A member's control listener lives as long as its process, so a
/// refusal means the process is gone; a timeout or any other error says nothing.
/// A view's setup asks this about the members it is still waiting for, so that it
/// does not wait out its whole deadline for one that died before reaching it.
pub(crate) fn control_gone(addr: SocketAddr) -> bool {
    match TcpStream::connect_timeout(&addr, Duration::from_millis(50)) {
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionRefused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_closed_control_port_means_gone_and_an_open_one_does_not() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        assert!(!control_gone(addr), "a listening member is not gone");
        drop(l);
        assert!(control_gone(addr), "a port that refuses connections: the process is gone");
    }
}
