//! A member's answers: clients' operations (admitted by [`rules::admit`] at the
//! shard's primary), route tables, and the old owner's side of a migration.

use super::{Inner, ShardStore};
use crate::remote::Failure;
use crate::shard::map::{key_hash, MapEdit, Migration, Range, Shard};
use crate::shard::rules::{self, Admit};
use crate::shard::wire::{self, HostStatus, Op, PeerReply, PeerRequest, Reply, Request, Route};
use crate::Update;
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::sync::lock;
use spindle_views::group::{ClientHandler, ClientSession};
use std::sync::{Arc, OnceLock, Weak};

/// The client handler (answers [`NotReady`](Failure::NotReady) until the stores
/// are open). Cheap to clone.
#[derive(Clone, Default)]
pub(super) struct Clients {
    inner: Arc<OnceLock<Weak<Inner>>>,
}

impl Clients {
    pub(super) fn serve(&self, inner: &Arc<Inner>) {
        let _ = self.inner.set(Arc::downgrade(inner));
    }
}

impl ClientHandler for Clients {
    fn request(&self, _session: &ClientSession, body: &[u8]) -> Vec<u8> {
        let reply = match (wire::decode::<Request>(body), self.inner.get().and_then(Weak::upgrade)) {
            (None, _) => Reply::Failed(Failure::Malformed),
            (_, None) => Reply::Failed(Failure::NotReady),
            (Some(Request::Route), Some(i)) => Reply::Route(i.route()),
            (Some(Request::Status), Some(i)) => Reply::Status(Box::new(i.status())),
            (Some(Request::Op { op, .. }), Some(i)) => i.serve(op),
            (Some(Request::Migrate { first, last, to }), Some(i)) => i.migrate(first, last, to),
            (Some(Request::Scan { shard, prefix, limit }), Some(i)) => i.scan(shard, &prefix, limit),
        };
        wire::encode(&reply)
    }

    fn post(&self, _session: &ClientSession, _body: &[u8]) {}
}

/// The most bytes of keys and values read from an old owner on demand kept per
/// migration.
const READ_CACHE_BYTES: usize = 16 << 20;

/// What a read of one key at the old owner found.
enum OnDemand {
    /// Its value there.
    Value(Vec<u8>),
    /// The old owner has no such key.
    Absent,
    /// The old owner is not ready to answer yet.
    NotReady,
}

/// A request admitted in the current view, counted until it answers (the
/// drain an old owner waits for before it hands a range over).
struct Admitted<'a> {
    inner: &'a Inner,
    id: u64,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.inner.view);
        st.inflight.retain(|(i, _)| *i != self.id);
    }
}

impl Inner {
    /// The route table of this member's view.
    pub(super) fn route(&self) -> Route {
        let (map, version) = {
            let st = lock(&self.view);
            (st.map.encode(), st.version)
        };
        let group = self.group();
        let primaries = (0..self.layout.shards)
            .map(|s| {
                let p = self.primary(s)?;
                let addr = group.as_ref()?.control_addr_of(p)?;
                Some((p.0, addr))
            })
            .collect();
        Route { version, map, primaries }
    }

    pub(super) fn status(&self) -> HostStatus {
        let st = lock(&self.view);
        HostStatus {
            node: self.me.0,
            version: st.version,
            primaries: (0..self.layout.shards).map(|s| self.primary(s).map(|p| p.0)).collect(),
            shares: st.map.shares(),
            migrations: st.map.migrations().iter().map(|m| (m.id, m.range.first, m.range.last, m.from, m.to)).collect(),
            keys: (0..self.layout.shards)
                .map(|s| self.store(s).map_or(wire::NO_COPY, |x| x.approximate_len() as u64))
                .collect(),
            pulled: (self.pulled.0.load(Ordering::Relaxed), self.pulled.1.load(Ordering::Relaxed)),
        }
    }

