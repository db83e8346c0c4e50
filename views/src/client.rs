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
//! Sending into a subgroup on a client's behalf is not built yet. A subscription
//! names a subgroup by its index in each view: meant for layouts whose subgroups
//! keep their numbers (not for one that renumbers them, as the DDS topic table does).
//!
//! ```no_run
//! use std::time::Duration;
//! use views::client::Client;
//! let contacts = ["127.0.0.1:7000".parse().unwrap(), "127.0.0.1:7010".parse().unwrap()];
//! let mut c = Client::connect(&contacts, Duration::from_secs(5)).unwrap();
//! c.subscribe(0).unwrap();
//! while let Some(m) = c.recv(Duration::from_secs(1)).unwrap() {
//!     println!("view {} #{} from {}: {} bytes", m.view.0, m.index, m.sender, m.data.len());
//! }
//! ```

use crate::view::ViewId;
use crate::wire::{encode, read_frame, Message};
use sst::transport::NodeId;
use std::collections::VecDeque;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
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
    /// The member dropped this client (it fell behind, or the member stopped).
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

enum Incoming {
    Relay(Relayed),
    Reply { id: u64, body: Vec<u8> },
    Refused(String),
    Dropped(String),
    Closed(String),
}

/// A session with one member (see the module docs).
#[derive(Debug)]
pub struct Client {
    contacts: Vec<SocketAddr>,
    id: u64,
    /// The contact in use.
    at: usize,
    node: NodeId,
    stream: TcpStream,
    rx: Receiver<Incoming>,
    /// Relays that came while a request waited for its reply.
    early: VecDeque<Relayed>,
    subscribed: Vec<usize>,
    next_request: u64,
    /// Set once the session ended: every call returns it.
    ended: Option<ClientError>,
}

