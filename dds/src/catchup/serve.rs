//! The answering member's side: the history before the start of a view, from memory
//! or, for what memory no longer holds, from the topic's log.

use crate::engine::{Now, Served};
use crate::participant::state::Shared;
use crate::topic::{Entry, TopicState};
use crate::wire::member::{Answer, Ask, Refusal, WireEntry};
use spindle_sst::sync::lock;
use spindle_views::view::ViewId;
use std::time::{Duration, Instant};

/// Bytes of history per answer (well under the control plane's frame limit).
const PAGE: usize = 2 << 20;
/// How long a request for a view that has not begun here waits for it before
/// answering `NotYet` (well under the asker's request timeout).
const VIEW_WAIT: Duration = Duration::from_secs(2);

/// Answers a request body (the participant's `on_request` handler): history, or
/// how many clients' endpoints this member serves on a topic.
pub(crate) fn answer(shared: &Shared, body: &[u8]) -> Vec<u8> {
    let a = match crate::wire::decode::<Ask>(body) {
        Err(_) => Answer::Refused(Refusal::Malformed),
        Ok(Ask::Fetch(f)) => {
            // Not under the topics' lock: the wait for the view below needs the view
            // to be installed, which takes that lock.
            let topic = lock(&shared.topics).get(&f.topic).cloned();
            match topic {
                None => Answer::Refused(Refusal::NoTopic),
                Some(t) => history(&t, f.view, f.from, f.any, PAGE, VIEW_WAIT),
            }
        }
        Ok(Ask::ClientEndpoints { topic }) => {
            let (writers, readers) =
                lock(&shared.topics).get(&topic).map_or((0, 0), |t| lock(&t.inner).engine.client_counts());
            Answer::Endpoints { writers: writers as u64, readers: readers as u64 }
        }
    };
    crate::wire::encode(&a)
}

/// The history before the start of view `view`, from `from` on, at most
/// `budget` bytes (see [`super`]). If `view` has not begun here, waits up to
/// `wait` for it (the joiner's members install a view at about the same time),
/// then answers `NotYet`.
pub(crate) fn history(topic: &TopicState, view: ViewId, from: u64, any: bool, budget: usize, wait: Duration) -> Answer {
    let until = Instant::now() + wait;
    let mut g = lock(&topic.inner);
    let has_log = topic.log_path.is_some();
    let served = loop {
        match g.engine.serve(view, from, any, budget, has_log, Now::real()) {
            Served::NotBegun => {}
            other => break other,
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Answer::NotYet;
        }
        g = topic.entered.wait_timeout(g, left).unwrap_or_else(|p| p.into_inner()).0;
    };
    drop(g);
    match served {
        Served::NotBegun => Answer::NotYet,
        Served::TooOld => Answer::Refused(Refusal::TooOld),
        Served::New { seam } => Answer::New { seam },
        Served::FromLog { seam, seen } => match (&topic.log_path, &topic.durability) {
            // The log's writer may still be appending what came before the seam.
            (Some(path), Some(d)) if d.wait(seam, wait) => read_log(path, from, seam, seen, budget),
            (Some(_), Some(_)) => Answer::NotYet,
            _ => Answer::Refused(Refusal::NoLog),
        },
        Served::Entries { seam, entries, more, seen } => Answer::Entries {
            seam,
            entries: entries
                .into_iter()
                .map(|e| WireEntry { seq: e.seq, view: e.view, node: e.node, bytes: e.bytes })
                .collect(),
            more,
            seen,
        },
    }
}

/// Entries `from..seam` read from the log file (older than the memory holds).
fn read_log(path: &std::path::Path, from: u64, seam: u64, seen: Vec<(u64, u32, u64)>, budget: usize) -> Answer {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(path = %path.display(), %e, "a topic's log could not be read for a joiner");
            return Answer::Refused(Refusal::Unreadable);
        }
    };
    let (found, _) = crate::log::scan(&bytes);
    let mut entries = Vec::new();
    let mut used = 0;
    for f in found.iter().filter(|f| f.seq >= from && f.seq < seam) {
        if used > 0 && used + f.len > budget {
            break;
        }
        match Entry::from_record(f.seq, &bytes[f.at..f.at + f.len]) {
            Some(e) => {
                used += e.bytes.len();
                entries.push(WireEntry { seq: e.seq, view: e.view, node: e.node, bytes: e.bytes });
            }
            None => return Answer::Refused(Refusal::BadRecord),
        }
    }
    let more = entries.last().is_some_and(|e| e.seq + 1 < seam);
    Answer::Entries { seam, entries, more, seen }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spindle_sst::transport::NodeId;
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    use std::time::Duration;

    #[test]
    fn garbage_requests_get_an_error_answer() {
        let shared = Shared {
            me: std::sync::OnceLock::from(NodeId(0)),
            topics: Mutex::new(HashMap::new()),
            group: OnceLock::new(),
            participant: OnceLock::new(),
            catch_up_timeout: Duration::from_secs(1),
            logs: Default::default(),
            log_dir: std::env::temp_dir(),
        };
        for body in [&b""[..], b"\xff\xff\xff\xff", &[7; 300]] {
            let a: Answer = crate::wire::decode(&answer(&shared, body)).unwrap();
            assert_eq!(a, Answer::Refused(Refusal::Malformed));
        }
        let fetch = crate::wire::member::Fetch { topic: "t".into(), view: ViewId(1), from: 0, any: false };
        let unknown = crate::wire::encode(&Ask::Fetch(fetch));
        let a: Answer = crate::wire::decode(&answer(&shared, &unknown)).unwrap();
        assert_eq!(a, Answer::Refused(Refusal::NoTopic));
    }

    #[test]
    fn a_request_for_a_view_not_begun_here_waits_for_it() {
        use crate::qos::{History, Qos};
        let qos = Qos::volatile(History::KeepLast(5));
        let entry = crate::table::TopicEntry {
            name: "t".into(),
            type_name: "u64".into(),
            qos,
            writers: Vec::new(),
            readers: Vec::new(),
        };
        let t = TopicState::open("t", qos, false, NodeId(0), None).unwrap();
        assert_eq!(t.enter_view(ViewId(1), &entry, &[NodeId(0)]), None, "alone: nothing to catch up");
        let asker = {
            let t = t.clone();
            std::thread::spawn(move || history(&t, ViewId(2), 0, false, PAGE, Duration::from_secs(60)))
        };
        // The request is (almost always) waiting by now; either way the answer is
        // the seam of view 2 once it begins, never NotYet.
        std::thread::sleep(Duration::from_millis(50));
        t.enter_view(ViewId(2), &entry, &[NodeId(0), NodeId(1)]);
        assert_eq!(
            asker.join().unwrap(),
            Answer::Entries { seam: 0, entries: Vec::new(), more: false, seen: Vec::new() }
        );
        let none = history(&t, ViewId(3), 0, false, PAGE, Duration::from_millis(20));
        assert_eq!(none, Answer::NotYet, "a view that does not begin in time");
        let old = history(&t, ViewId(0), 0, false, PAGE, Duration::from_secs(60));
        assert!(
            matches!(old, Answer::Refused(Refusal::TooOld)),
            "a view before this node's first is never waited for: {old:?}"
        );
    }
}
