//! The predicate thread's spin budget when the configuration leaves it out: chosen
//! at each view from the host ([`spindle_sst::spin`]) and how many of the view's
//! members run on it.

use super::directory::Directory;
use crate::config::Transport;
use crate::view::View;
use std::net::{IpAddr, SocketAddr};

pub(crate) use spindle_sst::spin::{auto_spin_us, host_cores};

/// Whether two control addresses are on one host as far as they show: the same
/// address, or both loopback.
fn same_host(a: IpAddr, b: IpAddr) -> bool {
    a == b || (a.is_loopback() && b.is_loopback())
}

/// How many of `view`'s members run on this host: all of them on mem and shm
/// (one host by construction); over tcp and rdma, those whose control address is
/// this member's (`me`), or loopback as it is. A member whose address is not known
/// here counts as elsewhere.
pub(crate) fn members_here(view: &View, transport: Transport, me: SocketAddr, dir: &Directory) -> usize {
    match transport {
        Transport::Mem | Transport::Shm => view.members().len(),
        Transport::Tcp | Transport::Rdma => view
            .members()
            .iter()
            .filter(|n| dir.control_of(**n).is_some_and(|a| same_host(a.ip(), me.ip())))
            .count()
            .max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_are_one_host() {
        assert!(same_host("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()));
        assert!(!same_host("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()));
    }
}
