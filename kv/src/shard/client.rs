//! A client of a sharded store: it keeps the route table (the map and each
//! shard's primary), sends each operation straight to its key's shard primary
//! with the map's version, and on "moved" takes the table that came with the
//! answer and asks again; no lookup is on the way of an operation. Each write
//! carries the client's number and a request number, so asking again after a
//! lost answer (a failed primary) applies it once.

use super::map::ShardMap;
use super::wire::{self, HostStatus, Op, Reply, Request, Route};
use crate::remote::{Failure, RemoteError};
use spindle_sst::sync::atomic::{AtomicU64, Ordering};
use spindle_sst::sync::lock;
use spindle_views::auth::Credentials;
use spindle_views::client::{Client, ClientError};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long an operation keeps asking (through moves, waits and failovers).
pub const DEADLINE: Duration = Duration::from_secs(30);
/// The longest pause before asking again after "wait" or a failure (the first
/// is [`FIRST_PAUSE`], each next one twice as long).
const PAUSE: Duration = Duration::from_millis(20);
/// The first pause.
const FIRST_PAUSE: Duration = Duration::from_micros(200);

/// Why a migration asked for did not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigrateError {
    /// The map refused it (the range has two owners or is moving, no such
    /// shard, the map is full).
    #[error(transparent)]
    Refused(super::MapError),
    /// No member took it.
    #[error(transparent)]
    Remote(RemoteError),
}

/// A client of a sharded store (see the module docs). One operation at a time
/// per client value (the request numbers follow each other).
pub struct ShardClient {
    contacts: Vec<SocketAddr>,
    creds: Option<Credentials>,
    route: Mutex<Option<(Route, ShardMap)>>,
    sessions: Mutex<HashMap<SocketAddr, Arc<Client>>>,
    id: u64,
    seq: AtomicU64,
    /// One operation at a time.
    one: Mutex<()>,
    timeout: Duration,
}

impl std::fmt::Debug for ShardClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardClient").field("id", &self.id).finish()
    }
}

/// A client number: random (the clock, the process and a counter, mixed).
fn client_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let x = nanos ^ (u64::from(std::process::id()) << 32) ^ NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9e37);
    spindle_views::layout::mix(x).max(1)
}

impl ShardClient {
    /// A client that learns the route table from the first of `contacts` that
    /// answers (credentials as [`crate::remote::KvClient::connect`]'s).
    pub fn connect(contacts: &[SocketAddr], creds: Option<Credentials>) -> Result<ShardClient, RemoteError> {
        let c = ShardClient {
            contacts: contacts.to_vec(),
            creds,
            route: Mutex::new(None),
            sessions: Mutex::new(HashMap::new()),
            id: client_id(),
            seq: AtomicU64::new(0),
            one: Mutex::new(()),
            timeout: Duration::from_secs(10),
        };
        c.refresh(None)?;
        Ok(c)
    }

    fn session(&self, addr: SocketAddr) -> Result<Arc<Client>, RemoteError> {
        if let Some(c) = lock(&self.sessions).get(&addr) {
            return Ok(c.clone());
        }
        let c = Arc::new(match &self.creds {
            Some(cr) => Client::connect_with(&[addr], self.timeout, Some(cr.clone()))?,
            None => Client::connect(&[addr], self.timeout)?,
        });
        lock(&self.sessions).insert(addr, c.clone());
        Ok(c)
    }

    fn ask(&self, addr: SocketAddr, req: &Request) -> Result<Reply, RemoteError> {
        let s = self.session(addr)?;
        match s.request(&wire::encode(req), self.timeout) {
            Ok(body) => wire::decode(&body).ok_or(RemoteError::Malformed),
            Err(e) => {
                lock(&self.sessions).remove(&addr);
                Err(e.into())
            }
        }
    }

    /// Takes `route` (a newer one only), or asks the contacts for one.
    fn refresh(&self, route: Option<Route>) -> Result<(), RemoteError> {
        let route = match route {
            Some(r) => r,
            None => {
                let mut last = RemoteError::Client(ClientError::Connect("no contact answered".into()));
                let mut got = None;
                for a in &self.contacts {
                    match self.ask(*a, &Request::Route) {
                        Ok(Reply::Route(r)) => {
                            got = Some(r);
                            break;
                        }
                        Ok(_) => last = RemoteError::Unexpected,
                        Err(e) => last = e,
                    }
                }
                got.ok_or(last)?
            }
        };
        let map = ShardMap::decode(&route.map).map_err(|_| RemoteError::Malformed)?;
        let mut cur = lock(&self.route);
        if cur.as_ref().map_or(true, |(r, _)| r.version <= route.version) {
            *cur = Some((route, map));
        }
        Ok(())
    }

    /// Runs `op` at its key's shard primary until it is answered (see the
    /// module docs).
    fn run(&self, op: Op) -> Result<Reply, RemoteError> {
        self.until_answered(
            |map| usize::from(map.owner_of(op.key())),
            |version| Request::Op { version, op: op.clone() },
        )
    }

    /// Runs `req` at shard `shard`'s primary until it is answered.
    fn run_at(&self, shard: u16, req: &Request) -> Result<Reply, RemoteError> {
        self.until_answered(|_| usize::from(shard), |_| req.clone())
    }

