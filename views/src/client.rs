//! A client: a process that is not a member of the group but subscribes to its
//! subgroups and makes requests through a member, over the member's control port.
//!
//! Clients are outside the view: connecting, leaving or dying changes no view, and
//! they count neither for the majority nor for stability. A member relays to a
//! subscribed client every message it delivers in that subgroup, in delivery order,
//! each with its position: the view and its index in that view's delivery order of
//! the subgroup (every member of the subgroup delivers the same sequence in a view, so
//! the position names the same message at every member).
//!
//! A client that falls behind is dropped by its member ([`ClientError::Dropped`] says
//! why; see [`crate::group::ClientLimits`]); a slow client never slows the group. On
//! the loss of its member the client gets [`ClientError::Disconnected`] and may
//! [`Client::reconnect`] to the next contact, which subscribes it again. Messages
//! delivered while it was away are not replayed (the group keeps no history; the DDS
//! layer's Volatile and Logged topics do).
//!
//! Applications add their own protocol with [`Client::post`], [`Client::request`]
//! and [`Event::Push`], served at the member by a
//! [`crate::group::ClientHandler`] (the DDS layer's clients are built this way).
//! Sending raw messages into a subgroup on a client's behalf is not built here: the
//! DDS client writer does it, with the duplicate suppression a resend needs. A subscription
//! names a subgroup by its index in each view: meant for layouts whose subgroups
//! keep their numbers (not for one that renumbers them, as the DDS topic table does).
//!
//! ```no_run
//! use std::time::Duration;
//! use spindle_views::client::Client;
//! let contacts = ["127.0.0.1:7000".parse().unwrap(), "127.0.0.1:7010".parse().unwrap()];
//! let c = Client::connect(&contacts, Duration::from_secs(5)).unwrap();
//! c.subscribe(0).unwrap();
//! while let Some(m) = c.recv(Duration::from_secs(1)).unwrap() {
//!     println!("view {} #{} from {}: {} bytes", m.view.0, m.index, m.sender, m.data.len());
//! }
//! ```

use crate::auth::Credentials;
use crate::link::Link;
use crate::view::ViewId;
use crate::wire::{encode, Message};
use spindle_sst::sync::atomic::{AtomicU64, Ordering};
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use std::collections::{HashMap, VecDeque};
use std::net::{Shutdown, SocketAddr};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;

/// A message a member delivered in a subgroup this client subscribed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relayed {
    /// The view it was delivered in.
    pub view: ViewId,
    /// The subgroup.
    pub subgroup: usize,
    /// Its position in that view's delivery order of the subgroup (0 first).
    pub index: u64,
    /// Its sender.
    pub sender: NodeId,
    /// Its payload.
    pub data: Vec<u8>,
}

/// What went wrong for a client.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClientError {
    /// No contact took the session; each contact's answer.
    #[error("no member took the client: {0}")]
    Connect(String),
    /// The member dropped this client (it fell behind, the member stopped, or its
    /// certificate was revoked or expired).
    #[error("dropped by the member: {0}")]
    Dropped(String),
    /// The connection to the member ended.
    #[error("disconnected from the member: {0}")]
    Disconnected(String),
    /// No answer within the wait.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The member refused the request, or sent something a client cannot take.
    #[error("{0}")]
    Refused(String),
}

/// What a client receives besides replies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A message delivered in a subscribed subgroup.
    Relay(Relayed),
    /// A message from the member's client handler (the application's protocol).
    Push(Vec<u8>),
}

/// Most events handed over at once.
const BATCH: usize = 256;
/// Batches a client holds unreceived (so at most 4096 events); past this its
/// reader stops reading, so the member's buffer for it fills and the member drops
/// it (a client that does not keep up is dropped, not buffered without bound at
/// either end).
const EVENTS: usize = 16;

/// Events received and not taken yet: relays, pushes.
type Held = (VecDeque<Relayed>, VecDeque<Vec<u8>>);

/// Keeps an event for the call that takes its kind.
fn hold(h: &mut Held, e: Event) {
    match e {
        Event::Relay(m) => h.0.push_back(m),
        Event::Push(b) => h.1.push_back(b),
    }
}

