//! The joiner's side: ask the other members for the history before the view it
//! joined in, check every page, and hand it to the topic.

use crate::error::CatchUpError;
use crate::participant::state::Shared;
use crate::topic::{Entry, TopicState};
use crate::wire::member::{Answer, Ask, Fetch, WireEntry};
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use spindle_views::view::ViewId;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn ask(shared: &Shared, to: NodeId, f: &Fetch) -> Result<Answer, CatchUpError> {
    let group = shared.group.get().and_then(|g| g.upgrade()).ok_or(CatchUpError::Closing)?;
    let body = crate::wire::encode(&Ask::Fetch(f.clone()));
    let reply = group.request_service(crate::wire::SERVICE, to, &body, Duration::from_secs(10)).map_err(|e| {
        tracing::debug!(%to, %e, "a history request went unanswered");
        CatchUpError::NoAnswer
    })?;
    crate::wire::decode::<Answer>(&reply).map_err(|_| CatchUpError::Protocol)
}

/// Appends a page of `entries` to `out` if each is in order after what `out` holds,
/// at or after `from`, before `seam`, and holds at least a sample header.
fn check(out: &mut Vec<Entry>, from: u64, seam: u64, entries: Vec<WireEntry>) -> Result<(), CatchUpError> {
    for e in entries {
        let next_ok = out.last().map_or(e.seq >= from, |l| e.seq > l.seq);
        if !next_ok || e.seq >= seam || !crate::sink::Src::Bytes(&e.bytes).has_header() {
            return Err(CatchUpError::Protocol);
        }
        out.push(Entry { seq: e.seq, view: e.view, node: e.node, bytes: e.bytes });
    }
    Ok(())
}

/// Fetches every page from `from` to the seam from `to`, checked, starting with
/// `first` if the first page is in already. A member answers `NotYet` only after
/// waiting for the view itself, so asking again at once does not spin; the
/// deadline bounds the asking.
/// A whole history: its entries, its seam, and the resend filter at the seam.
struct Got {
    entries: Vec<Entry>,
    seam: u64,
    seen: Vec<(u64, u32, u64)>,
}

fn fetch_all(
    shared: &Shared,
    to: NodeId,
    mut f: Fetch,
    mut first: Option<Answer>,
    deadline: Instant,
) -> Result<Got, CatchUpError> {
    let mut out: Vec<Entry> = Vec::new();
    loop {
        let answer = match first.take() {
            Some(a) => a,
            None if Instant::now() >= deadline => return Err(CatchUpError::NoAnswer),
            None => ask(shared, to, &f)?,
        };
        match answer {
            Answer::Entries { seam, entries, more, seen } => {
                check(&mut out, f.from, seam, entries)?;
                match out.last() {
                    Some(l) if more && l.seq + 1 > f.from => f.from = l.seq + 1,
                    _ => return Ok(Got { entries: out, seam, seen }),
                }
            }
            Answer::NotYet => {}
            Answer::New { .. } | Answer::Refused(_) => return Err(CatchUpError::Refused),
            Answer::Endpoints { .. } => return Err(CatchUpError::Protocol),
        }
    }
}

/// Runs a late join of `topic` in view `view` against `candidates` (the other
/// members of its subgroup); always ends the catch-up, with an error noted if the
/// history could not be had by the deadline.
pub(crate) fn run(shared: Arc<Shared>, topic: Arc<TopicState>, view: ViewId, candidates: Vec<NodeId>) {
    let deadline = Instant::now() + shared.catch_up_timeout;
    let from = lock(&topic.inner).engine.next_seq();
    let fetch = |any| Fetch { topic: topic.name.clone(), view, from, any };
    let mut pending = candidates;
    let mut news: Vec<(u64, NodeId)> = Vec::new();
    let mut errors = Vec::new();
    while !pending.is_empty() && Instant::now() < deadline {
        let mut still = Vec::new();
        for c in pending {
            match ask(&shared, c, &fetch(false)) {
                // The first page is in: go on from it (one round trip for a
                // history that fits in a page).
                Ok(a @ Answer::Entries { .. }) => match fetch_all(&shared, c, fetch(false), Some(a), deadline) {
                    Ok(got) => {
                        let (entries, seam) = (got.entries.len(), got.seam);
                        tracing::info!(topic = %topic.name, view = view.0, from = c.0, entries, seam, "caught up");
                        topic.finish_catch_up(got.entries, Some(got.seam), &got.seen, None);
                        return;
                    }
                    Err(e) => errors.push(e),
                },
                Ok(Answer::New { seam }) => news.push((seam, c)),
                Ok(Answer::NotYet) => still.push(c),
                Ok(Answer::Refused(why)) => {
                    tracing::debug!(from = %c, ?why, "a history request refused");
                    errors.push(CatchUpError::Refused);
                }
                Ok(Answer::Endpoints { .. }) => errors.push(CatchUpError::Protocol),
                Err(e) => errors.push(e),
            }
        }
        // Those that answered NotYet waited for the view first: ask again at once.
        pending = still;
    }
    if !pending.is_empty() {
        errors.push(CatchUpError::NoAnswer);
    }
    // Nobody complete answered. The longest history among the new members is the
    // source (the lowest id among equals); if that is this node's, it is all there is.
    news.sort_by_key(|(seam, n)| (std::cmp::Reverse(*seam), n.0));
    if let Some(&(seam, c)) = news.first().filter(|(seam, _)| *seam > from) {
        match fetch_all(&shared, c, fetch(true), None, deadline) {
            Ok(got) => {
                topic.finish_catch_up(got.entries, Some(got.seam.max(seam)), &got.seen, None);
                return;
            }
            Err(e) => errors.push(e),
        }
    }
    // The most telling cause: out of protocol, then refused, then no answer.
    let why = errors.iter().min_by_key(|e| match e {
        CatchUpError::Protocol => 0,
        CatchUpError::Refused => 1,
        CatchUpError::NoAnswer => 2,
        CatchUpError::Closing | CatchUpError::NoThread => 3,
    });
    let why = why.copied();
    if let Some(w) = &why {
        tracing::warn!(topic = %topic.name, view = view.0, why = %w, ?errors, "late join without the history");
    }
    topic.finish_catch_up(Vec::new(), None, &[], why);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, len: usize) -> WireEntry {
        WireEntry { seq, view: ViewId(1), node: 0, bytes: vec![0; len] }
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
}
