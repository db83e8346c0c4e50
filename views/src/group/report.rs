//! What a member tells an operator's tool about the group (`spindle status`): the
//! view, its members with their control addresses, and how far each has delivered
//! this view's messages in the subgroups it shares with the member asked, so that
//! a member falling behind shows as lag.

use super::Inner;
use crate::auth::Credentials;
use crate::link::{Link, LinkError};
pub use crate::report::{GroupStatus, MemberStatus};
use crate::wire::Message;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// This member's answer.
pub(crate) fn status(inner: &Arc<Inner>) -> GroupStatus {
    let m = inner.counters.snapshot(0); // its sent count is not reported
    let mut out = GroupStatus {
        node: inner.cfg.node_id,
        view: None,
        members: Vec::new(),
        delivered: m.delivered,
        views_installed: m.views_installed,
        clients: m.clients,
        stopped: inner.status.stopped().is_some(),
    };
    let cur = inner.current.read().unwrap_or_else(|p| p.into_inner());
    let Some(epoch) = cur.as_ref() else { return out };
    out.view = Some(epoch.view.id().0);
    let mut delivered = vec![None::<u64>; epoch.view.members().len()];
    let mut lag = vec![None::<u64>; epoch.view.members().len()];
    for (spec, sub) in epoch.specs.iter().zip(&epoch.subs) {
        let Some(sub) = sub else { continue };
        let counts: Vec<u64> =
            sub.with_core(|c| (0..spec.members.len()).map(|rank| c.member_delivered_total(rank)).collect());
        let most = counts.iter().copied().max().unwrap_or(0);
        for (node, n) in spec.members.iter().zip(counts) {
            if let Some(i) = epoch.view.rank_of(*node) {
                delivered[i] = Some(delivered[i].unwrap_or(0) + n);
                lag[i] = Some(lag[i].unwrap_or(0).max(most - n));
            }
        }
    }
    out.members = epoch
        .view
        .members()
        .iter()
        .enumerate()
        .map(|(i, n)| MemberStatus {
            node: n.0,
            addr: inner.directory.control_of(*n),
            delivered: delivered[i],
            lag: lag[i],
        })
        .collect();
    out
}

/// Why a member's status could not be had.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// No connection (refused, or unreachable).
    #[error("cannot reach {addr}: {source}")]
    Connect {
        /// The address asked.
        addr: SocketAddr,
        /// What failed.
        source: std::io::Error,
    },
    /// The credentials were refused (this side's or the member's).
    #[error("{addr}: {why}")]
    Auth {
        /// The address asked.
        addr: SocketAddr,
        /// What failed.
        why: crate::auth::AuthError,
    },
    /// The member did not answer as one (a closed connection, a malformed or
    /// unexpected frame, or no answer in time).
    #[error("{addr} gave no status: {why}")]
    Answer {
        /// The address asked.
        addr: SocketAddr,
        /// What it sent or failed.
        why: crate::wire::WireError,
    },
    /// It answered with something else (a refusal, say: not this group's
    /// credentials, or a member of another version).
    #[error("{addr} refused the status request")]
    Refused {
        /// The address asked.
        addr: SocketAddr,
    },
}

/// Asks the member at control address `addr` (with the group's credentials, if
/// it has any) how the group is doing, waiting up to `timeout`.
pub fn ask(addr: SocketAddr, timeout: Duration, creds: Option<&Credentials>) -> Result<GroupStatus, StatusError> {
    let mut link = Link::connect(addr, timeout, creds).map_err(|e| match e {
        LinkError::Connect { source, .. } => StatusError::Connect { addr, source },
        LinkError::Auth(why) => StatusError::Auth { addr, why },
    })?;
    let io = |source: std::io::Error| StatusError::Connect { addr, source };
    link.stream.set_read_timeout(Some(timeout)).map_err(io)?;
    link.send(&Message::StatusRequest).map_err(io)?;
    match link.recv() {
        Ok(Message::Status(s)) => Ok(s),
        // A member with credentials refuses one without in a plain frame.
        Ok(Message::JoinRefused { reason }) if creds.is_none() && reason == crate::link::AUTH_REQUIRED => {
            Err(StatusError::Auth { addr, why: crate::auth::AuthError::Required })
        }
        Ok(_) => Err(StatusError::Refused { addr }),
        Err(why) => Err(StatusError::Answer { addr, why }),
    }
}