/// A reply waiter's answer.
type Answer = Result<Vec<u8>, ClientError>;

/// What the reader thread of one connection hands on.
enum Incoming {
    /// Events in arrival order, as many as one read of the connection brought (up
    /// to [`BATCH`]): one hand-over per batch, not one per message.
    Events(Vec<Event>),
    /// The connection ended: dropped (true) or lost (false), and why.
    Ended(u64, bool, String),
}

/// One connection to a member.
#[derive(Debug)]
struct Conn {
    /// Counts connections: what an older connection's reader says is stale.
    gen: u64,
    at: usize,
    node: NodeId,
    /// The session's id and token.
    session: Session,
    /// The sending end (the reader thread has the receiving one).
    stream: Link,
    /// Set once this connection ended: every call returns it until a reconnect.
    ended: Option<ClientError>,
}

/// What the client shares with its reader threads.
#[derive(Debug, Default)]
struct Shared {
    /// Requests waiting for their reply, by id.
    waiters: Mutex<HashMap<u64, SyncSender<Answer>>>,
    /// How the last connection whose reader ended ended, with its `gen`: a send
    /// that fails on a closed connection reports this (the member's reason for a
    /// drop) rather than the broken pipe.
    ended: Mutex<Option<(u64, ClientError)>>,
}

type Pending = Arc<Shared>;

/// A session with one member (see the module docs). Every method takes `&self`:
/// one thread may wait in [`Client::recv_event`] while others send and request.
#[derive(Debug)]
pub struct Client {
    contacts: Vec<SocketAddr>,
    id: u64,
    creds: Option<Credentials>,
    conn: Mutex<Conn>,
    pending: Pending,
    events: Mutex<Receiver<Incoming>>,
    tx: SyncSender<Incoming>,
    /// Events read past by [`Client::recv`] (pushes) or [`Client::recv_push`] (relays).
    held: Mutex<Held>,
    subscribed: Mutex<Vec<usize>>,
    next_request: AtomicU64,
}

/// Opens a session at `addr`: the member's node id and the connection, or why not.
/// A session's id and the token that proves it (see [`Message::ClientWelcome`]).
type Session = (u64, [u8; 16]);

fn open(
    addr: SocketAddr,
    resume: Option<Session>,
    timeout: Duration,
    creds: Option<&Credentials>,
) -> Result<(NodeId, Session, Link), String> {
    let mut s = Link::connect(addr, timeout, creds).map_err(|e| e.to_string())?;
    s.stream.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    s.stream.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    s.send(&Message::ClientHello { resume }).map_err(|e| e.to_string())?;
    match s.recv().map_err(|e| e.to_string())? {
        Message::ClientWelcome { client, .. } if resume.is_some_and(|(id, _)| id != client) => {
            Err(format!("resumed session {client:#x} in place of {:#x}", resume.map_or(0, |r| r.0)))
        }
        Message::ClientWelcome { node, client, token } => {
            s.stream.set_read_timeout(None).map_err(|e| e.to_string())?;
            Ok((NodeId(node), (client, token), s))
        }
        Message::JoinRefused { reason } => Err(format!("refused: {reason}")),
        other => Err(format!("unexpected answer {other:?}")),
    }
}

