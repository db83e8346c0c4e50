//! The member's side of client sessions ([`crate::client`]): processes outside the
//! view that subscribe to subgroups and make requests through this member.
//!
//! A session starts with a `ClientHello` on the control port. The member refuses it
//! past [`ClientLimits::max_clients`] sessions or when the id is already connected
//! here, and otherwise answers `ClientWelcome`. Two threads serve the session: a
//! reader (subscriptions and requests) and a writer, which drains the session's
//! outbox to the socket. Delivery never waits for a client. The predicate thread
//! appends each relayed message to the outboxes of the subscribed sessions, and when
//! a non-empty outbox would pass [`ClientLimits::buffer_bytes`], that session is
//! dropped (an empty one takes a batch of any size, so samples larger than the limit
//! reach a client that keeps up): its
//! outbox is replaced by one `ClientDropped` frame that says why, and the writer ends
//! the session after sending it (or after its write timeout, if the client reads
//! nothing). Clients are not members: no view change, no vote, no say in stability.
//!
//! An application may serve its own protocol to clients ([`ClientHandler`], given
//! with [`super::GroupBuilder::client_handler`]): a client's requests and posts go
//! to the handler with a [`ClientSession`], through which the application pushes
//! messages back, bounded by the same outbox. Without a handler, client requests go
//! to the member's request handler ([`super::GroupBuilder::on_request`]).
//!
//! With certificates, a session keeps the chain its client proved itself with, and
//! the member's certificate check ([`super::recheck`]) checks it again: a client
//! whose certificate was revoked, or expired, since its handshake is dropped with
//! the reason, and its handshakes from then on are refused.
//!
//! Cost on the delivery path: one atomic load per batch while no client subscribes;
//! otherwise one lock of the session list and one of each subscribed outbox per
//! batch, and one copy of each message per subscribed session.

use super::Inner;
use crate::auth::tls::{Certificates, PeerChain};
use crate::auth::AuthError;
use crate::link::Link;
use crate::view::ViewId;
use crate::wire::{encode, Message, MAX_REASON};
use spindle_sst::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use std::collections::VecDeque;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How many clients a member serves and how much it buffers for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Sessions at once; a client past this is refused with the reason (default 256).
    pub max_clients: usize,
    /// Bytes of relayed frames waiting for one client; past this the client is
    /// dropped (default 8 MiB).
    pub buffer_bytes: usize,
    /// How long a write to a client may block before the session ends (default 10 s).
    pub write_timeout: Duration,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits { max_clients: 256, buffer_bytes: 8 << 20, write_timeout: Duration::from_secs(10) }
    }
}

/// An application's side of client sessions (see the module docs). Its methods run
/// on the session's reader thread, one frame at a time per session: a call that
/// blocks holds up that client only (and, through TCP, its sends).
pub trait ClientHandler: Send + Sync {
    /// A request; the answer goes back as its reply.
    fn request(&self, session: &ClientSession, body: &[u8]) -> Vec<u8>;
    /// A one-way message.
    fn post(&self, session: &ClientSession, body: &[u8]);
    /// The session ended (the client left, was dropped, or the member stops).
    fn closed(&self, session: &ClientSession) {
        let _ = session;
    }
}

/// One client's session, as a [`ClientHandler`] sees it: cheap to clone and to
/// keep (a clone of a session that ended refuses every push).
#[derive(Debug, Clone)]
pub struct ClientSession {
    s: Arc<Session>,
    limit: usize,
    dropped: Arc<AtomicU64>,
}

impl ClientSession {
    /// The client's id (as it gave it in its hello; unique among this member's
    /// sessions).
    pub fn id(&self) -> u64 {
        self.s.id
    }

    /// Queues `body` for the client (a `Push` frame). False if the session ended,
    /// or if this push passes the session's buffer limit, which drops the client.
    pub fn push(&self, body: &[u8]) -> bool {
        self.push_parts(&[body])
    }

