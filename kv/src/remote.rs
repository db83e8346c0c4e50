//! The store from outside its group: a client handler a member installs
//! ([`Handler`]), and a client ([`KvClient`]) that reaches any member over the
//! group's client sessions (authenticated like members, moving to another member
//! if its member dies). `spindle kv put/get/scan` use it.
//!
//! ```no_run
//! use spindle_kv::remote::{Handler, KvClient};
//! use spindle_kv::Store;
//! use spindle_tailwind::service::{TailwindConfig, TailwindLog};
//! use std::sync::Arc;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let group = spindle_views::config::Config::from_file("node.toml")?;
//! // A member: the handler answers once the store is open.
//! let handler = Handler::new();
//! let h = handler.clone();
//! let log = Arc::new(TailwindLog::start_with(group, TailwindConfig::new("/var/lib/kv/log"), |b| {
//!     b.client_handler(h)
//! })?);
//! let store = Arc::new(Store::open("/var/lib/kv/store".as_ref(), log)?);
//! handler.serve(&store);
//!
//! // Anywhere else: a client of any member.
//! let c = KvClient::connect(&["127.0.0.1:7300".parse()?], None)?;
//! c.put(b"colour", b"blue")?;
//! assert_eq!(c.get(b"colour")?.as_deref(), Some(&b"blue"[..]));
//! # Ok(()) }
//! ```
//!
//! Each request and reply starts with [`VERSION`]; a member answers a request it
//! cannot decode with [`Failure::Malformed`] and goes on.

use crate::{Pair, Store, StoreError};
use serde::{Deserialize, Serialize};
use spindle_tailwind::service::LogService;
use spindle_views::auth::Credentials;
use spindle_views::client::{Client, ClientError};
use spindle_views::group::{ClientHandler, ClientSession};
use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

/// The version byte every request and reply starts with.
pub const VERSION: u8 = 1;
/// The most pairs one scan returns.
pub const MAX_SCAN: u32 = 100_000;

#[derive(Debug, Serialize, Deserialize)]
enum Request {
    Put { key: Vec<u8>, value: Vec<u8> },
    Del { key: Vec<u8> },
    Get { key: Vec<u8> },
    Scan { prefix: Vec<u8>, limit: u32 },
    Status,
}

#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Done { record: u64 },
    Value(Option<Vec<u8>>),
    Pairs(Vec<Pair>),
    Status(StoreStatus),
    Failed(Failure),
}

/// What a member says of its store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStatus {
    /// The member that answered.
    pub node: u32,
    /// The log's primary, if it takes appends now.
    pub primary: Option<u32>,
    /// The log's members (the primary first).
    pub log_members: Vec<u32>,
    /// The next record this member's store applies.
    pub applied: u64,
    /// Keys in its store (the store's estimate).
    pub keys: u64,
}

/// Why a member did not do what was asked (the wire form of [`StoreError`]'s
/// kinds, and the request's own faults).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Failure {
    /// The member's store is not open yet.
    #[error("the member's store is not open yet")]
    NotReady,
    /// The request did not decode (or is of another version).
    #[error("a malformed request")]
    Malformed,
    /// The log did not take the update (a failover, say: retry).
    #[error("the log did not take the update")]
    Log,
    /// The log has no primary now.
    #[error("the log has no primary")]
    NoPrimary,
    /// The update was not applied at the member in time.
    #[error("not applied in time")]
    NotApplied,
    /// The member's store failed (its disk, or its applier).
    #[error("the member's store failed")]
    Store,
    /// The member's store is closing.
    #[error("the member's store is closed")]
    Closed,
}

impl From<&StoreError> for Failure {
    fn from(e: &StoreError) -> Failure {
        match e {
            StoreError::Log(_) => Failure::Log,
            StoreError::NoPrimary => Failure::NoPrimary,
            StoreError::NotApplied(_) => Failure::NotApplied,
            StoreError::Closed => Failure::Closed,
            StoreError::Store(_)
            | StoreError::Damaged
            | StoreError::Thread(_)
            | StoreError::Read(_)
            | StoreError::Behind { .. } => Failure::Store,
        }
    }
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    crate::codec::encode(VERSION, v)
}

fn decode<T: for<'a> Deserialize<'a>>(body: &[u8]) -> Option<T> {
    crate::codec::decode(VERSION, body)
}

/// A member's client handler for the store: answers puts, deletes, gets, scans
/// and status requests from [`KvClient`]s once [`Handler::serve`] gave it the
/// store (until then: [`Failure::NotReady`]). Cheap to clone.
pub struct Handler<L: Deref<Target = LogService> + Send + Sync + 'static> {
    store: Arc<OnceLock<Weak<Store<L>>>>,
}

impl<L: Deref<Target = LogService> + Send + Sync + 'static> Clone for Handler<L> {
    fn clone(&self) -> Self {
        Handler { store: self.store.clone() }
    }
}

impl<L: Deref<Target = LogService> + Send + Sync + 'static> std::fmt::Debug for Handler<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler").field("serving", &self.store.get().is_some()).finish()
    }
}

impl<L: Deref<Target = LogService> + Send + Sync + 'static> Default for Handler<L> {
    fn default() -> Self {
        Handler { store: Arc::new(OnceLock::new()) }
    }
}