/// Reads the member's frames until the connection ends (through a buffer: relayed
/// frames are small and many, and two reads a frame cost more than the frame):
/// replies to their waiters, everything else to the client's event queue.
fn read_all(mut link: Link, gen: u64, tx: SyncSender<Incoming>, pending: Pending) {
    let Ok(s) = link.stream.try_clone() else {
        let _ = tx.send(Incoming::Ended(gen, false, "no handle on the connection".into()));
        return;
    };
    let mut r = std::io::BufReader::with_capacity(1 << 16, s);
    let mut batch = Vec::new();
    let (dropped, why) = loop {
        // What was read is handed over before a read that may wait.
        let hand_over = !batch.is_empty() && (r.buffer().is_empty() || batch.len() >= BATCH);
        if hand_over && tx.send(Incoming::Events(std::mem::take(&mut batch))).is_err() {
            break (false, "the client was dropped".into());
        }
        let event = match link.recv_from(&mut r) {
            Ok(Message::Relay { view, subgroup, index, sender, body }) => Event::Relay(Relayed {
                view: ViewId(view),
                subgroup: subgroup as usize,
                index,
                sender: NodeId(sender),
                data: body,
            }),
            Ok(Message::Push { body }) => Event::Push(body),
            Ok(Message::Reply { id, body }) => {
                if let Some(w) = lock(&pending.waiters).remove(&id) {
                    let _ = w.send(Ok(body));
                }
                continue;
            }
            Ok(Message::JoinRefused { reason }) => {
                // A refused request: the oldest waiter is the one (requests are
                // answered in order on a session).
                let mut p = lock(&pending.waiters);
                if let Some(&id) = p.keys().min() {
                    if let Some(w) = p.remove(&id) {
                        let _ = w.send(Err(ClientError::Refused(reason)));
                    }
                }
                continue;
            }
            Ok(Message::ClientDropped { reason }) => break (true, reason),
            Ok(other) => {
                let mut what = format!("{other:?}");
                what.truncate(120);
                break (false, format!("unexpected frame {what}"));
            }
            Err(e) => break (false, e.to_string()),
        };
        batch.push(event);
    };
    if !batch.is_empty() {
        let _ = tx.send(Incoming::Events(batch));
    }
    let _ = r.get_ref().shutdown(Shutdown::Both);
    let err = if dropped { ClientError::Dropped(why.clone()) } else { ClientError::Disconnected(why.clone()) };
    *lock(&pending.ended) = Some((gen, err.clone()));
    for (_, w) in lock(&pending.waiters).drain() {
        let _ = w.send(Err(err.clone()));
    }
    let _ = tx.send(Incoming::Ended(gen, dropped, why));
}

impl Client {
    /// Connects to the first of `contacts` (members' control addresses) that takes
    /// the session, trying them in order, each for up to `timeout`.
    ///
    /// Authenticates with the secret of `SPINDLE_SECRET_FILE` if that is set
    /// ([`Client::connect_with`] names credentials).
    pub fn connect(contacts: &[SocketAddr], timeout: Duration) -> Result<Client, ClientError> {
        let creds =
            crate::config::Security::default().credentials().map_err(|e| ClientError::Connect(e.to_string()))?;
        Client::connect_with(contacts, timeout, creds)
    }

    /// [`Client::connect`] with the group's credentials (a secret, a named
    /// identity's key, or certificates), or none.
    pub fn connect_with(
        contacts: &[SocketAddr],
        timeout: Duration,
        creds: Option<Credentials>,
    ) -> Result<Client, ClientError> {
        let pending = Pending::default();
        let (tx, rx) = sync_channel(EVENTS);
        let conn = Self::first_of(contacts, 0, None, timeout, 1, &tx, &pending, creds.as_ref())?;
        Ok(Client {
            contacts: contacts.to_vec(),
            id: conn.session.0,
            creds,
            conn: Mutex::new(conn),
            pending,
            events: Mutex::new(rx),
            tx,
            held: Mutex::default(),
            subscribed: Mutex::default(),
            next_request: AtomicU64::new(0),
        })
    }

    /// Tries `contacts` in order from `start` (wrapping around) until one takes the
    /// session; starts the reader of that connection.
    #[allow(clippy::too_many_arguments)] // the session's parts, passed at connect and reconnect alike
    fn first_of(
        contacts: &[SocketAddr],
        start: usize,
        resume: Option<Session>,
        timeout: Duration,
        gen: u64,
        tx: &SyncSender<Incoming>,
        pending: &Pending,
        creds: Option<&Credentials>,
    ) -> Result<Conn, ClientError> {
        if contacts.is_empty() {
            return Err(ClientError::Connect("no contacts given".into()));
        }
        let mut why = Vec::new();
        for i in 0..contacts.len() {
            let at = (start + i) % contacts.len();
            match open(contacts[at], resume, timeout, creds) {
                Ok((node, session, link)) => {
                    let (reader, stream) = link.split().map_err(|e| ClientError::Connect(e.to_string()))?;
                    let (tx, pending) = (tx.clone(), pending.clone());
                    std::thread::Builder::new()
                        .name("spindle-client".into())
                        .spawn(move || read_all(reader, gen, tx, pending))
                        .map_err(|e| ClientError::Connect(format!("no reader thread: {e}")))?;
                    return Ok(Conn { gen, at, node, session, stream, ended: None });
                }
                Err(e) => why.push(format!("{}: {e}", contacts[at])),
            }
        }
        Err(ClientError::Connect(why.join("; ")))
    }