    /// [`ClientSession::push`] of `parts` one after the other as one body, built
    /// into the frame with no other copy.
    pub fn push_parts(&self, parts: &[&[u8]]) -> bool {
        match crate::wire::encode_push(parts) {
            Ok(f) => {
                let ok = self.s.push_owned(vec![f], self.limit);
                if !ok {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(client = self.s.id, limit = self.limit, "a client fell behind: dropped");
                }
                ok && self.is_open()
            }
            Err(_) => false,
        }
    }

    /// The identity the client proved, if it proved a named one (see
    /// [`crate::auth::Secret::identity`]); `None` for a client that holds the
    /// group secret, or any client of a group without one.
    pub fn identity(&self) -> Option<&str> {
        self.s.identity.as_deref()
    }

    /// True until the session ends.
    pub fn is_open(&self) -> bool {
        !lock(&self.s.out).closing
    }

    /// Ends the session; the client gets `reason`.
    pub fn close(&self, reason: &str) {
        self.s.close(reason.into());
    }
}

/// The sessions of one member.
#[derive(Debug)]
pub(crate) struct Clients {
    limits: ClientLimits,
    sessions: Mutex<Vec<Arc<Session>>>,
    /// Subscriptions over all sessions: the delivery path looks no further while 0.
    subscriptions: AtomicUsize,
    dropped: Arc<AtomicU64>,
}

#[derive(Debug)]
struct Session {
    id: u64,
    /// The identity the client proved, if a named one.
    identity: Option<String>,
    /// The certificate chain it proved it with, if it did.
    chain: Option<Arc<PeerChain>>,
    subgroups: Mutex<Vec<usize>>,
    out: Mutex<Outbox>,
    ready: Condvar,
    /// For closing the connection from another thread (ends the reader).
    stream: TcpStream,
}

#[derive(Debug, Default)]
struct Outbox {
    frames: VecDeque<Vec<u8>>,
    bytes: usize,
    /// Set once the session ends: the last frame is queued (or none will be).
    closing: bool,
}

impl Clients {
    pub(crate) fn new(limits: ClientLimits) -> Clients {
        Clients { limits, sessions: Mutex::default(), subscriptions: AtomicUsize::new(0), dropped: Arc::default() }
    }

    /// Sessions open now.
    pub(crate) fn connected(&self) -> usize {
        lock(&self.sessions).len()
    }

    /// Sessions dropped because their client fell behind.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Relays one delivered batch of subgroup `k` of `view`, whose first message is
    /// at `first` in the view's delivery order, to the sessions subscribed to `k`.
    pub(crate) fn relay(&self, view: ViewId, k: usize, first: u64, batch: &spindle_smc::Batch, senders: &[NodeId]) {
        if self.subscriptions.load(Ordering::Acquire) == 0 {
            return;
        }
        let to: Vec<Arc<Session>> =
            lock(&self.sessions).iter().filter(|s| lock(&s.subgroups).contains(&k)).cloned().collect();
        if to.is_empty() {
            return;
        }
        let frames: Vec<Vec<u8>> = batch
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let relay = Message::Relay {
                    view: view.0,
                    subgroup: k as u32,
                    index: first + i as u64,
                    sender: senders[m.sender()].0,
                    body: m.to_vec(),
                };
                encode(&relay).ok()
            })
            .collect();
        for s in &to {
            if !s.push(&frames, self.limits.buffer_bytes) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(client = s.id, limit = self.limits.buffer_bytes, "a client fell behind: dropped");
            }
        }
    }

    /// Ends every session (the member stops).
    pub(crate) fn close_all(&self) {
        for s in lock(&self.sessions).iter() {
            s.close("the member stopped".into());
        }
    }

    /// Drops every session whose client's certificate `certs` refuses now (see
    /// [`Certificates::recheck`]).
    pub(crate) fn recheck(&self, certs: &Certificates) {
        let refused: Vec<(Arc<Session>, AuthError)> = lock(&self.sessions)
            .iter()
            .filter_map(|s| Some((s.clone(), certs.recheck(s.chain.as_ref()?).err()?)))
            .collect();
        for (s, why) in &refused {
            let reason = match why {
                AuthError::PeerRevoked => "this client's certificate was revoked",
                AuthError::PeerExpired => "this client's certificate expired",
                _ => "this client's certificate no longer verifies",
            };
            tracing::warn!(client = s.id, identity = ?s.identity, %why, "a client's certificate is no longer valid: dropped");
            s.close(reason.into());
        }
    }

    fn remove(&self, s: &Arc<Session>) {
        let mut sessions = lock(&self.sessions);
        if let Some(i) = sessions.iter().position(|x| Arc::ptr_eq(x, s)) {
            sessions.swap_remove(i);
            self.subscriptions.fetch_sub(lock(&s.subgroups).len(), Ordering::AcqRel);
        }
    }
}

