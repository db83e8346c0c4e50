//! Certificates checked again while members run: with certificates, each member
//! opens a control connection to every other member of its view every
//! [`crate::config::Security::recheck_ms`] and asks for its status. The handshake
//! checks both chains again, against the revocation lists as they are on disk now
//! and the clock as it is now (see [`crate::auth::tls`]):
//!
//! - the other member's certificate refused here (revoked, or expired): it is
//!   suspected, and the view changes without it, as after a failure;
//! - this member's certificate refused there: this member stops, saying why (its
//!   rejoin would be refused at every handshake anyway);
//! - anything else (no answer, a broken connection) is the failure detector's
//!   business, not this check's.
//!
//! A revoked member that does not stop by itself is removed by the others' checks;
//! its data links close with its view, and every later handshake refuses it. The
//! same round checks again the chain each client session of this member was opened
//! with (no connection needed: the member kept it), and drops a session whose
//! client's certificate is refused now.

use super::Inner;
use crate::auth::{AuthError, Credentials};
use crate::link::{Link, LinkError};
use crate::wire::Message;
use spindle_sst::transport::NodeId;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often this member checks its peers' certificates, if it does (certificates
/// configured, and a nonzero interval).
pub(super) fn interval(inner: &Inner) -> Option<Duration> {
    let Some(Credentials::Certificates(_)) = inner.creds.as_ref() else { return None };
    let ms = inner.cfg.security.recheck_ms.unwrap_or(crate::config::DEFAULT_RECHECK_MS);
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// Checks every `every` until the node shuts down.
pub(super) fn run(inner: Arc<Inner>, every: Duration) {
    let mut next = Instant::now() + every;
    while !inner.status.is_shut_down() {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(100)));
            continue;
        }
        round(&inner);
        next = Instant::now() + every;
    }
}

/// What one check found.
enum Verdict {
    /// Both certificates were taken.
    Fine,
    /// The peer's certificate is refused here.
    Peer(AuthError),
    /// This member's certificate is refused there.
    Mine(AuthError),
    /// No verdict (not reached, or broken off): the failure detector's business.
    Unknown,
}

fn check(addr: SocketAddr, creds: Option<&Credentials>) -> Verdict {
    match Link::connect(addr, Duration::from_secs(2), creds) {
        Ok(mut link) => {
            // A whole exchange, so the peer's server sees a request, not a
            // connection dropped after its handshake.
            if link.send(&Message::StatusRequest).is_ok() {
                let _ = link.recv();
            }
            Verdict::Fine
        }
        Err(LinkError::Auth(e @ (AuthError::PeerRevoked | AuthError::PeerExpired))) => Verdict::Peer(e),
        Err(LinkError::Auth(e @ (AuthError::Revoked | AuthError::Expired))) => Verdict::Mine(e),
        Err(_) => Verdict::Unknown,
    }
}

/// Checks each member of the current view once, and this member's clients.
fn round(inner: &Arc<Inner>) {
    if let Some(Credentials::Certificates(certs)) = inner.creds.as_ref() {
        inner.clients.recheck(certs);
    }
    let me = NodeId(inner.cfg.node_id);
    let peers: Vec<NodeId> = match spindle_sst::sync::read(&inner.current).as_ref() {
        Some(e) => e.view.members().iter().copied().filter(|p| *p != me).collect(),
        None => return,
    };
    for peer in peers {
        if inner.status.is_shut_down() {
            return;
        }
        let Some(addr) = inner.directory.control_of(peer) else { continue };
        match check(addr, inner.creds.as_ref()) {
            Verdict::Fine | Verdict::Unknown => {}
            Verdict::Peer(why) => {
                tracing::warn!(%peer, %why, "a member's certificate is no longer valid: suspected");
                if let Some(e) = spindle_sst::sync::read(&inner.current).as_ref() {
                    if e.view.members().contains(&peer) {
                        e.suspect(peer);
                    }
                }
            }
            Verdict::Mine(why) => {
                inner.stop_with(format!("member {peer} refused this member's certificate: {why}"));
                return;
            }
        }
    }
}
