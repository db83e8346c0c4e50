//! Setting up the links of a `tcp` transport: the listener, the Hello exchange and
//! its checks (see the module docs of [`super`]). The data path is in [`super`].

use super::frame::{self, Frame, Hello};
use super::{Ciphers, LinkAuth, LinkEnds, SecretProof, TcpConfig, TcpTransport};
use crate::transport::{check_peers, check_regions, probe_gone, GoneProbe, NodeId, RegionSpec, SetupError};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A bound listener, waiting for [`Listener::establish`]. Binding first lets a caller
/// learn its port (bind to port 0) and tell the peers before connecting.
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
}

/// Binds the listening socket.
pub fn bind(addr: SocketAddr) -> Result<Listener, SetupError> {
    let listener = TcpListener::bind(addr).map_err(SetupError::io(format!("bind {addr}")))?;
    Ok(Listener { listener })
}

impl Listener {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound socket has an address")
    }

    /// Connects to every peer, then starts the receiver threads. The listener stays
    /// usable for further setups (a group runtime binds its data port once and sets
    /// up a transport per view on it: a port released between views could be taken
    /// meanwhile, as the local port of some outgoing connection). A connection meant
    /// for another setup says so in its Hello (group id) and is refused.
    pub fn establish(&self, cfg: &TcpConfig) -> Result<TcpTransport, SetupError> {
        let ids: Vec<NodeId> = cfg.peers.iter().map(|(id, _)| *id).collect();
        let ids = check_peers(cfg.me, &ids)?;
        check_regions(&cfg.regions)?;
        if cfg.regions.len() > frame::MAX_REGIONS {
            return Err(SetupError::Invalid(format!("at most {} regions", frame::MAX_REGIONS)));
        }
        let deadline = Instant::now() + cfg.timeout;
        let hello = Hello { node: cfg.me, group: cfg.group, regions: cfg.regions.clone() };
        // Every peer gets the whole deadline: the connections to lower ids are made
        // by one short-lived thread each, while this thread accepts from higher ids.
        // (Made one after another, a dead lower peer used up the deadline and every
        // peer after it was missed too: a whole group of live members each went on
        // alone after the leader died during a view change.)
        let connects: Vec<(NodeId, JoinHandle<Result<Link, SetupError>>)> = cfg
            .peers
            .iter()
            .filter(|(id, _)| *id < cfg.me)
            .map(|(id, addr)| {
                let (id, addr, hello, gone, auth) = (*id, *addr, hello.clone(), cfg.gone.clone(), cfg.auth.clone());
                std::thread::Builder::new()
                    .name(format!("sst-connect-{}", id.0))
                    .spawn(move || connect_peer(id, addr, &hello, deadline, gone.as_ref(), auth.as_deref()))
                    .map(|h| (id, h))
                    .map_err(SetupError::io("spawn a connect thread"))
            })
            .collect::<Result<_, _>>()?;
        let mut links: Vec<(NodeId, Link)> = Vec::new();
        let mut first_error = None;
        match self.accept_higher(cfg, &ids, &hello, deadline) {
            Ok(accepted) => links.extend(accepted),
            Err(e) => first_error = Some(e),
        }
        for (id, h) in connects {
            match h.join().unwrap_or_else(|_| Err(SetupError::Invalid("a connect thread panicked".into()))) {
                Ok(link) => links.push((id, link)),
                Err(e) if cfg.partial => tracing::warn!(node = %cfg.me, peer = %id, %e, "going on without a peer"),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        TcpTransport::start(cfg, links)
    }

    /// Accepts the peers with higher ids until all came or the deadline passed.
    /// Accepts the links of the peers with higher ids. Each accepted connection's
    /// hello is read on a short-lived thread of its own (at most
    /// [`HELLO_READERS`] at once), so a connection that says nothing (a port
    /// scan, a hostile client) costs its thread up to the read timeout, never the
    /// setup's time.
    fn accept_higher(
        &self,
        cfg: &TcpConfig,
        ids: &[NodeId],
        hello: &Hello,
        deadline: Instant,
    ) -> Result<Vec<(NodeId, Link)>, SetupError> {
        let mut links = Vec::new();
        // Each peer waited for, with when the probe last asked about it.
        let mut waiting: Vec<(NodeId, Instant)> =
            ids.iter().filter(|id| **id > cfg.me).map(|id| (*id, Instant::now())).collect();
        let (tx, hellos) = std::sync::mpsc::channel();
        let mut reading = 0usize;
        self.listener.set_nonblocking(true).map_err(SetupError::io("listener nonblocking"))?;
        while !waiting.is_empty() {
            while let Ok((from, read)) = hellos.try_recv() {
                reading -= 1;
                match read {
                    Ok((id, link)) if waiting.iter().any(|(w, _)| *w == id) => {
                        waiting.retain(|(w, _)| *w != id);
                        links.push((id, link));
                    }
                    Ok((id, _)) => tracing::warn!(node = %cfg.me, %from, %id, "refused a second link of a peer"),
                    Err(why) => tracing::warn!(node = %cfg.me, %from, %why, "refused a connection"),
                }
            }
            if waiting.is_empty() {
                break;
            }
            match self.listener.accept() {
                Ok((stream, from)) if reading >= HELLO_READERS => {
                    drop(stream);
                    tracing::warn!(node = %cfg.me, %from, "too many connections saying nothing: refused one");
                }
                Ok((stream, from)) => {
                    let (tx, hello, auth) = (tx.clone(), hello.clone(), cfg.auth.clone());
                    let ids: Vec<NodeId> = waiting.iter().map(|(id, _)| *id).collect();
                    let spawned = std::thread::Builder::new().name("sst-tcp-hello".into()).spawn(move || {
                        let _ = tx.send((from, accept_peer(stream, &hello, &ids, deadline, auth.as_deref())));
                    });
                    match spawned {
                        Ok(_) => reading += 1,
                        Err(e) => tracing::warn!(node = %cfg.me, %from, %e, "no thread to read a hello: refused"),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let gone: Vec<NodeId> = waiting
                        .iter_mut()
                        .filter_map(|(id, probed)| probe_gone(cfg.gone.as_ref(), *id, probed).then_some(*id))
                        .collect();
                    if let Some(g) = gone.first() {
                        if !cfg.partial {
                            return Err(SetupError::Gone(*g));
                        }
                        tracing::warn!(node = %cfg.me, ?gone, "peers are gone: not waiting for them");
                        waiting.retain(|(w, _)| !gone.contains(w));
                    }
                    if Instant::now() >= deadline {
                        if cfg.partial {
                            let ids: Vec<NodeId> = waiting.iter().map(|(id, _)| *id).collect();
                            tracing::warn!(node = %cfg.me, ?ids, "going on without peers that did not connect");
                            break;
                        }
                        return Err(SetupError::Timeout(waiting.into_iter().map(|(id, _)| id).collect()));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => return Err(SetupError::io("accept")(e)),
            }
        }
        Ok(links)
    }
}

/// Hellos read at once during a setup (connections past it are refused).
const HELLO_READERS: usize = 64;

fn set_deadline(stream: &TcpStream, deadline: Instant) -> std::io::Result<()> {
    let left =
        deadline.saturating_duration_since(Instant::now()).clamp(Duration::from_millis(10), Duration::from_secs(2));
    stream.set_read_timeout(Some(left))
}

fn read_hello(stream: &mut TcpStream) -> Result<Hello, String> {
    let mut head = [0u8; 4];
    stream.read_exact(&mut head).map_err(|e| format!("reading hello: {e}"))?;
    let len = frame::body_len(&head).map_err(|e| e.to_string())?.unwrap_or(0);
    if len > 21 + 10 * frame::MAX_REGIONS {
        return Err(format!("hello of {len} bytes is too long"));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).map_err(|e| format!("reading hello: {e}"))?;
    match frame::decode_body(&body).map_err(|e| e.to_string())? {
        Frame::Hello(h) => Ok(h),
        other => Err(format!("expected a hello, got {other:?}")),
    }
}

/// A link made at setup: the connection, the peer's regions and, with a secret,
/// the link's ciphers.
pub(super) struct Link {
    pub(super) stream: TcpStream,
    pub(super) remote: Vec<RegionSpec>,
    pub(super) ciphers: Option<Ciphers>,
}

fn connect_peer(
    id: NodeId,
    addr: SocketAddr,
    hello: &Hello,
    deadline: Instant,
    gone: Option<&GoneProbe>,
    auth: Option<&dyn LinkAuth>,
) -> Result<Link, SetupError> {
    let mut probed = Instant::now();
    loop {
        let attempt = (|| -> Result<Link, String> {
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(10));
            let mut s = TcpStream::connect_timeout(&addr, left).map_err(|e| format!("connect {addr}: {e}"))?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            let mut out = Vec::new();
            frame::encode_hello(&mut out, hello);
            s.write_all(&out).map_err(|e| format!("send hello: {e}"))?;
            set_deadline(&s, deadline).map_err(|e| e.to_string())?;
            let theirs = read_hello(&mut s)?;
            if theirs.node != id || theirs.group != hello.group {
                return Err(format!("answered by {} of group {}", theirs.node, theirs.group));
            }
            let ends = LinkEnds { connector: true, me: hello.node, peer: id, group: hello.group };
            let ciphers = match auth {
                Some(a) => Some(a.handshake(&mut s, ends)?),
                None => None,
            };
            Ok(Link { stream: s, remote: theirs.regions, ciphers })
        })();
        match attempt {
            Ok(ok) => return Ok(ok),
            Err(why) if Instant::now() >= deadline => return Err(SetupError::Mismatch { peer: id, why }),
            Err(_) if probe_gone(gone, id, &mut probed) => return Err(SetupError::Gone(id)),
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn accept_peer(
    mut s: TcpStream,
    hello: &Hello,
    waiting: &[NodeId],
    deadline: Instant,
    auth: Option<&dyn LinkAuth>,
) -> Result<(NodeId, Link), String> {
    s.set_nonblocking(false).map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    set_deadline(&s, deadline).map_err(|e| e.to_string())?;
    let theirs = read_hello(&mut s)?;
    if theirs.group != hello.group {
        return Err(format!("group {} is not ours ({})", theirs.group, hello.group));
    }
    if !waiting.contains(&theirs.node) {
        return Err(format!("{} is not an expected peer (or already connected)", theirs.node));
    }
    let mut out = Vec::new();
    frame::encode_hello(&mut out, hello);
    s.write_all(&out).map_err(|e| format!("send hello: {e}"))?;
    let ends = LinkEnds { connector: false, me: hello.node, peer: theirs.node, group: hello.group };
    let ciphers = match auth {
        Some(a) => Some(a.handshake(&mut s, ends)?),
        None => None,
    };
    Ok((theirs.node, Link { stream: s, remote: theirs.regions, ciphers }))
}

const CONNECTOR: u8 = 1;
const ACCEPTOR: u8 = 2;

/// The transcript a side of role `role` proves: the role, both ids (its own
/// first), the group, and both nonces (its own first).
fn transcript(role: u8, me: NodeId, peer: NodeId, group: u64, mine: &[u8; 32], theirs: &[u8; 32]) -> Vec<u8> {
    let mut t = Vec::with_capacity(9 + 8 + 64 + 8);
    t.extend_from_slice(b"sst-link");
    t.push(role);
    t.extend_from_slice(&me.0.to_le_bytes());
    t.extend_from_slice(&peer.0.to_le_bytes());
    t.extend_from_slice(&group.to_le_bytes());
    t.extend_from_slice(mine);
    t.extend_from_slice(theirs);
    t
}

/// Both ends prove the secret to each other (see [`SecretProof`]); then the link's
/// ciphers are keyed from the two transcripts.
pub(super) fn prove(s: &mut TcpStream, a: &(impl SecretProof + ?Sized), ends: LinkEnds) -> Result<Ciphers, String> {
    let LinkEnds { connector, me, peer, group } = ends;
    let role = if connector { CONNECTOR } else { ACCEPTOR };
    let mine = a.nonce().map_err(|e| format!("nonce: {e}"))?;
    s.write_all(&mine).map_err(|e| format!("send nonce: {e}"))?;
    let mut theirs = [0u8; 32];
    s.read_exact(&mut theirs).map_err(|e| format!("read nonce: {e}"))?;
    let ours = transcript(role, me, peer, group, &mine, &theirs);
    s.write_all(&a.prove(&ours)).map_err(|e| format!("send proof: {e}"))?;
    let mut proof = [0u8; 32];
    s.read_exact(&mut proof).map_err(|e| format!("read proof: {e}"))?;
    let other = if connector { ACCEPTOR } else { CONNECTOR };
    let peers = transcript(other, peer, me, group, &theirs, &mine);
    if !a.check(&peers, &proof) {
        return Err(format!("{peer} does not prove the group's secret"));
    }
    Ok(a.ciphers(&ours, &peers))
}