impl Session {
    /// Queues frames unless that passes `limit`; then the session is dropped and
    /// false returned.
    fn push(&self, frames: &[Vec<u8>], limit: usize) -> bool {
        self.push_owned(frames.to_vec(), limit)
    }

    /// [`Session::push`] of frames taken as they are.
    fn push_owned(&self, frames: Vec<Vec<u8>>, limit: usize) -> bool {
        let mut o = lock(&self.out);
        if o.closing {
            return true; // ended already: not a drop
        }
        let more: usize = frames.iter().map(Vec::len).sum();
        // An empty outbox takes what comes, however large (a sample larger than the
        // limit still reaches a client that keeps up): at most the limit or one batch
        // waits.
        if o.bytes > 0 && o.bytes + more > limit {
            drop(o);
            self.close(format!("fell behind: more than {limit} bytes of relayed messages waited for this client"));
            return false;
        }
        o.bytes += more;
        o.frames.extend(frames);
        drop(o);
        self.ready.notify_one();
        true
    }

    /// Replaces whatever waits with a last frame saying why, for the writer to send.
    fn close(&self, reason: String) {
        let mut o = lock(&self.out);
        if o.closing {
            return;
        }
        o.frames.clear();
        o.bytes = 0;
        let mut reason = reason;
        reason.truncate(MAX_REASON);
        if let Ok(f) = encode(&Message::ClientDropped { reason }) {
            o.frames.push_back(f);
        }
        o.closing = true;
        drop(o);
        self.ready.notify_one();
    }