    /// An operator's migration: checked against this member's map, then edited
    /// into the next view (waits for it, up to 10 s).
    fn migrate(&self, first: u64, last: u64, to: Shard) -> Reply {
        if first > last {
            return Reply::Failed(Failure::Malformed);
        }
        let edit = MapEdit::Migrate { range: Range { first, last }, to };
        if let Err(e) = lock(&self.view).map.apply(&edit) {
            return Reply::Refused(e);
        }
        let Some(g) = self.group() else { return Reply::Failed(Failure::Closed) };
        match g.edit_layout(&edit.encode(), std::time::Duration::from_secs(10)) {
            Ok(v) => Reply::Migrating(v.layout().version()),
            Err(_) => Reply::Failed(Failure::NotApplied),
        }
    }

    /// Shard `s`'s part of a scan, at its primary: "wait" while a migration
    /// moves a range into or out of it (the range's keys are at two shards).
    fn scan(&self, s: Shard, prefix: &[u8], limit: u32) -> Reply {
        let (map, wedged) = {
            let st = lock(&self.view);
            (st.map.clone(), st.wedged)
        };
        if s >= self.layout.shards || self.primary(s) != Some(self.me) {
            return Reply::Moved(self.route());
        }
        if wedged || map.migrations().iter().any(|m| m.from == s || m.to == s) {
            return Reply::Wait;
        }
        let Some(store) = self.store(s) else { return Reply::Failed(Failure::NotReady) };
        let limit = limit.min(crate::remote::MAX_SCAN) as usize;
        // The store may still hold keys of a range it dropped after this view's
        // map was read: only the shard's own go out.
        match store.sync().and_then(|_| store.scan(prefix, usize::MAX)) {
            Ok(pairs) => Reply::Pairs(pairs.into_iter().filter(|(k, _)| map.owner_of(k) == s).take(limit).collect()),
            Err(e) => Reply::Failed(Failure::from(&e)),
        }
    }

    /// Admits `key`'s request here, or says why not; the shard's store, the
    /// migration pulling the key if any, and the request's place in flight.
    fn admit(&self, key: &[u8]) -> Result<(Arc<ShardStore>, Option<Migration>, Admitted<'_>), Reply> {
        let mut st = lock(&self.view);
        let s = st.map.owner_of(key);
        if self.primary(s) != Some(self.me) {
            drop(st);
            return Err(Reply::Moved(self.route()));
        }
        let store = self.store(s).ok_or(Reply::Failed(Failure::NotReady))?;
        match rules::admit(&st.map, s, key, st.wedged, |id| store.pull_begun(id)) {
            Admit::Moved => {
                drop(st);
                Err(Reply::Moved(self.route()))
            }
            Admit::Wait => Err(Reply::Wait),
            Admit::Serve { pulling } => {
                st.next += 1;
                let (id, version) = (st.next, st.version);
                st.inflight.push((id, version));
                Ok((store, pulling, Admitted { inner: self, id }))
            }
        }
    }

    /// A client's operation.
    pub(super) fn serve(&self, op: Op) -> Reply {
        let (store, pulling, _admitted) = match self.admit(op.key()) {
            Ok(a) => a,
            Err(r) => return r,
        };
        match (&op, op.writer()) {
            (Op::Write { key, value, .. }, Some(by)) => match store.write(key, value.as_deref(), by) {
                Ok(_) => Reply::Done,
                Err(e) => Reply::Failed(Failure::from(&e)),
            },
            (Op::Get { key }, _) => {
                // Read at the old owner unless a batch this member logged reached it
                // (looked at before the barrier, which then waits for that
                // batch) or a write here claimed it (looked at after: every
                // write of the key acknowledged before this read is applied).
                let batched = |m: &Migration| lock(&self.cursors).get(&m.id).is_some_and(|last| key <= last);
                let pull = pulling.filter(|m| !batched(m));
                if let Err(e) = store.sync_key(key) {
                    return Reply::Failed(Failure::from(&e));
                }
                if let Some(m) = pull.filter(|_| !store.claimed(key)) {
                    match self.read_old_owner(m, key) {
                        // The old owner's value: no write here came before this
                        // read, and the old owner's copy of the range changes no
                        // more, so it is the key's value. Nothing is logged: the
                        // pull's batches bring the same value.
                        OnDemand::Value(v) => return Reply::Value(Some(v)),
                        // Not at the old owner, or no longer (it dropped the range
                        // once every batch was logged here): the store's, after
                        // the barrier again.
                        OnDemand::Absent => {
                            if let Err(e) = store.sync_key(key) {
                                return Reply::Failed(Failure::from(&e));
                            }
                        }
                        OnDemand::NotReady => return Reply::Wait,
                    }
                }
                match store.read_applied(key) {
                    Ok(v) => Reply::Value(v),
                    Err(e) => Reply::Failed(Failure::from(&e)),
                }
            }
            _ => Reply::Failed(Failure::Malformed),
        }
    }