impl<L: Deref<Target = LogService> + Send + Sync + 'static> Handler<L> {
    /// A handler with no store yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers with `store` from now on (held weakly: the handler does not keep
    /// the store open). A second call changes nothing.
    pub fn serve(&self, store: &Arc<Store<L>>) {
        let _ = self.store.set(Arc::downgrade(store));
    }

    fn answer(&self, body: &[u8]) -> Reply {
        let Some(req) = decode::<Request>(body) else { return Reply::Failed(Failure::Malformed) };
        let Some(store) = self.store.get().and_then(Weak::upgrade) else { return Reply::Failed(Failure::NotReady) };
        let failed = |e: StoreError| Reply::Failed(Failure::from(&e));
        match req {
            Request::Put { key, value } => store.put(&key, &value).map_or_else(failed, |l| Reply::Done { record: l.0 }),
            Request::Del { key } => store.del(&key).map_or_else(failed, |l| Reply::Done { record: l.0 }),
            Request::Get { key } => store.sync().and_then(|_| store.get(&key)).map_or_else(failed, Reply::Value),
            Request::Scan { prefix, limit } => store
                .sync()
                .and_then(|_| store.scan(&prefix, limit.min(MAX_SCAN) as usize))
                .map_or_else(failed, Reply::Pairs),
            Request::Status => {
                let log = store.log();
                Reply::Status(StoreStatus {
                    node: log.node().0,
                    primary: log.primary().map(|p| p.0),
                    log_members: log.members().iter().map(|m| m.0).collect(),
                    applied: store.applied().0,
                    keys: store.approximate_len() as u64,
                })
            }
        }
    }
}

impl<L: Deref<Target = LogService> + Send + Sync + 'static> ClientHandler for Handler<L> {
    fn request(&self, _session: &ClientSession, body: &[u8]) -> Vec<u8> {
        encode(&self.answer(body))
    }

    fn post(&self, _session: &ClientSession, _body: &[u8]) {}
}

/// Why a client's request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The client session failed (no member reached, or the member went away
    /// and no other took the session).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The member's answer did not decode (another version, or not a store).
    #[error("the member's answer is not a store's")]
    Malformed,
    /// The member answered, but not as asked.
    #[error("the member's answer does not match the request")]
    Unexpected,
    /// The member did not do it.
    #[error(transparent)]
    Failed(#[from] Failure),
}

/// A client of the store: reaches one member (the first of `contacts` that takes
/// it) and moves to the next if that one goes away.
#[derive(Debug)]
pub struct KvClient {
    c: Client,
    timeout: Duration,
}

impl KvClient {
    /// Connects with the group's credentials, a secret or certificates (`None`:
    /// `SPINDLE_SECRET_FILE`'s secret, if set).
    pub fn connect(contacts: &[SocketAddr], creds: Option<Credentials>) -> Result<KvClient, RemoteError> {
        let timeout = Duration::from_secs(10);
        let c = match creds {
            Some(c) => Client::connect_with(contacts, timeout, Some(c))?,
            None => Client::connect(contacts, timeout)?,
        };
        Ok(KvClient { c, timeout })
    }

    /// How long each request waits for its answer (10 s unless set).
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// The member this client talks to now, and its control address.
    pub fn member(&self) -> (u32, SocketAddr) {
        let (n, a) = self.c.member();
        (n.0, a)
    }

    fn call(&self, req: &Request) -> Result<Reply, RemoteError> {
        let body = encode(req);
        let answer = match self.c.request(&body, self.timeout) {
            Err(ClientError::Disconnected(_) | ClientError::Dropped(_)) => {
                // Puts and deletes set a value: asking again at another member is safe.
                self.c.reconnect(self.timeout)?;
                self.c.request(&body, self.timeout)?
            }
            other => other?,
        };
        match decode::<Reply>(&answer) {
            Some(Reply::Failed(f)) => Err(RemoteError::Failed(f)),
            Some(r) => Ok(r),
            None => Err(RemoteError::Malformed),
        }
    }

    /// Sets `key` to `value`; returns the update's record number once the log
    /// acknowledged it.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<u64, RemoteError> {
        match self.call(&Request::Put { key: key.to_vec(), value: value.to_vec() })? {
            Reply::Done { record } => Ok(record),
            _ => Err(RemoteError::Unexpected),
        }
    }

    /// Removes `key` (see [`KvClient::put`]).
    pub fn del(&self, key: &[u8]) -> Result<u64, RemoteError> {
        match self.call(&Request::Del { key: key.to_vec() })? {
            Reply::Done { record } => Ok(record),
            _ => Err(RemoteError::Unexpected),
        }
    }

    /// The value of `key`, read at the member after it applied everything the
    /// log had committed.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, RemoteError> {
        match self.call(&Request::Get { key: key.to_vec() })? {
            Reply::Value(v) => Ok(v),
            _ => Err(RemoteError::Unexpected),
        }
    }

    /// The keys starting with `prefix`, with their values, in key order (at most
    /// `limit`, and at most [`MAX_SCAN`]).
    pub fn scan(&self, prefix: &[u8], limit: u32) -> Result<Vec<Pair>, RemoteError> {
        match self.call(&Request::Scan { prefix: prefix.to_vec(), limit })? {
            Reply::Pairs(p) => Ok(p),
            _ => Err(RemoteError::Unexpected),
        }
    }

    /// What the member says of its store.
    pub fn status(&self) -> Result<StoreStatus, RemoteError> {
        match self.call(&Request::Status)? {
            Reply::Status(s) => Ok(s),
            _ => Err(RemoteError::Unexpected),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_of_another_version_or_with_trailing_bytes_do_not_decode() {
        let good = encode(&Request::Get { key: b"k".to_vec() });
        assert!(decode::<Request>(&good).is_some());
        let mut other = good.clone();
        other[0] = VERSION + 1;
        assert!(decode::<Request>(&other).is_none());
        let mut longer = good.clone();
        longer.push(0);
        assert!(decode::<Request>(&longer).is_none());
        assert!(decode::<Request>(&[]).is_none());
        assert!(decode::<Request>(&good[..good.len() - 1]).is_none());
    }
}