    /// Sends the request `make(version)` to the primary of shard `shard_of(map)`,
    /// following moves, waits and failures until it is answered or [`DEADLINE`].
    fn until_answered(
        &self,
        shard_of: impl Fn(&ShardMap) -> usize,
        make: impl Fn(u64) -> Request,
    ) -> Result<Reply, RemoteError> {
        let deadline = Instant::now() + DEADLINE;
        let mut last = RemoteError::Failed(Failure::NoPrimary);
        let mut pause = FIRST_PAUSE;
        let mut backoff = || {
            std::thread::sleep(pause);
            pause = (pause * 2).min(PAUSE);
        };
        while Instant::now() < deadline {
            let target = {
                let r = lock(&self.route);
                r.as_ref().map(|(route, map)| (route.version, route.primaries.get(shard_of(map)).copied().flatten()))
            };
            let (version, addr) = match target {
                Some((v, Some((_, addr)))) => (v, addr),
                _ => {
                    backoff();
                    let _ = self.refresh(None);
                    continue;
                }
            };
            match self.ask(addr, &make(version)) {
                Ok(Reply::Moved(route)) => {
                    // The member's table; if no newer than this one (a primary
                    // changing hands), pause before asking again.
                    let advanced = route.version > version;
                    let _ = self.refresh(Some(route));
                    if !advanced {
                        backoff();
                    }
                }
                Ok(Reply::Wait) => backoff(),
                Ok(Reply::Failed(f @ (Failure::Malformed | Failure::Store))) => return Err(f.into()),
                Ok(Reply::Failed(f)) => {
                    last = f.into();
                    backoff();
                    let _ = self.refresh(None);
                }
                Ok(r) => return Ok(r),
                // Not this protocol's answer (not a sharded store): asking again
                // cannot help.
                Err(RemoteError::Malformed) => return Err(RemoteError::Malformed),
                Err(e) => {
                    last = e;
                    backoff();
                    let _ = self.refresh(None);
                }
            }
        }
        Err(last)
    }

    fn write(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), RemoteError> {
        let _one = lock(&self.one);
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let op = Op::Write { key: key.to_vec(), value: value.map(<[u8]>::to_vec), by: (self.id, seq) };
        match self.run(op)? {
            Reply::Done => Ok(()),
            _ => Err(RemoteError::Unexpected),
        }
    }

    /// Sets `key` to `value`, once its shard's log acknowledged it.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<(), RemoteError> {
        self.write(key, Some(value))
    }

    /// Removes `key` (see [`ShardClient::put`]).
    pub fn del(&self, key: &[u8]) -> Result<(), RemoteError> {
        self.write(key, None)
    }

    /// The value of `key`, read at its shard's primary.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, RemoteError> {
        let _one = lock(&self.one);
        match self.run(Op::Get { key: key.to_vec() })? {
            Reply::Value(v) => Ok(v),
            _ => Err(RemoteError::Unexpected),
        }
    }

    /// The keys starting with `prefix`, with their values, in key order, at most
    /// `limit` (and [`crate::remote::MAX_SCAN`]): each shard's part read at its
    /// primary, one after another, so the whole is not one moment's snapshot
    /// (each part is); a shard a range is moving into or out of is asked again
    /// until the move ends.
    pub fn scan(&self, prefix: &[u8], limit: u32) -> Result<Vec<crate::Pair>, RemoteError> {
        let _one = lock(&self.one);
        let shards = lock(&self.route).as_ref().map_or(0, |(r, _)| r.primaries.len());
        let mut all = Vec::new();
        for shard in 0..shards as u16 {
            match self.run_at(shard, &Request::Scan { shard, prefix: prefix.to_vec(), limit })? {
                Reply::Pairs(p) => all.extend(p),
                _ => return Err(RemoteError::Unexpected),
            }
        }
        all.sort();
        all.truncate(limit.min(crate::remote::MAX_SCAN) as usize);
        Ok(all)
    }

    /// The route table this client holds (asked for if it holds none).
    pub fn route(&self) -> Option<Route> {
        lock(&self.route).as_ref().map(|(r, _)| r.clone())
    }

    /// What the first contact that answers says of the store.
    pub fn status(&self) -> Result<HostStatus, RemoteError> {
        self.status_of(&self.contacts)
    }

    /// What the first of `members` that answers says of the store.
    pub fn status_of(&self, members: &[SocketAddr]) -> Result<HostStatus, RemoteError> {
        let mut last = RemoteError::Client(ClientError::Connect("no contact answered".into()));
        for a in members {
            match self.ask(*a, &Request::Status) {
                Ok(Reply::Status(s)) => return Ok(*s),
                Ok(_) => last = RemoteError::Unexpected,
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Moves `range` (owned by one shard now) to shard `to`; returns the map
    /// version that holds the move (the new owner serves the range from then on
    /// and pulls its records; see [`ShardClient::status`]). A move the map
    /// refuses is [`MigrateError::Refused`].
    pub fn migrate(&self, range: super::Range, to: super::Shard) -> Result<u64, MigrateError> {
        let req = Request::Migrate { first: range.first, last: range.last, to };
        let mut last = MigrateError::Remote(RemoteError::Client(ClientError::Connect("no contact answered".into())));
        for a in &self.contacts {
            match self.ask(*a, &req) {
                Ok(Reply::Migrating(v)) => return Ok(v),
                Ok(Reply::Refused(e)) => return Err(MigrateError::Refused(e)),
                Ok(Reply::Failed(f)) => last = MigrateError::Remote(f.into()),
                Ok(_) => last = MigrateError::Remote(RemoteError::Unexpected),
                Err(e) => last = MigrateError::Remote(e),
            }
        }
        Err(last)
    }
}