    /// The value of `key` at the old owner of migration `m` (kept here, up to
    /// [`READ_CACHE_BYTES`] per migration, until the migration ends).
    fn read_old_owner(&self, m: Migration, key: &[u8]) -> OnDemand {
        if let Some(v) = lock(&self.read_cache).get(&m.id).and_then(|(c, _)| c.get(key)) {
            return OnDemand::Value(v.clone());
        }
        let req = PeerRequest::ReadKey { migration: m, key: key.to_vec() };
        match self.ask_peer(m.from, &req) {
            Some(PeerReply::Value(Some(v))) => {
                let mut cache = lock(&self.read_cache);
                let (c, bytes) = cache.entry(m.id).or_default();
                if *bytes + key.len() + v.len() <= READ_CACHE_BYTES {
                    *bytes += key.len() + v.len();
                    c.insert(key.to_vec(), v.clone());
                }
                OnDemand::Value(v)
            }
            Some(PeerReply::Value(None)) => OnDemand::Absent,
            _ => OnDemand::NotReady,
        }
    }

    /// Asks shard `s`'s primary; `None` if it did not answer.
    pub(super) fn ask_peer(&self, s: Shard, req: &PeerRequest) -> Option<PeerReply> {
        let to = self.primary(s)?;
        let body = wire::encode(req);
        let reply = match to == self.me {
            true => self.answer_peer(&body),
            false => {
                let g = self.group()?;
                g.request_service(wire::SERVICE, to, &body, std::time::Duration::from_secs(5)).ok()?
            }
        };
        wire::decode(&reply)
    }

    /// Another member's request: the old owner's side of a migration.
    pub(super) fn answer_peer(&self, body: &[u8]) -> Vec<u8> {
        let Some(req) = wire::decode::<PeerRequest>(body) else {
            return wire::encode(&PeerReply::Failed(Failure::Malformed));
        };
        let m = match &req {
            PeerRequest::Ask { migration, .. } | PeerRequest::ReadKey { migration, .. } => *migration,
            PeerRequest::Drop { migration } => *migration,
        };
        let ready = {
            let st = lock(&self.view);
            let drained = st.inflight.iter().all(|(_, v)| *v == st.version);
            rules::source_ready(&st.map, m.from, m.range, drained) && !st.wedged
        };
        let store = match self.store(m.from) {
            Some(s) if ready && self.primary(m.from) == Some(self.me) => s,
            _ => return wire::encode(&PeerReply::NotReady),
        };
        // Everything the log committed is applied before anything is handed over.
        if let Err(e) = store.sync() {
            return wire::encode(&PeerReply::Failed(Failure::from(&e)));
        }
        let reply = match req {
            PeerRequest::Ask { after, max, max_bytes, .. } => {
                match store.batch_of(m.range, after.as_deref(), max, max_bytes) {
                    Ok((pairs, more)) => {
                        let writers =
                            after.is_none().then(|| store.writers().iter().map(|w| (w.client, w.seq)).collect());
                        PeerReply::Batch { pairs, more, writers }
                    }
                    Err(e) => PeerReply::Failed(Failure::from(&e)),
                }
            }
            PeerRequest::ReadKey { key, .. } if m.range.contains(key_hash(&key)) => match store.get(&key) {
                Ok(v) => PeerReply::Value(v),
                Err(e) => PeerReply::Failed(Failure::from(&e)),
            },
            PeerRequest::ReadKey { .. } => PeerReply::Failed(Failure::Malformed),
            PeerRequest::Drop { .. } => match store.record(Update::DropRange { migration: m.id, range: m.range }) {
                Ok(_) => PeerReply::Dropped,
                Err(e) => PeerReply::Failed(Failure::from(&e)),
            },
        };
        wire::encode(&reply)
    }
}
