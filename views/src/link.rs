//! A control-plane connection: frames of [`crate::wire`] over TCP; with a group
//! secret each body is encrypted and followed by its tag (see [`crate::auth`]).
//!
//! [`Link::connect`] and [`Link::accept`] run the handshake (or check that neither
//! end expects one); [`Link::send`] and [`Link::recv`] then seal and open every
//! frame. A frame whose tag fails is an error before its body is decoded: the
//! caller closes the link.

use crate::auth::tls::PeerChain;
use crate::auth::{self, AuthError, Credentials, Keys, Sealer};
use crate::wire::{self, Message, WireError};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// One end of a control-plane connection.
pub(crate) struct Link {
    pub(crate) stream: TcpStream,
    tx: Option<Sealer>,
    rx: Option<Sealer>,
    /// The identity the peer proved, if it proved a named one (see
    /// [`crate::auth::Secret::identity`]) or a certificate; `None` for the group
    /// secret or none.
    pub(crate) peer: Option<String>,
    /// Whether the peer may act as a member (join, ask as one): it holds the
    /// group secret, a certificate of a member's identity, or the group has no
    /// credentials.
    pub(crate) member: bool,
    /// The certificate chain the peer proved its identity with, if it did.
    pub(crate) chain: Option<Arc<PeerChain>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("peer", &self.stream.peer_addr().ok()).field("sealed", &self.tx.is_some()).finish()
    }
}

