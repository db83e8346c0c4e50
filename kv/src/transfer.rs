//! State transfer to a store older than the log's trim point (a member that joined
//! after the log was trimmed, or one that was away that long): a checkpoint of
//! another member's store, then the log after it.
//!
//! The asking member's applier, told by the log that the records it needs are
//! gone ([`spindle_tailwind::service::ReadError::Gap`]), asks the log's members in turn
//! (the primary first) for a checkpoint over the log's application requests
//! ([`spindle_tailwind::service::LogService::ask_app`]). The member asked takes a snapshot
//! of its store (its keys and the record its state reaches, read together) and
//! serves it in pages of about 1 MiB, in key order, each page naming the key to go
//! on after; it keeps the snapshot between pages (at most 8 sessions, each for
//! 60 s since its last page). The asking member empties its store, writes the
//! pages as they come, and with the last one records the snapshot's record number
//! as applied, with what the record rules keep besides keys (the first page
//! brings it): a crash midway leaves its old number, so the transfer starts over.
//! Then its applier reads the log from there on. Pages are network input: checked
//! for order and for the same snapshot throughout.

use super::{Inner, Refusal, TransferError, APPLIED};
use crate::table::ShardState;
use fjall::Readable;
use serde::{Deserialize, Serialize};
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use spindle_tailwind::service::LogService;
use std::ops::{Bound, Deref};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of pairs per page (under the control plane's frame limit).
const PAGE: usize = 1 << 20;
/// How long a member keeps a checkpoint between pages.
const KEEP: Duration = Duration::from_secs(60);
/// Checkpoints a member serves at once (the oldest goes first).
const SESSIONS: usize = 8;
/// How long the asker waits for a page.
const ASK_WITHIN: Duration = Duration::from_secs(10);

/// A request for the next page of checkpoint `session`, after key `after` (none:
/// the first page, which opens the session).
#[derive(Debug, Serialize, Deserialize)]
struct Ask {
    session: u64,
    after: Option<Vec<u8>>,
}

#[derive(Debug, Serialize, Deserialize)]
enum Answer {
    /// Pairs in key order; `applied` is the record the checkpoint reaches;
    /// `state` (the first page's) is what the record rules keep besides keys.
    Page {
        applied: u64,
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        done: bool,
        state: Option<Vec<u8>>,
    },
    Refused(Refusal),
}

/// A member's open checkpoints.
#[derive(Default)]
pub(super) struct Sessions {
    open: Mutex<Vec<Session>>,
}

struct Session {
    id: u64,
    snapshot: fjall::Snapshot,
    applied: u64,
    state: Vec<u8>,
    used: Instant,
}

fn encode(a: &Answer) -> Vec<u8> {
    postcard::to_stdvec(a).unwrap_or_default()
}

/// Answers a checkpoint request (the store's application-request handler).
pub(super) fn serve<L: Deref<Target = LogService>>(s: &Inner<L>, body: &[u8]) -> Vec<u8> {
    let ask: Ask = match postcard::from_bytes(body) {
        Ok(a) => a,
        Err(_) => return encode(&Answer::Refused(Refusal::Malformed)),
    };
    let mut open = lock(&s.sessions.open);
    open.retain(|x| x.used.elapsed() < KEEP);
    let at = match (open.iter().position(|x| x.id == ask.session), &ask.after) {
        (Some(i), _) => i,
        (None, Some(_)) => return encode(&Answer::Refused(Refusal::Expired)),
        (None, None) => {
            // A lazy store applies only what is asked of it: one that is asked
            // for a checkpoint catches up to the log's commit point, so that an
            // asker its checkpoint was too old for finds it newer next time.
            if let Some(c) = s.log.committed() {
                s.ask_applied(c.0);
            }
            let snapshot = s.db.snapshot();
            let applied = match snapshot.get(&s.meta, APPLIED) {
                Ok(Some(v)) if v.len() == 8 => u64::from_le_bytes(v[..].try_into().expect("8 bytes")),
                Ok(_) => 0,
                Err(_) => return encode(&Answer::Refused(Refusal::Store)),
            };
            let state = match ShardState::load(&snapshot, &s.meta) {
                Ok(Some((st, _))) => st.encode(),
                Ok(None) | Err(_) => return encode(&Answer::Refused(Refusal::Store)),
            };
            if open.len() >= SESSIONS {
                open.remove(0);
            }
            open.push(Session { id: ask.session, snapshot, applied, state, used: Instant::now() });
            open.len() - 1
        }
    };
    let session = &mut open[at];
    session.used = Instant::now();
    let iter = match &ask.after {
        Some(k) => session.snapshot.range::<&[u8], _>(&s.kv, (Bound::Excluded(k.as_slice()), Bound::Unbounded)),
        None => session.snapshot.iter(&s.kv),
    };
    let (mut pairs, mut bytes, mut done) = (Vec::new(), 0, true);
    for guard in iter {
        if bytes >= PAGE {
            done = false;
            break;
        }
        match guard.into_inner() {
            Ok((k, v)) => {
                bytes += k.len() + v.len() + 8;
                pairs.push((k.to_vec(), v.to_vec()));
            }
            Err(_) => return encode(&Answer::Refused(Refusal::Store)),
        }
    }
    let applied = session.applied;
    let state = ask.after.is_none().then(|| session.state.clone());
    if done {
        open.remove(at);
    }
    encode(&Answer::Page { applied, pairs, done, state })
}

/// Replaces this store's contents with a checkpoint of another member's that
/// reaches at least record `floor`; returns the record it reaches (now applied).
pub(super) fn fetch<L: Deref<Target = LogService>>(s: &Inner<L>, floor: u64) -> Result<u64, TransferError> {
    let me = s.log.node();
    let mut why = TransferError::NoMember;
    for m in s.log.members().into_iter().filter(|m| *m != me) {
        match fetch_from(s, m, floor) {
            Ok(applied) => return Ok(applied),
            Err(e) => why = e,
        }
    }
    Err(why)
}

fn fetch_from<L: Deref<Target = LogService>>(s: &Inner<L>, from: NodeId, floor: u64) -> Result<u64, TransferError> {
    let malformed = TransferError::Malformed { member: from };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let session = (u64::from(s.log.node().0) << 32) | u64::from(nanos);
    let mut after: Option<Vec<u8>> = None;
    let mut applied = None;
    let mut shard_state: Option<ShardState> = None;
    loop {
        let body = postcard::to_stdvec(&Ask { session, after: after.clone() }).unwrap_or_default();
        let reply = s.log.ask_app(from, &body, ASK_WITHIN).map_err(|why| TransferError::Ask { member: from, why })?;
        let (a, pairs, done) = match postcard::from_bytes::<Answer>(&reply) {
            Ok(Answer::Page { applied, pairs, done, state }) => {
                match (state, after.is_none()) {
                    (Some(bytes), true) => shard_state = Some(ShardState::decode(&bytes).ok_or(malformed.clone())?),
                    (None, false) => {}
                    _ => return Err(malformed),
                }
                (applied, pairs, done)
            }
            Ok(Answer::Refused(why)) => return Err(TransferError::Refused { member: from, why }),
            Err(_) => return Err(malformed),
        };
        match applied {
            None if a < floor => return Err(TransferError::Short { member: from, reaches: a, floor }),
            None => {
                clear(s)?;
                applied = Some(a);
            }
            Some(x) if x != a => return Err(malformed),
            Some(_) => {}
        }
        let in_order = pairs.windows(2).all(|w| w[0].0 < w[1].0)
            && pairs.first().map_or(true, |(k, _)| after.as_ref().map_or(true, |last| k > last));
        if !in_order {
            return Err(malformed);
        }
        let mut b = s.db.batch();
        for (k, v) in &pairs {
            b.insert(&s.kv, k.as_slice(), v.as_slice());
        }
        let state = shard_state.clone().unwrap_or_default();
        if done {
            state.rewrite(&s.db.snapshot(), &s.meta, &mut b).map_err(|e| TransferError::Store(Arc::new(e)))?;
            b.insert(&s.meta, APPLIED, a.to_le_bytes().to_vec());
        }
        b.commit().map_err(|e| TransferError::Store(Arc::new(e)))?;
        if done {
            *lock(&s.shard) = state;
            return Ok(a);
        }
        after = match pairs.last() {
            Some((k, _)) => Some(k.clone()),
            None => return Err(malformed),
        };
    }
}

/// Removes every key of this store (before a checkpoint is written into it).
fn clear<L: Deref<Target = LogService>>(s: &Inner<L>) -> Result<(), TransferError> {
    loop {
        let keys: Vec<Vec<u8>> = s.kv.iter().take(4096).filter_map(|g| g.key().ok().map(|k| k.to_vec())).collect();
        if keys.is_empty() {
            return Ok(());
        }
        let mut b = s.db.batch();
        for k in &keys {
            b.remove(&s.kv, k.as_slice());
        }
        b.commit().map_err(|e| TransferError::Store(Arc::new(e)))?;
    }
}
