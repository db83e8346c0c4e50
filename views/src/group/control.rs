//! The control plane's two ends: a member's server (join requests: take, redirect or
//! refuse) and a joiner's client (ask, follow redirects, receive the view and the
//! declared state). Frames are [`crate::wire`]'s; every read has a deadline and a bad
//! frame closes only its connection.

use super::Inner;
use crate::auth::{AuthError, Credentials};
use crate::engine::JoinRefusal;
use crate::link::{Link, LinkError};
use crate::membership::Joiner;
use crate::restore::Reply;
use crate::view::ViewId;
use crate::wire::{MemberInfo, Message, ViewMsg};
use spindle_sst::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most join connections served at once; more are closed at once.
const MAX_HANDLERS: usize = 16;
/// End-of-state marker: a chunk for this subgroup.
pub(crate) const STATE_END: u32 = u32::MAX;
/// The refusal that tells a member asking to restore a view that it was counted
/// (see `crate::restore`): it is bound to this member now, and asks again to hear
/// when the view runs.
pub(crate) const RESTORING: &str = "counted towards restoring the group; retry";
const CHUNK: usize = 1 << 20;

/// How long a blocked `accept` waits before the server looks at the shutdown flag.
const ACCEPT_WAKE: Duration = Duration::from_millis(100);