/// Why a link could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    /// The connection failed.
    #[error("{addr}: {source}")]
    Connect {
        /// Where to.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The handshake failed.
    #[error(transparent)]
    Auth(#[from] AuthError),
}

impl Link {
    /// Connects to `addr` and, with a secret, authenticates (the handshake gets
    /// `timeout` for each read).
    pub(crate) fn connect(addr: SocketAddr, timeout: Duration, creds: Option<&Credentials>) -> Result<Link, LinkError> {
        let connect = |source| LinkError::Connect { addr, source };
        let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(connect)?;
        stream.set_nodelay(true).map_err(connect)?;
        let Some(creds) = creds else {
            return Ok(Link { stream, tx: None, rx: None, peer: None, member: true, chain: None });
        };
        stream.set_read_timeout(Some(timeout)).map_err(connect)?;
        stream.set_write_timeout(Some(timeout)).map_err(connect)?;
        let Keys { tx, rx, .. } = auth::initiate_with(&mut stream, creds)?;
        Ok(Link { stream, tx: Some(tx), rx: Some(rx), peer: None, member: true, chain: None })
    }

    /// Takes an accepted connection: with credentials, the peer must authenticate
    /// with credentials of the same kind; without, it must not try to. A peer
    /// that does otherwise is told so in a plain refusal (no secret is revealed
    /// either way) and refused.
    pub(crate) fn accept(mut stream: TcpStream, creds: Option<&Credentials>) -> Result<Link, AuthError> {
        // A handshake's flights are several writes: Nagle's algorithm would hold
        // each next one for the peer's delayed acknowledgement (40 ms).
        stream.set_nodelay(true)?;
        let first = first_bytes(&stream)?;
        let mut head = [0u8; 5];
        match (creds, first) {
            (Some(Credentials::Secret(s)), First::Secret) => {
                stream.read_exact(&mut head)?;
                let keys = auth::respond(&mut stream, s, head)?;
                Ok(Link::sealed(stream, keys))
            }
            (Some(Credentials::Certificates(c)), First::Certificate) => {
                stream.read_exact(&mut head)?;
                let keys = auth::tls::respond(&mut stream, c, head, auth::tls::Opens::Control)?;
                Ok(Link::sealed(stream, keys))
            }
            (Some(Credentials::Secret(_)), First::Certificate) => {
                refuse(&mut stream, "authentication failed: this group uses a secret, not certificates");
                Err(AuthError::Failed)
            }
            (Some(Credentials::Certificates(_)), First::Secret) => {
                refuse(&mut stream, "authentication failed: this group uses certificates, not a secret");
                Err(AuthError::Failed)
            }
            (Some(_), First::Plain) => {
                refuse(&mut stream, AUTH_REQUIRED);
                Err(AuthError::Required)
            }
            (None, First::Secret | First::Certificate) => {
                refuse(&mut stream, "this member has no secret: it takes no authenticated connections");
                Err(AuthError::NoSecretThere)
            }
            (None, First::Plain) => Ok(Link { stream, tx: None, rx: None, peer: None, member: true, chain: None }),
        }
    }

    fn sealed(stream: TcpStream, k: Keys) -> Link {
        Link { stream, tx: Some(k.tx), rx: Some(k.rx), peer: k.peer, member: k.member, chain: k.chain }
    }

    /// Sends one message.
    pub(crate) fn send(&mut self, m: &Message) -> std::io::Result<()> {
        let frame =
            wire::encode(m).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        self.send_frame(&[&frame])
    }

    /// Sends one encoded frame given in parts (header first), sealed, in one write.
    pub(crate) fn send_frame(&mut self, parts: &[&[u8]]) -> std::io::Result<()> {
        if let ([one], None) = (parts, &self.tx) {
            return self.stream.write_all(one);
        }
        let len = parts.iter().map(|p| p.len()).sum::<usize>() + auth::TAG;
        let mut all = Vec::with_capacity(len);
        parts.iter().for_each(|p| all.extend_from_slice(p));
        seal(&mut self.tx, &mut all, 0);
        self.stream.write_all(&all)
    }

    /// Sends encoded frames in order, each sealed, in one write.
    pub(crate) fn send_frames(&mut self, frames: &[Vec<u8>]) -> std::io::Result<()> {
        let tags = self.tx.is_some() as usize * auth::TAG;
        let mut all = Vec::with_capacity(frames.iter().map(|f| f.len() + tags).sum());
        for f in frames {
            let at = all.len();
            all.extend_from_slice(f);
            seal(&mut self.tx, &mut all, at);
        }
        self.stream.write_all(&all)
    }

    /// Receives one message (its tag checked first).
    pub(crate) fn recv(&mut self) -> Result<Message, WireError> {
        let Link { stream, rx, .. } = self;
        recv_from(rx, stream)
    }

    /// [`Link::recv`] through `r`, a buffered reader of this link's stream.
    pub(crate) fn recv_from(&mut self, r: &mut impl Read) -> Result<Message, WireError> {
        recv_from(&mut self.rx, r)
    }

    /// Two ends of this link: one that only receives, one that only sends (for a
    /// reader thread beside a writer).
    pub(crate) fn split(self) -> std::io::Result<(Link, Link)> {
        let other = self.stream.try_clone()?;
        let peer = self.peer.clone();
        let member = self.member;
        let chain = self.chain.clone();
        Ok((
            Link { stream: self.stream, tx: None, rx: self.rx, peer, member, chain: chain.clone() },
            Link { stream: other, tx: self.tx, rx: None, peer: self.peer, member, chain },
        ))
    }
}

/// Seals the frame at `all[at..]` (header, then body) in place and appends its
/// tag, if the link is authenticated.
fn seal(tx: &mut Option<Sealer>, all: &mut Vec<u8>, at: usize) {
    if let Some(t) = tx.as_mut() {
        let (header, body) = all[at..].split_at_mut(wire::HEADER);
        let tag = t.seal(header, body);
        all.extend_from_slice(&tag);
    }
}

fn recv_from(rx: &mut Option<Sealer>, r: &mut impl Read) -> Result<Message, WireError> {
    let mut raw = wire::read_raw(r)?;
    if let Some(rx) = rx.as_mut() {
        let mut tag = [0u8; auth::TAG];
        r.read_exact(&mut tag).map_err(|e| WireError::Io(e.to_string()))?;
        let (header, body) = raw.split_at_mut(wire::HEADER);
        if !rx.open(header, body, &tag) {
            return Err(WireError::BadTag);
        }
    }
    wire::decode_raw(&raw)
}

/// The plain refusal a member with a secret sends a peer that did not
/// authenticate (a joiner without a secret recognises it: `AuthError::Required`).
pub(crate) const AUTH_REQUIRED: &str = "authentication required: this group has a secret";

/// The refusal a member sends an identity that may open client sessions only
/// and asked to join or to ask as a member (`AuthError::ClientOnly`).
pub(crate) const CLIENT_ONLY: &str = "a client identity can only open a client session";

/// Sends a plain refusal to a peer that spoke the wrong way, then ends.
fn refuse(stream: &mut TcpStream, reason: &str) {
    if let Ok(f) = wire::encode(&Message::JoinRefused { reason: reason.into() }) {
        let _ = stream.write_all(&f);
    }
}

/// How a connection opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum First {
    /// With a plain frame.
    Plain,
    /// With a group-secret handshake.
    Secret,
    /// With a certificate handshake.
    Certificate,
}

/// Which handshake the peer's first bytes begin, if any (peeked: a plain frame's
/// bytes stay for the frame reader). Waits until four bytes are in, up to the
/// stream's read timeout while none come and at most [`FIRST_BYTES`] in all: a
/// peer that sends a few bytes and stops (or closes) holds no handler longer.
fn first_bytes(stream: &TcpStream) -> std::io::Result<First> {
    let deadline = std::time::Instant::now() + FIRST_BYTES;
    let mut head = [0u8; 4];
    loop {
        let n = stream.peek(&mut head)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if n == head.len() {
            return Ok(match head {
                auth::MAGIC => First::Secret,
                auth::tls::MAGIC => First::Certificate,
                _ => First::Plain,
            });
        }
        if std::time::Instant::now() >= deadline {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        // A few bytes of the first four: the rest is on its way, or never comes.
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The longest a connection's first four bytes may take once some have come.
const FIRST_BYTES: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_peer_that_sends_a_few_bytes_and_stops_is_let_go() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        c.write_all(b"SP").unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let t0 = std::time::Instant::now();
        assert!(Link::accept(s, None).is_err());
        assert!(t0.elapsed() < Duration::from_secs(30), "held for {:?}", t0.elapsed());
    }
}
