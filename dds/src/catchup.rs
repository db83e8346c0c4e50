//! Late joiners of Volatile and Logged topics: state transfer of the history, with no
//! gap and no duplicate at the seam.
//!
//! A participant that enters a topic's subgroup for the first time in view `v` holds
//! back the live samples of `v` and asks the other members, over the control plane
//! ([`views::group::Group::request`]), for the history before `v` from its own
//! count on (0, or the length of its own log after a restart). A member that was
//! complete at the start of `v` (its `Seam`) answers with the entries before the
//! seam, in pages, and the seam itself; the joiner applies them, numbers the held
//! samples from the seam on, and goes live. Every member numbers samples by the
//! same delivery order, so the seam is the same everywhere.
//!
//! Members that are new in `v` too answer `New` with their count. If nobody
//! complete answers, the one with the longest history (its log) is the source for
//! the others (ties: everyone keeps their own, which is then the same length).
//! Replies are network input: checked (sizes, order, range) before use.

use crate::sample::HEADER;
use crate::topic::{Entry, TopicState};
use crate::Shared;
use serde::{Deserialize, Serialize};
use sst::transport::NodeId;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request for history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Fetch {
    pub(crate) topic: String,
    pub(crate) view: u64,
    pub(crate) from: u64,
    /// Serve even if not complete at the seam (a source among new members).
    pub(crate) any: bool,
}

/// One history entry on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WireEntry {
    pub(crate) seq: u64,
    pub(crate) view: u64,
    pub(crate) node: u32,
    pub(crate) bytes: Vec<u8>,
}

/// The answer to a [`Fetch`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Answer {
    /// That view has not started here yet: ask again.
    NotYet,
    /// New in that view too; its count then.
    New { seam: u64 },
    /// History from `from`, and the seam.
    Entries { seam: u64, entries: Vec<WireEntry>, more: bool },
    /// Cannot serve.
    Error(String),
}

/// Bytes of history per answer (well under the control plane's frame limit).
const PAGE: usize = 2 << 20;

/// Answers a request body (the participant's `on_request` handler).
pub(crate) fn answer(shared: &Shared, body: &[u8]) -> Vec<u8> {
    let a = match postcard::from_bytes::<Fetch>(body) {
        Err(e) => Answer::Error(format!("bad request: {e}")),
        Ok(f) => match crate::topic::lock(&shared.topics).get(&f.topic).cloned() {
            None => Answer::Error(format!("no topic `{}` here", f.topic)),
            Some(t) => t.history(f.view, f.from, f.any, PAGE),
        },
    };
    postcard::to_stdvec(&a).unwrap_or_default()
}