/// Accepts control connections until the group shuts down. `accept` blocks (so a
/// connection is taken at once) with a receive timeout, which Linux applies to
/// `accept`, to look at the shutdown flag now and then.
pub(crate) fn serve(inner: Arc<Inner>, listener: TcpListener) {
    let active = Arc::new(AtomicUsize::new(0));
    let _ = listener.set_nonblocking(false);
    let polling = match socket2::SockRef::from(&listener).set_read_timeout(Some(ACCEPT_WAKE)) {
        Ok(()) => false,
        Err(e) => {
            // Without the timeout accept would block past a shutdown: poll instead.
            tracing::warn!(%e, "no accept timeout; polling the control listener");
            listener.set_nonblocking(true).is_ok()
        }
    };
    while !inner.status.is_shut_down() {
        match listener.accept() {
            Ok((stream, from)) => {
                if active.load(Ordering::Acquire) >= MAX_HANDLERS {
                    tracing::warn!(%from, "too many control connections: closed");
                    continue;
                }
                active.fetch_add(1, Ordering::AcqRel);
                let (inner, active) = (inner.clone(), active.clone());
                let spawned = std::thread::Builder::new().name("spindle-control".into()).spawn(move || {
                    if let Err(e) = handle(&inner, stream) {
                        tracing::info!(%from, %e, "control connection closed");
                    }
                    active.fetch_sub(1, Ordering::AcqRel);
                });
                if spawned.is_err() {
                    tracing::warn!(%from, "no thread for a control connection");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                // The accept timeout ran out (or, polling, nothing is pending): look at
                // the flag again.
                if polling {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Err(e) => {
                tracing::warn!(%e, "accept failed");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn handle(inner: &Arc<Inner>, stream: TcpStream) -> Result<(), String> {
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(SERVER_IDLE)).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let peer = stream.peer_addr().ok();
    let mut stream = Link::accept(stream, inner.creds.as_ref()).map_err(|e| {
        inner.counters.auth_refused.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(?peer, %e, "a control connection refused");
        e.to_string()
    })?;
    let msg = stream.recv().map_err(|e| e.to_string())?;
    if let Message::StatusRequest = msg {
        // Read-only, and for client identities too: what `spindle status` shows.
        return stream.send(&Message::Status(super::report::status(inner))).map_err(|e| e.to_string());
    }
    if !stream.member && !matches!(msg, Message::ClientHello { .. }) {
        // A client identity may open a client session, never join or ask as a member.
        inner.counters.auth_refused.fetch_add(1, Ordering::Relaxed);
        let reason = crate::link::CLIENT_ONLY.to_string();
        let _ = stream.send(&Message::JoinRefused { reason: reason.clone() });
        return Err(reason);
    }
    let (member, last_view) = match msg {
        Message::JoinRequest { member } => (member, None),
        Message::RestoreRequest { member, last_view } => (member, Some(last_view)),
        Message::Request { id, body } => return answer_request(inner, stream, id, 0, &body),
        Message::ServiceRequest { id, service, body } => return answer_request(inner, stream, id, service, &body),
        Message::ClientHello { resume } => return super::clients::serve(inner, stream, resume),
        _ => {
            let _ = stream
                .send(&Message::JoinRefused { reason: "expected a join request, a request or a client hello".into() });
            return Err("unexpected first frame".into());
        }
    };
    let refuse = |stream: &mut Link, reason: String| {
        let _ = stream.send(&Message::JoinRefused { reason: reason.clone() });
        Err(reason)
    };
    let auto = member.node == crate::config::AUTO_ID;
    if !auto && member.node >= spindle_sst::transport::MAX_NODE_ID {
        return refuse(&mut stream, format!("node ids must be below {}", spindle_sst::transport::MAX_NODE_ID));
    }
    let SocketAddr::V4(addr) = member.control else {
        return refuse(&mut stream, "joiners need an IPv4 control address".into());
    };
    let cur = spindle_sst::sync::read(&inner.current);
    let Some(epoch) = cur.as_ref() else {
        // Out of the view: a member of it that is out too, or was started again,
        // asks to be counted towards restoring it (see `crate::restore`).
        let reply = match last_view {
            Some(last) => lock(&inner.restore).as_mut().map(|r| {
                let reply = r.on_request(NodeId(member.node), ViewId(last));
                (r.view(), reply, r.restarted().cloned())
            }),
            None => None,
        };
        if let Some((_, Reply::Counted | Reply::Restored, _)) = &reply {
            // A member counted here may have been started again, with another
            // control port: the restarted view's welcome names it, and its setup's
            // gone probe asks it, at the address it asks from, not the one the last
            // view knew (there a refused connection would leave it out of the view).
            inner.directory.learn(std::slice::from_ref(&member));
        }
        return match reply {
            Some((_, Reply::Counted, _)) => refuse(&mut stream, RESTORING.into()),
            // Counted, and the view is restarted with it: it starts that view too.
            Some((_, Reply::Restored, Some(view))) => {
                let msg = ViewMsg {
                    id: view.id().0,
                    members: inner.directory.members_of(&view),
                    layout_version: view.layout().version(),
                    layout: view.layout().bytes().to_vec(),
                    next_node: view.next_node(),
                };
                tracing::info!(member = member.node, view = view.id().0, "a counted member starts the restarted view");
                welcome(inner, stream, msg, true).map_err(|e| e.to_string())
            }
            Some((_, Reply::Redirect(to), _)) => match inner.directory.control_of(to) {
                Some(leader) => stream.send(&Message::Redirect { leader }).map_err(|e| e.to_string()),
                None => refuse(&mut stream, "this member is between views; retry".into()),
            },
            // It installed a later view than this one: the group went on without
            // this member, whose view is stale; it must not restart.
            Some((mine, Reply::Stale, _)) => refuse(
                &mut stream,
                format!("this member is out of view {}, older than your view {}", mine.0, last_view.unwrap_or(0)),
            ),
            _ => refuse(&mut stream, "this member is between views; retry".into()),
        };
    };
    // A joiner without an id gets one no member of the group ever had.
    let node = if auto { inner.directory.grant(addr, &epoch.view) } else { NodeId(member.node) };
    if node.0 >= spindle_sst::transport::MAX_NODE_ID {
        return refuse(
            &mut stream,
            format!("this group gave out every node id below {}", spindle_sst::transport::MAX_NODE_ID),
        );
    }
    match epoch.request_join(Joiner { node, addr: Some(addr) }) {
        Ok(()) => {
            // Keep the connection: the view (and the state) go out on it at install.
            stream.stream.set_read_timeout(None).map_err(|e| e.to_string())?;
            inner.directory.add_joiner(node, stream);
            epoch.poke();
            tracing::info!(joiner = %node, "join request taken");
            Ok(())
        }
        Err(JoinRefusal::Redirect(leader)) => match inner.directory.control_of(leader) {
            Some(leader) => stream.send(&Message::Redirect { leader }).map_err(|e| e.to_string()),
            None => refuse(&mut stream, "leader unknown; retry".into()),
        },
        Err(JoinRefusal::Duplicate) => refuse(&mut stream, format!("node id {} is already a member", node.0)),
        Err(JoinRefusal::Closing) => refuse(&mut stream, "a view change is under way; retry".into()),
    }
}

/// Runs the handler of the request's service and answers; more requests may follow
/// on the same connection.
fn answer_request(
    inner: &Arc<Inner>,
    mut stream: Link,
    mut id: u64,
    mut service: u16,
    body: &[u8],
) -> Result<(), String> {
    let mut body = body.to_vec();
    loop {
        let Some(handler) = inner.hooks.service_handler(service) else {
            let reason = format!("this member takes no requests for service {service}");
            let _ = stream.send(&Message::JoinRefused { reason });
            return Err(format!("no handler for service {service}"));
        };
        let reply = handler(&body);
        stream.send(&Message::Reply { id, body: reply }).map_err(|e| e.to_string())?;
        match stream.recv() {
            Ok(Message::Request { id: next, body: b }) => {
                (id, service, body) = (next, 0, b);
            }
            Ok(Message::ServiceRequest { id: next, service: s, body: b }) => {
                (id, service, body) = (next, s, b);
            }
            Ok(other) => return Err(format!("unexpected frame after a request: {other:?}")),
            Err(_) => return Ok(()), // closed, or idle past the read timeout
        }
    }
}

/// A connection kept for requests is not used again after this long idle: the
/// server closes one idle for `SERVER_IDLE`, and reuse must not race that close.
const POOL_IDLE: Duration = Duration::from_secs(4);
/// How long a member's request connection may sit idle before it closes it.
const SERVER_IDLE: Duration = Duration::from_secs(5);

/// The most connections kept open to one member: requests made at once each take
/// one (a request that finds none kept connects anew, and a connection past
/// this many is closed after its reply).
const POOL_PER_MEMBER: usize = 4;

/// The requests this node makes: their ids, and the connections kept open, up to
/// [`POOL_PER_MEMBER`] per member, between them (see [`RequestPool::request`]).
#[derive(Default)]
pub(crate) struct RequestPool {
    conns: std::sync::Mutex<HashMap<NodeId, Vec<Pooled>>>,
    last_id: AtomicU64,
}

struct Pooled {
    addr: SocketAddr,
    stream: Link,
    used: Instant,
}

impl RequestPool {
    /// The kept connection to `to` at `addr`, if it is fresh and still open (a peek
    /// that would block: no end of stream, no stray bytes).
    /// The most recently used first; one that is not is closed.
    fn take(&self, to: NodeId, addr: SocketAddr) -> Option<Link> {
        loop {
            let p = lock(&self.conns).get_mut(&to)?.pop()?;
            if p.addr != addr || p.used.elapsed() > POOL_IDLE || p.stream.stream.set_nonblocking(true).is_err() {
                continue;
            }
            let s = &p.stream.stream;
            let open = matches!(s.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
            if open && s.set_nonblocking(false).is_ok() {
                return Some(p.stream);
            }
        }
    }

    fn keep(&self, to: NodeId, addr: SocketAddr, stream: Link) {
        let mut conns = lock(&self.conns);
        let kept = conns.entry(to).or_default();
        // Connections to an address the member no longer has go first.
        kept.retain(|p| p.addr == addr);
        if kept.len() < POOL_PER_MEMBER {
            kept.push(Pooled { addr, stream, used: Instant::now() });
        }
    }

    /// Sends one request to member `to` at `addr` and waits for its reply, on the
    /// connection kept for `to` if there is one (else a new one, kept afterwards). A
    /// request is never sent twice: a failure on a kept connection is reported as is.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn request(
        &self,
        to: NodeId,
        addr: SocketAddr,
        service: u16,
        body: &[u8],
        within: Duration,
        creds: Option<&Credentials>,
    ) -> Result<Vec<u8>, String> {
        let id = self.last_id.fetch_add(1, Ordering::Relaxed) + 1;
        let mut s = match self.take(to, addr) {
            Some(s) => s,
            None => Link::connect(addr, within, creds).map_err(|e| e.to_string())?,
        };
        s.stream.set_write_timeout(Some(within)).map_err(|e| e.to_string())?;
        s.stream.set_read_timeout(Some(within)).map_err(|e| e.to_string())?;
        let msg = match service {
            0 => Message::Request { id, body: body.to_vec() },
            service => Message::ServiceRequest { id, service, body: body.to_vec() },
        };
        s.send(&msg).map_err(|e| e.to_string())?;
        let reply = match s.recv().map_err(|e| e.to_string())? {
            Message::Reply { id: got, body } if got == id => body,
            Message::Reply { id: got, .. } => return Err(format!("reply to request {got}, expected {id}")),
            Message::JoinRefused { reason } => return Err(reason),
            other => return Err(format!("unexpected answer {other:?}")),
        };
        self.keep(to, addr, s);
        Ok(reply)
    }
}

/// Sends the new view and every declared state to a joiner this node took, or
/// (`restored`) to a member it counted and restarted the view with.
pub(crate) fn welcome(inner: &Inner, mut stream: Link, view: ViewMsg, restored: bool) -> std::io::Result<()> {
    stream.stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let client_key = *lock(&inner.client_key);
    stream.send(&match restored {
        true => Message::Restored { view, client_key },
        false => Message::JoinAccepted { view, client_key },
    })?;
    for (k, data) in inner.hooks.states() {
        let mut offset = 0usize;
        loop {
            let end = (offset + CHUNK).min(data.len());
            let last = end == data.len();
            let chunk = Message::StateChunk {
                subgroup: k as u32,
                offset: offset as u64,
                data: data[offset..end].to_vec(),
                last,
            };
            stream.send(&chunk)?;
            offset = end;
            if last {
                break;
            }
        }
    }
    stream.send(&Message::StateChunk { subgroup: STATE_END, offset: 0, data: Vec::new(), last: true })
}

/// What a joiner gets: the view and the state per subgroup.
pub(crate) type Welcome = (ViewMsg, Vec<(usize, Vec<u8>)>, [u8; 32]);

/// How a member out of its view was taken in.
pub(crate) enum Taken {
    /// Into a running view, as any joiner.
    Joined(Welcome),
    /// Into the view the member that counted it restarted (see `crate::restore`).
    Restored(Welcome),
}

/// Asks `contact` (following redirects) to add this node; waits for the view. An
/// id the group still counts as a member is refused for `duplicate_grace` (a process
/// restarted with its id before the group noticed the old one fail), then given up.
/// `last_view`: the last view this node installed, if it kept one (a member
/// started again on its state directory: see `super::restart`).
pub(crate) fn join(
    me: MemberInfo,
    contact: SocketAddr,
    deadline: Instant,
    duplicate_grace: Duration,
    last_view: Option<u64>,
    creds: Option<&Credentials>,
) -> Result<Welcome, JoinError> {
    let mut target = contact;
    let mut last_err = String::from("no answer");
    let mut duplicate_since: Option<Instant> = None;
    while Instant::now() < deadline {
        match ask(&me, target, last_view, creds) {
            Ok(Answer::Welcome(w) | Answer::Restored(w)) => return Ok(w),
            Ok(Answer::Redirect(l)) => {
                target = l;
                continue;
            }
            Ok(Answer::Refused(why)) if why.contains("already a member") => {
                let since = *duplicate_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= duplicate_grace {
                    return Err(JoinError::Refused(why));
                }
                last_err = why;
            }
            Ok(Answer::Refused(why)) => last_err = why,
            // No retry: the credentials will not change.
            Err(AskError::Auth(e)) => return Err(JoinError::Auth { contact: target, why: e }),
            Err(AskError::Unsent(e) | AskError::Other(e)) => last_err = e,
        }
        target = contact;
        std::thread::sleep(Duration::from_millis(300));
    }
    Err(JoinError::Refused(format!("could not join through {contact}: {last_err}")))
}

/// Why a join did not happen.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JoinError {
    /// The member's handshake failed: a wrong secret, or one end without one.
    #[error("join refused by {contact}: {why}")]
    Auth {
        /// Who refused.
        contact: SocketAddr,
        /// Why.
        why: AuthError,
    },
    /// Refused, or no answer in time.
    #[error("{0}")]
    Refused(String),
}

enum AskError {
    Auth(AuthError),
    /// No connection: the request never left.
    Unsent(String),
    /// The request may have left.
    Other(String),
}

/// Asks `target` once to count this node towards restoring view `last_view` (see
/// `crate::restore`), or to take it in if `target` runs a view; says how it ended.
/// A redirect names the member it points to, if `node_at` knows one.
pub(crate) fn restore_ask(
    me: &MemberInfo,
    target: SocketAddr,
    last_view: u64,
    creds: Option<&Credentials>,
    node_at: impl Fn(SocketAddr) -> Option<NodeId>,
) -> (crate::restore::Answer, Option<Taken>) {
    use crate::restore::Answer as A;
    match ask(me, target, Some(last_view), creds) {
        Ok(Answer::Welcome(w)) => (A::Welcomed, Some(Taken::Joined(w))),
        Ok(Answer::Restored(w)) => (A::Welcomed, Some(Taken::Restored(w))),
        Ok(Answer::Redirect(to)) => (node_at(to).map_or(A::Refused, A::Redirect), None),
        Ok(Answer::Refused(why)) if why == RESTORING => (A::Counted, None),
        Ok(Answer::Refused(_)) => (A::Refused, None),
        Err(AskError::Auth(_) | AskError::Unsent(_)) => (A::Unreachable, None),
        Err(AskError::Other(_)) => (A::Lost, None),
    }
}

impl From<String> for AskError {
    fn from(s: String) -> AskError {
        AskError::Other(s)
    }
}

enum Answer {
    Welcome(Welcome),
    Restored(Welcome),
    Redirect(SocketAddr),
    Refused(String),
}

fn ask(
    me: &MemberInfo,
    target: SocketAddr,
    last_view: Option<u64>,
    creds: Option<&Credentials>,
) -> Result<Answer, AskError> {
    let mut s = match Link::connect(target, Duration::from_secs(2), creds) {
        Ok(s) => s,
        Err(LinkError::Auth(AuthError::Io(e))) => return Err(AskError::Unsent(format!("{target}: {e}"))),
        Err(LinkError::Auth(e)) => return Err(AskError::Auth(e)),
        Err(e) => return Err(AskError::Unsent(e.to_string())),
    };
    s.stream.set_write_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let request = match last_view {
        Some(v) => Message::RestoreRequest { member: me.clone(), last_view: v },
        None => Message::JoinRequest { member: me.clone() },
    };
    s.send(&request).map_err(|e| e.to_string())?;
    // A view change (and the state) may take a while.
    s.stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    let (view, client_key, restored) = match s.recv().map_err(|e| e.to_string())? {
        Message::Redirect { leader } => return Ok(Answer::Redirect(leader)),
        // A member with a secret refuses a joiner without one in a plain frame.
        Message::JoinRefused { reason } if creds.is_none() && reason == crate::link::AUTH_REQUIRED => {
            return Err(AskError::Auth(AuthError::Required))
        }
        Message::JoinRefused { reason } if reason == crate::link::CLIENT_ONLY => {
            return Err(AskError::Auth(AuthError::ClientOnly))
        }
        Message::JoinRefused { reason } => return Ok(Answer::Refused(reason)),
        Message::JoinAccepted { view, client_key } => (view, client_key, false),
        Message::Restored { view, client_key } => (view, client_key, true),
        other => return Err(format!("unexpected answer {other:?}").into()),
    };
    // A node without an id finds the one it was given by its control address.
    let mine =
        |m: &&MemberInfo| if me.node == crate::config::AUTO_ID { m.control == me.control } else { m.node == me.node };
    if !view.members.iter().any(|m| mine(&m)) {
        return Err(AskError::Other("accepted into a view without this node".into()));
    }
    let mut states: Vec<(usize, Vec<u8>)> = Vec::new();
    loop {
        match s.recv().map_err(|e| e.to_string())? {
            Message::StateChunk { subgroup: STATE_END, .. } => break,
            Message::StateChunk { subgroup, offset, data, .. } => {
                let k = subgroup as usize;
                if !states.iter().any(|(x, _)| *x == k) {
                    states.push((k, Vec::new()));
                }
                let buf = &mut states.iter_mut().find(|(x, _)| *x == k).expect("added").1;
                if offset != buf.len() as u64 {
                    return Err(format!("state of subgroup {k}: chunk at {offset}, expected {}", buf.len()).into());
                }
                buf.extend_from_slice(&data);
            }
            other => return Err(format!("unexpected frame during state transfer: {other:?}").into()),
        }
    }
    let w = (view, states, client_key);
    Ok(if restored { Answer::Restored(w) } else { Answer::Welcome(w) })
}

#[cfg(test)]
mod pool_tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// A client link to `l` and the server's end of it.
    fn link(l: &TcpListener) -> (Link, TcpStream) {
        let c = Link::connect(l.local_addr().unwrap(), Duration::from_secs(5), None).unwrap();
        (c, l.accept().unwrap().0)
    }

    #[test]
    fn several_connections_to_a_member_are_kept_and_a_closed_one_is_skipped() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let pool = RequestPool::default();
        let to = NodeId(7);
        assert!(pool.take(to, addr).is_none());
        // Requests made at once each held a connection; all come back.
        let links: Vec<(Link, TcpStream)> = (0..POOL_PER_MEMBER + 2).map(|_| link(&l)).collect();
        let mut servers = Vec::new();
        let mut ports = Vec::new();
        let mut clones = Vec::new();
        for (c, s) in links {
            ports.push(c.stream.local_addr().unwrap().port());
            clones.push(c.stream.try_clone().unwrap());
            pool.keep(to, addr, c);
            servers.push(s);
        }
        assert_eq!(lock(&pool.conns)[&to].len(), POOL_PER_MEMBER, "no more than the bound");
        // The most recently kept first; one the member closed is skipped (once
        // its end of stream has arrived).
        drop(servers.remove(POOL_PER_MEMBER - 1));
        let closed = &clones[POOL_PER_MEMBER - 1];
        closed.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(closed.peek(&mut [0u8; 1]).unwrap(), 0, "the end of stream arrived");
        let first = pool.take(to, addr).expect("a kept connection");
        assert_eq!(first.stream.local_addr().unwrap().port(), ports[POOL_PER_MEMBER - 2]);
        let mut left = 0;
        while pool.take(to, addr).is_some() {
            left += 1;
        }
        assert_eq!(left, POOL_PER_MEMBER - 2);
        // Kept for another address of the member: not used, and dropped.
        let (c, _s) = link(&l);
        pool.keep(to, addr, c);
        let elsewhere: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(pool.take(to, elsewhere).is_none());
        assert!(lock(&pool.conns)[&to].is_empty());
    }
}