/// A client id: distinct per process and call, with no coordination.
fn fresh_id() -> u64 {
    use sst::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let mut seed = Vec::new();
    seed.extend_from_slice(&std::process::id().to_le_bytes());
    seed.extend_from_slice(&t.to_le_bytes());
    seed.extend_from_slice(&N.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    sst::hash::digest(&seed)
}

/// Opens a session at `addr`: the member's node id and the connection, or why not.
fn open(addr: SocketAddr, id: u64, timeout: Duration) -> Result<(NodeId, TcpStream), String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    s.write_all(&encode(&Message::ClientHello { client: id }).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    match read_frame(&mut s).map_err(|e| e.to_string())? {
        Message::ClientWelcome { node } => {
            s.set_read_timeout(None).map_err(|e| e.to_string())?;
            Ok((NodeId(node), s))
        }
        Message::JoinRefused { reason } => Err(format!("refused: {reason}")),
        other => Err(format!("unexpected answer {other:?}")),
    }
}

/// Reads the member's frames until the connection ends (through a buffer: relayed
/// frames are small and many, and two reads a frame cost more than the frame).
fn read_all(s: TcpStream, tx: std::sync::mpsc::Sender<Incoming>) {
    let mut r = std::io::BufReader::with_capacity(1 << 16, s);
    loop {
        let m = match read_frame(&mut r) {
            Ok(Message::Relay { view, subgroup, index, sender, body }) => Incoming::Relay(Relayed {
                view: ViewId(view),
                subgroup: subgroup as usize,
                index,
                sender: NodeId(sender),
                data: body,
            }),
            Ok(Message::Reply { id, body }) => Incoming::Reply { id, body },
            Ok(Message::JoinRefused { reason }) => Incoming::Refused(reason),
            Ok(Message::ClientDropped { reason }) => Incoming::Dropped(reason),
            Ok(other) => {
                let mut what = format!("{other:?}");
                what.truncate(120);
                Incoming::Closed(format!("unexpected frame {what}"))
            }
            Err(e) => Incoming::Closed(e.to_string()),
        };
        let last = matches!(m, Incoming::Dropped(_) | Incoming::Closed(_));
        if tx.send(m).is_err() || last {
            let _ = r.get_ref().shutdown(Shutdown::Both);
            return;
        }
    }
}

impl Client {
    /// Connects to the first of `contacts` (members' control addresses) that takes
    /// the session, trying them in order, each for up to `timeout`.
    pub fn connect(contacts: &[SocketAddr], timeout: Duration) -> Result<Client, ClientError> {
        let id = fresh_id();
        let (at, node, stream, rx) = Self::first_of(contacts, 0, id, timeout)?;
        Ok(Client {
            contacts: contacts.to_vec(),
            id,
            at,
            node,
            stream,
            rx,
            early: VecDeque::new(),
            subscribed: Vec::new(),
            next_request: 0,
            ended: None,
        })
    }

    /// Tries `contacts` in order from `start` (wrapping around) until one takes the
    /// session; starts the reader of that connection.
    fn first_of(
        contacts: &[SocketAddr],
        start: usize,
        id: u64,
        timeout: Duration,
    ) -> Result<(usize, NodeId, TcpStream, Receiver<Incoming>), ClientError> {
        if contacts.is_empty() {
            return Err(ClientError::Connect("no contacts given".into()));
        }
        let mut why = Vec::new();
        for i in 0..contacts.len() {
            let at = (start + i) % contacts.len();
            match open(contacts[at], id, timeout) {
                Ok((node, stream)) => {
                    let reader = stream.try_clone().map_err(|e| ClientError::Connect(e.to_string()))?;
                    let (tx, rx) = channel();
                    std::thread::Builder::new()
                        .name("spindle-client".into())
                        .spawn(move || read_all(reader, tx))
                        .map_err(|e| ClientError::Connect(format!("no reader thread: {e}")))?;
                    return Ok((at, node, stream, rx));
                }
                Err(e) => why.push(format!("{}: {e}", contacts[at])),
            }
        }
        Err(ClientError::Connect(why.join("; ")))
    }

    /// The member serving this client, and its control address.
    pub fn member(&self) -> (NodeId, SocketAddr) {
        (self.node, self.contacts[self.at])
    }

    /// This client's id (random; unique among the clients of a member).
    pub fn id(&self) -> u64 {
        self.id
    }

    fn send(&mut self, m: &Message) -> Result<(), ClientError> {
        if let Some(e) = &self.ended {
            return Err(e.clone());
        }
        let bytes = encode(m).map_err(|e| ClientError::Refused(e.to_string()))?;
        self.stream.write_all(&bytes).map_err(|e| self.end(ClientError::Disconnected(e.to_string())))
    }

    fn end(&mut self, e: ClientError) -> ClientError {
        let _ = self.stream.shutdown(Shutdown::Both);
        self.ended.get_or_insert(e).clone()
    }

    /// Asks the member for every message delivered in subgroup `k` from now on
    /// (the member must be in `k` to deliver it).
    pub fn subscribe(&mut self, k: usize) -> Result<(), ClientError> {
        let subgroup = u32::try_from(k).map_err(|_| ClientError::Refused(format!("subgroup {k} out of range")))?;
        self.send(&Message::Subscribe { subgroup })?;
        if !self.subscribed.contains(&k) {
            self.subscribed.push(k);
        }
        Ok(())
    }

    /// The next relayed message, waiting up to `within`; `Ok(None)` if none came.
    pub fn recv(&mut self, within: Duration) -> Result<Option<Relayed>, ClientError> {
        if let Some(m) = self.early.pop_front() {
            return Ok(Some(m));
        }
        if let Some(e) = &self.ended {
            return Err(e.clone());
        }
        let deadline = Instant::now() + within;
        loop {
            match self.rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Incoming::Relay(m)) => return Ok(Some(m)),
                Ok(Incoming::Reply { .. } | Incoming::Refused(_)) => continue, // a request that gave up
                Ok(Incoming::Dropped(why)) => return Err(self.end(ClientError::Dropped(why))),
                Ok(Incoming::Closed(why)) => return Err(self.end(ClientError::Disconnected(why))),
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.end(ClientError::Disconnected("reader ended".into())))
                }
            }
        }
    }

    /// Sends `body` to the member's request handler (as [`crate::group::Group::request`]
    /// does between members) and waits up to `within` for the answer. Relays that
    /// come meanwhile wait for [`Client::recv`].
    pub fn request(&mut self, body: &[u8], within: Duration) -> Result<Vec<u8>, ClientError> {
        self.next_request += 1;
        let id = self.next_request;
        self.send(&Message::Request { id, body: body.to_vec() })?;
        let deadline = Instant::now() + within;
        loop {
            match self.rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Incoming::Relay(m)) => self.early.push_back(m),
                Ok(Incoming::Reply { id: got, body }) if got == id => return Ok(body),
                Ok(Incoming::Reply { .. }) => continue, // an earlier request that gave up
                Ok(Incoming::Refused(why)) => return Err(ClientError::Refused(why)),
                Ok(Incoming::Dropped(why)) => return Err(self.end(ClientError::Dropped(why))),
                Ok(Incoming::Closed(why)) => return Err(self.end(ClientError::Disconnected(why))),
                Err(RecvTimeoutError::Timeout) => return Err(ClientError::Timeout(within)),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.end(ClientError::Disconnected("reader ended".into())))
                }
            }
        }
    }

    /// After the session ended: connects to the next contact that takes it (after
    /// the one in use, wrapping around) and subscribes again to every subgroup this
    /// client had. Messages delivered in between are not replayed.
    pub fn reconnect(&mut self, timeout: Duration) -> Result<(), ClientError> {
        let _ = self.stream.shutdown(Shutdown::Both);
        let (at, node, stream, rx) = Self::first_of(&self.contacts, self.at + 1, self.id, timeout)?;
        (self.at, self.node, self.stream, self.rx) = (at, node, stream, rx);
        self.early.clear();
        self.ended = None;
        for k in self.subscribed.clone() {
            self.subscribe(k)?;
        }
        Ok(())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}