    /// The writer: sends what the outbox holds until the session closes.
    fn send_outbox(&self, mut link: Link) {
        loop {
            let (frames, last) = {
                let mut o = lock(&self.out);
                while o.frames.is_empty() && !o.closing {
                    o = self.ready.wait(o).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                o.bytes = 0;
                (std::mem::take(&mut o.frames), o.closing)
            };
            // One write for everything that waited (one system call, not one a frame).
            let frames: Vec<Vec<u8>> = frames.into();
            if link.send_frames(&frames).is_err() {
                let _ = self.stream.shutdown(Shutdown::Both);
                return;
            }
            if last {
                let _ = self.stream.shutdown(Shutdown::Both);
                return;
            }
        }
    }
}

/// Takes a client session whose `ClientHello` came on `stream`: refuses it with the
/// reason, or welcomes it and starts its reader and writer threads. A new session
/// gets a random id and the token that proves it; a resumed one must bring the
/// token its id was given (at this member or another), so no process can take
/// over another's session by naming its id.
pub(crate) fn serve(inner: &Arc<Inner>, mut stream: Link, resume: Option<(u64, [u8; 16])>) -> Result<(), String> {
    let clients = &inner.clients;
    let refuse = |stream: &mut Link, reason: String| {
        let _ = stream.send(&Message::JoinRefused { reason: reason.clone() });
        Err(reason)
    };
    let key = *lock(&inner.client_key);
    let id = match resume {
        Some((id, token)) if crate::auth::client_token_ok(&key, id, &token) => id,
        Some((id, _)) => {
            inner.counters.auth_refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(client = id, "a resumed client session without its token: refused");
            return refuse(&mut stream, format!("client session {id:#x}: its token does not hold in this group"));
        }
        None => crate::auth::client_id().map_err(|e| e.to_string())?,
    };
    let token = crate::auth::client_token(&key, id);
    stream.stream.set_read_timeout(None).map_err(|e| e.to_string())?;
    stream.stream.set_write_timeout(Some(clients.limits.write_timeout)).map_err(|e| e.to_string())?;
    let _ = stream.stream.set_nodelay(true);
    let session = {
        let mut sessions = lock(&clients.sessions);
        if sessions.len() >= clients.limits.max_clients {
            drop(sessions);
            return refuse(
                &mut stream,
                format!("this member serves {} clients, its limit", clients.limits.max_clients),
            );
        }
        if sessions.iter().any(|s| s.id == id) {
            drop(sessions);
            return refuse(&mut stream, format!("client id {id:#x} is already connected here"));
        }
        let s = Arc::new(Session {
            id,
            identity: stream.peer.clone(),
            chain: stream.chain.clone(),
            subgroups: Mutex::default(),
            out: Mutex::default(),
            ready: Condvar::new(),
            stream: stream.stream.try_clone().map_err(|e| e.to_string())?,
        });
        sessions.push(s.clone());
        s
    };
    let welcome =
        encode(&Message::ClientWelcome { node: inner.cfg.node_id, client: id, token }).map_err(|e| e.to_string())?;
    session.push(&[welcome], usize::MAX);
    let (stream, out) = stream.split().map_err(|e| e.to_string())?;
    let writer = {
        let s = session.clone();
        std::thread::Builder::new().name("spindle-client-out".into()).spawn(move || s.send_outbox(out))
    };
    let reader = {
        let (inner, s) = (inner.clone(), session.clone());
        std::thread::Builder::new().name("spindle-client-in".into()).spawn(move || {
            let handle = ClientSession {
                s: s.clone(),
                limit: inner.clients.limits.buffer_bytes,
                dropped: inner.clients.dropped.clone(),
            };
            let why = read_requests(&inner, &handle, stream);
            tracing::info!(client = s.id, %why, "client session ended");
            s.close(why);
            inner.clients.remove(&s);
            if let Some(h) = inner.hooks.client_handler() {
                h.closed(&handle);
            }
        })
    };
    if writer.is_err() || reader.is_err() {
        session.close("no thread for this session".into());
        clients.remove(&session);
        return Err("no thread for a client session".into());
    }
    tracing::info!(client = id, "client session opened");
    Ok(())
}

/// The reader: subscriptions and requests until the connection ends; returns why.
fn read_requests(inner: &Inner, handle: &ClientSession, mut link: Link) -> String {
    let s = &handle.s;
    let Ok(raw) = link.stream.try_clone() else { return "no handle on the connection".into() };
    let mut stream = std::io::BufReader::with_capacity(1 << 16, raw);
    loop {
        if inner.status.is_shut_down() {
            return "the member stopped".into();
        }
        match link.recv_from(&mut stream) {
            Ok(Message::Subscribe { subgroup }) => {
                let mut subs = lock(&s.subgroups);
                if !subs.contains(&(subgroup as usize)) {
                    subs.push(subgroup as usize);
                    inner.clients.subscriptions.fetch_add(1, Ordering::AcqRel);
                }
            }
            Ok(Message::Post { body }) => match inner.hooks.client_handler() {
                Some(h) => h.post(handle, &body),
                None => return "this member takes no posts from clients".into(),
            },
            Ok(Message::Request { id, body }) => {
                let reply = match (inner.hooks.client_handler(), inner.hooks.request_handler()) {
                    (Some(h), _) => Message::Reply { id, body: h.request(handle, &body) },
                    (None, Some(h)) => Message::Reply { id, body: h(&body) },
                    (None, None) => Message::JoinRefused { reason: "this member takes no requests".into() },
                };
                match encode(&reply) {
                    Ok(f) => {
                        if !s.push(&[f], inner.clients.limits.buffer_bytes) {
                            return "fell behind".into();
                        }
                    }
                    Err(e) => return format!("reply too large: {e}"),
                }
            }
            Ok(other) => {
                let mut what = format!("{other:?}");
                what.truncate(120);
                return format!("unexpected frame from a client: {what}");
            }
            Err(e) => return format!("connection: {e}"),
        }
    }
}