    /// The member serving this client, and its control address.
    pub fn member(&self) -> (NodeId, SocketAddr) {
        let c = lock(&self.conn);
        (c.node, self.contacts[c.at])
    }

    /// This session's id: random, given by the first member it reached, and kept
    /// across moves to other members (each proves it with the session's token).
    pub fn id(&self) -> u64 {
        self.id
    }

    fn send(&self, m: &Message) -> Result<(), ClientError> {
        let bytes = encode(m).map_err(|e| ClientError::Refused(e.to_string()))?;
        let mut c = lock(&self.conn);
        if let Some(e) = &c.ended {
            return Err(e.clone());
        }
        if let Err(e) = c.stream.send_frame(&[&bytes]) {
            // The member may have said why it closed (a drop): its reader is
            // about to hear it, so wait for that a moment (bounded).
            let gen = c.gen;
            let said = || lock(&self.pending.ended).as_ref().filter(|(g, _)| *g == gen).map(|(_, e)| e.clone());
            let deadline = Instant::now() + Duration::from_millis(500);
            let mut why = said();
            while why.is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
                why = said();
            }
            let _ = c.stream.stream.shutdown(Shutdown::Both);
            return Err(c.ended.get_or_insert(why.unwrap_or(ClientError::Disconnected(e.to_string()))).clone());
        }
        Ok(())
    }

    /// Asks the member for every message delivered in subgroup `k` from now on
    /// (the member must be in `k` to deliver it).
    pub fn subscribe(&self, k: usize) -> Result<(), ClientError> {
        let subgroup = u32::try_from(k).map_err(|_| ClientError::Refused(format!("subgroup {k} out of range")))?;
        self.send(&Message::Subscribe { subgroup })?;
        let mut subs = lock(&self.subscribed);
        if !subs.contains(&k) {
            subs.push(k);
        }
        Ok(())
    }

    /// Sends `body` to the member's client handler, one way (see
    /// [`crate::group::ClientHandler::post`]).
    pub fn post(&self, body: &[u8]) -> Result<(), ClientError> {
        self.send(&Message::Post { body: body.to_vec() })
    }

    /// The next event (relayed message or push), waiting up to `within`; `Ok(None)`
    /// if none came. Once the session ends, the error says why (and every call
    /// returns it until [`Client::reconnect`]).
    pub fn recv_event(&self, within: Duration) -> Result<Option<Event>, ClientError> {
        {
            let mut held = lock(&self.held);
            if let Some(m) = held.0.pop_front() {
                return Ok(Some(Event::Relay(m)));
            }
            if let Some(b) = held.1.pop_front() {
                return Ok(Some(Event::Push(b)));
            }
        }
        self.next_event(within)
    }

    fn next_event(&self, within: Duration) -> Result<Option<Event>, ClientError> {
        if let Some(e) = &lock(&self.conn).ended {
            return Err(e.clone());
        }
        let deadline = Instant::now() + within;
        let rx = lock(&self.events);
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Incoming::Events(batch)) => {
                    let mut it = batch.into_iter();
                    let Some(first) = it.next() else { continue };
                    let mut held = lock(&self.held);
                    for e in it {
                        hold(&mut held, e);
                    }
                    return Ok(Some(first));
                }
                Ok(Incoming::Ended(gen, dropped, why)) => {
                    let mut c = lock(&self.conn);
                    if gen != c.gen {
                        continue; // an earlier connection's end
                    }
                    let _ = c.stream.stream.shutdown(Shutdown::Both);
                    let e = if dropped { ClientError::Dropped(why) } else { ClientError::Disconnected(why) };
                    return Err(c.ended.get_or_insert(e).clone());
                }
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => unreachable!("the client holds a sender"),
            }
        }
    }

    /// The next relayed message, waiting up to `within`; `Ok(None)` if none came.
    /// Pushes that come meanwhile wait for [`Client::recv_push`].
    pub fn recv(&self, within: Duration) -> Result<Option<Relayed>, ClientError> {
        let want = |e| match e {
            Event::Relay(m) => Ok(m),
            other => Err(other),
        };
        self.recv_kind(within, |h| h.0.pop_front(), want)
    }

    /// The next push, waiting up to `within`; relays that come meanwhile wait for
    /// [`Client::recv`].
    pub fn recv_push(&self, within: Duration) -> Result<Option<Vec<u8>>, ClientError> {
        let want = |e| match e {
            Event::Push(b) => Ok(b),
            other => Err(other),
        };
        self.recv_kind(within, |h| h.1.pop_front(), want)
    }

    /// The next event of one kind (`held` takes one already held, `want` picks it
    /// out of an event); events of the other kind are held for their receiver.
    fn recv_kind<T>(
        &self,
        within: Duration,
        held: impl Fn(&mut Held) -> Option<T>,
        want: impl Fn(Event) -> Result<T, Event>,
    ) -> Result<Option<T>, ClientError> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(x) = held(&mut lock(&self.held)) {
                return Ok(Some(x));
            }
            match self.next_event(deadline.saturating_duration_since(Instant::now()))? {
                Some(e) => match want(e) {
                    Ok(x) => return Ok(Some(x)),
                    Err(other) => hold(&mut lock(&self.held), other),
                },
                None => return Ok(None),
            }
        }
    }

    /// Sends `body` to the member's request handler (its client handler, if it has
    /// one; else the handler [`crate::group::Group::request`] reaches) and waits up to
    /// `within` for the answer. Other threads may receive meanwhile.
    pub fn request(&self, body: &[u8], within: Duration) -> Result<Vec<u8>, ClientError> {
        let id = self.next_request.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = sync_channel(1);
        lock(&self.pending.waiters).insert(id, tx);
        if let Err(e) = self.send(&Message::Request { id, body: body.to_vec() }) {
            lock(&self.pending.waiters).remove(&id);
            return Err(e);
        }
        match rx.recv_timeout(within) {
            Ok(answer) => answer,
            Err(_) => {
                lock(&self.pending.waiters).remove(&id);
                Err(ClientError::Timeout(within))
            }
        }
    }

    /// Connects to the next contact that takes the session (after the one in use,
    /// wrapping around) and subscribes again to every subgroup this client had.
    /// Messages delivered in between are not replayed; events of the old
    /// connection not yet received are dropped.
    pub fn reconnect(&self, timeout: Duration) -> Result<(), ClientError> {
        {
            let mut c = lock(&self.conn);
            let _ = c.stream.stream.shutdown(Shutdown::Both);
            let (contacts, tx, pending) = (&self.contacts, &self.tx, &self.pending);
            let next = Self::first_of(
                contacts,
                c.at + 1,
                Some(c.session),
                timeout,
                c.gen + 1,
                tx,
                pending,
                self.creds.as_ref(),
            );
            match next {
                Ok(conn) => *c = conn,
                Err(e) => {
                    c.ended.get_or_insert(e.clone());
                    return Err(e);
                }
            }
        }
        {
            let mut held = lock(&self.held);
            held.0.clear();
            held.1.clear();
        }
        // Whatever the old connection left queued is stale (its end is skipped by gen).
        let rx = lock(&self.events);
        while rx.try_recv().is_ok() {}
        drop(rx);
        for k in lock(&self.subscribed).clone() {
            self.subscribe(k)?;
        }
        Ok(())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = lock(&self.conn).stream.stream.shutdown(Shutdown::Both);
    }
}
