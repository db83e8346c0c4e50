//! Why a group did not start, a send did not happen, or a request got no answer.
//! Each error says whether the caller can fix it or this node is done.

use crate::config::ConfigError;
use spindle_sst::transport::NodeId;
use std::net::SocketAddr;
use thiserror::Error;

/// Why a group could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The control port could not be bound.
    #[error("control plane on {addr}: {why}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The error.
        why: String,
    },
    /// The join failed (no member answered in time, or the id is taken).
    #[error("join: {0}")]
    Join(String),
    /// A member refused this node's credentials, or this node its (a wrong
    /// secret, or a secret at one end only): fix the secret files; retrying does
    /// not help.
    #[error("join refused by {contact}: {why}")]
    Auth {
        /// The member that refused.
        contact: SocketAddr,
        /// Why.
        why: crate::auth::AuthError,
    },
    /// The first view's runtime could not be set up.
    #[error("setup: {0}")]
    Setup(String),
    /// The state directory ([`crate::config::Config::state_dir`]) could not be used.
    #[error(transparent)]
    StateDir(#[from] super::restart::StateDirError),
    /// Discovery found the group, but stranded: its members lost the majority of
    /// view `view` and wait for enough of the lost ones to come back. A new member
    /// cannot restore it (only members of that view, started again on their state
    /// directories, can); starting a second group of the name would split it.
    #[error(
        "group `{name}` is stranded: its members lost the majority of view {view}; start one of its lost \
         members again on its state directory, or start this member under another name"
    )]
    Stranded {
        /// The group's name.
        name: String,
        /// The view its members lost the majority of.
        view: u64,
    },
}

/// Why a send did not happen.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SendError {
    /// The caller's error: this node does not send in that subgroup in this view.
    #[error("this node is not a sender of subgroup {0} in the current view")]
    NotSender(usize),
    /// The caller's error: too large for the subgroup.
    #[error("message of {len} bytes exceeds the largest message, {max} bytes (max_msg, or the arena)")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Retry: no view with that subgroup came within the wait (the layout may need
    /// more members). `None` if the send named no subgroup in any view it saw (a
    /// [`super::Group::send_where`] whose choice was `None` every time).
    #[error("no view with {} yet", which(.0))]
    NotReady(Option<usize>),
    /// Fatal for this node: it is no longer a member.
    #[error("this node stopped: {0}")]
    Stopped(String),
    /// This node lost the majority of its view and is out of it until enough of
    /// the members it lost are back (it works on that by itself): says which, and
    /// what would let it go on. Retry later, or tell the user.
    #[error("{0}")]
    NoMajority(super::NoMajority),
    /// Retry: the window (or arena) stayed full for this long
    /// ([`super::Group::send_where_within`]'s bound on waiting for room).
    #[error("no room to send within {0:?}: the receivers are behind")]
    Timeout(std::time::Duration),
    /// The sender's ring or arena reached pages this host's shared memory has no
    /// room for (a full `/dev/shm`): nothing was sent. Free room there and send
    /// again.
    #[error("{0}")]
    NoRoom(spindle_sst::region::ReserveError),
}

impl SendError {
    /// True if this node can never send again (it left the group or was removed).
    pub fn is_fatal(&self) -> bool {
        matches!(self, SendError::Stopped(_))
    }
}

/// Why a point-to-point request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    /// Not a member this node knows of.
    #[error("{0} is not a member")]
    NotAMember(NodeId),
    /// The connection, the deadline or the other side failed (it may take no
    /// requests); the text says which.
    #[error("request failed: {0}")]
    Failed(String),
}

fn which(k: &Option<usize>) -> String {
    match k {
        Some(k) => format!("subgroup {k}"),
        None => "a subgroup for this send".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_that_named_no_subgroup_says_so() {
        assert_eq!(SendError::NotReady(Some(3)).to_string(), "no view with subgroup 3 yet");
        assert_eq!(SendError::NotReady(None).to_string(), "no view with a subgroup for this send yet");
    }
}
