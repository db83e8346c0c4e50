//! What a member reports of the group to an operator's tool (the data of
//! [`crate::group::report`], which answers and asks; here apart so that the wire
//! format can name it).

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// The group as one member sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    /// The member that answered.
    pub node: u32,
    /// Its current view (none while it has not installed one).
    pub view: Option<u64>,
    /// The view's members, in rank order.
    pub members: Vec<MemberStatus>,
    /// Messages it delivered since it started.
    pub delivered: u64,
    /// Views it installed since its first.
    pub views_installed: u64,
    /// Client sessions it serves.
    pub clients: u64,
    /// Whether it stopped (it answers until it exits).
    pub stopped: bool,
}

/// One member of the view, as the answering member sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    /// Its node id.
    pub node: u32,
    /// Its control address, if the answering member knows it.
    pub addr: Option<SocketAddr>,
    /// This view's messages it delivered, summed over the subgroups it shares with
    /// the answering member (none if it shares none).
    pub delivered: Option<u64>,
    /// How many fewer than the member furthest ahead in those subgroups (the
    /// largest such gap over the subgroups; none if it shares none).
    pub lag: Option<u64>,
}