fn ask(shared: &Shared, to: NodeId, f: &Fetch) -> Result<Answer, String> {
    let group = shared.group.get().and_then(|g| g.upgrade()).ok_or("the participant is closing")?;
    let body = postcard::to_stdvec(f).map_err(|e| e.to_string())?;
    let reply = group.request(to, &body, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    postcard::from_bytes::<Answer>(&reply).map_err(|e| format!("bad answer from {to}: {e}"))
}

/// Appends a page of `entries` to `out` if each is in order after what `out` holds,
/// at or after `from`, before `seam`, and holds at least a sample header.
fn check(out: &mut Vec<Entry>, from: u64, seam: u64, entries: Vec<WireEntry>) -> Result<(), String> {
    for e in entries {
        let next_ok = out.last().map_or(e.seq >= from, |l| e.seq > l.seq);
        if !next_ok || e.seq >= seam || e.bytes.len() < HEADER {
            return Err(format!("entry {} out of order, out of range or short", e.seq));
        }
        out.push(Entry { seq: e.seq, view: e.view, node: e.node, bytes: e.bytes });
    }
    Ok(())
}

/// Fetches every page from `from` to the seam from `to`, checked.
fn fetch_all(shared: &Shared, to: NodeId, mut f: Fetch) -> Result<(Vec<Entry>, u64), String> {
    let mut out: Vec<Entry> = Vec::new();
    loop {
        match ask(shared, to, &f)? {
            Answer::Entries { seam, entries, more } => {
                check(&mut out, f.from, seam, entries).map_err(|e| format!("{to}: {e}"))?;
                match out.last() {
                    Some(l) if more && l.seq + 1 > f.from => f.from = l.seq + 1,
                    _ => return Ok((out, seam)),
                }
            }
            Answer::NotYet => std::thread::sleep(Duration::from_millis(20)),
            Answer::New { .. } => return Err(format!("{to} is new as well")),
            Answer::Error(e) => return Err(format!("{to}: {e}")),
        }
    }
}

/// Runs a late join of `topic` in view `view` against `candidates` (the other
/// members of its subgroup); always ends the catch-up, with an error noted if the
/// history could not be had by the deadline.
pub(crate) fn run(shared: Arc<Shared>, topic: Arc<TopicState>, view: u64, candidates: Vec<NodeId>) {
    let deadline = Instant::now() + shared.catch_up_timeout;
    let from = crate::topic::lock(&topic.inner).next_seq;
    let fetch = |any| Fetch { topic: topic.name.clone(), view, from, any };
    let mut pending = candidates;
    let mut news: Vec<(u64, NodeId)> = Vec::new();
    let mut errors = Vec::new();
    while !pending.is_empty() && Instant::now() < deadline {
        let mut still = Vec::new();
        for c in pending {
            match ask(&shared, c, &fetch(false)) {
                Ok(Answer::Entries { .. }) => match fetch_all(&shared, c, fetch(false)) {
                    Ok((entries, seam)) => {
                        tracing::info!(topic = %topic.name, view, from = c.0, entries = entries.len(), seam, "caught up");
                        topic.finish_catch_up(entries, Some(seam), None);
                        return;
                    }
                    Err(e) => errors.push(e),
                },
                Ok(Answer::New { seam }) => news.push((seam, c)),
                Ok(Answer::NotYet) => still.push(c),
                Ok(Answer::Error(e)) => errors.push(format!("{c}: {e}")),
                Err(e) => errors.push(e),
            }
        }
        pending = still;
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if !pending.is_empty() {
        errors.push(format!("no answer from {pending:?} in time"));
    }
    // Nobody complete answered. The longest history among the new members is the
    // source (the lowest id among equals); if that is this node's, it is all there is.
    news.sort_by_key(|(seam, n)| (std::cmp::Reverse(*seam), n.0));
    if let Some(&(seam, c)) = news.first().filter(|(seam, _)| *seam > from) {
        match fetch_all(&shared, c, fetch(true)) {
            Ok((entries, s)) => {
                topic.finish_catch_up(entries, Some(s.max(seam)), None);
                return;
            }
            Err(e) => errors.push(e),
        }
    }
    let complete = errors.is_empty();
    let why = (!complete).then(|| errors.join("; "));
    if let Some(w) = &why {
        tracing::warn!(topic = %topic.name, view, why = %w, "late join without the history");
    }
    topic.finish_catch_up(Vec::new(), None, why);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    fn entry(seq: u64, len: usize) -> WireEntry {
        WireEntry { seq, view: 1, node: 0, bytes: vec![0; len] }
    }

    #[test]
    fn hostile_history_pages_are_refused() {
        let mut out = Vec::new();
        assert!(check(&mut out, 5, 10, vec![entry(5, 16), entry(7, 20)]).is_ok(), "gaps are allowed (KeepLast)");
        assert_eq!(out.len(), 2);
        assert!(check(&mut out, 5, 10, vec![entry(7, 16)]).is_err(), "a repeat");
        assert!(check(&mut Vec::new(), 5, 10, vec![entry(4, 16)]).is_err(), "before `from`");
        assert!(check(&mut Vec::new(), 5, 10, vec![entry(10, 16)]).is_err(), "at the seam");
        assert!(check(&mut Vec::new(), 5, 10, vec![entry(6, 15)]).is_err(), "shorter than a header");
    }

    #[test]
    fn garbage_requests_get_an_error_answer() {
        let shared = Shared {
            me: NodeId(0),
            topics: Mutex::new(HashMap::new()),
            group: OnceLock::new(),
            catch_up_timeout: Duration::from_secs(1),
        };
        for body in [&b""[..], b"\xff\xff\xff\xff", &[7; 300]] {
            let a: Answer = postcard::from_bytes(&answer(&shared, body)).unwrap();
            assert!(matches!(a, Answer::Error(_)), "{a:?}");
        }
        let unknown = postcard::to_stdvec(&Fetch { topic: "t".into(), view: 1, from: 0, any: false }).unwrap();
        let a: Answer = postcard::from_bytes(&answer(&shared, &unknown)).unwrap();
        assert!(matches!(a, Answer::Error(ref e) if e.contains("no topic")), "{a:?}");
    }
}
