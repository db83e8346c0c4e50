//! The client's receiving thread: samples to their readers (with the duplicate
//! and gap checks a move needs), acknowledgements to their writers, and the move
//! to another member when the session ends (see [`super`]).

use super::{Handle, ReaderSlot};
use crate::error::ClientEnd;
use crate::sample::info_of;
use crate::sink::Src;
use crate::status::Rejection;
use crate::wire::client::{decode, Call, PushRef, Reply};
use crate::DdsError;
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use spindle_views::view::ViewId;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs until the client is closed or no member takes it within the failover
/// timeout.
pub(super) fn run(h: &Arc<Handle>) {
    while !h.stop.load(Ordering::Acquire) {
        match h.link.recv_push(Duration::from_millis(100)) {
            Ok(Some(bytes)) => take(h, &bytes),
            Ok(None) => {}
            Err(e) => {
                if h.stop.load(Ordering::Acquire) {
                    break;
                }
                tracing::warn!(%e, "lost the member: moving to another");
                if let Err(why) = move_on(h) {
                    tracing::error!(%why, "the client ends");
                    lock(&h.ended).get_or_insert(why);
                    break;
                }
            }
        }
    }
}

/// One push from the member.
fn take(h: &Handle, bytes: &[u8]) {
    let push = match decode::<PushRef>(bytes) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(%e, "a push that does not decode: ignored");
            return;
        }
    };
    match push {
        PushRef::Samples { reader, samples } => {
            let mut readers = lock(&h.readers);
            let Some(slot) = readers.get_mut(&reader) else { return };
            for (view, topic_seq, node, history, bytes) in samples {
                match slot.held.as_mut() {
                    Some(held) => held.push((view, topic_seq, node, history, bytes.to_vec())),
                    None => accept(slot, view, topic_seq, node, history, bytes),
                }
            }
        }
        PushRef::Acked { writer, seq } => {
            if let Some(w) = lock(&h.writers).get(&writer).cloned() {
                w.acked(seq);
            }
        }
        PushRef::Failed { writer, seq, why } => {
            if let Some(w) = lock(&h.writers).get(&writer).cloned() {
                w.failed(seq, why);
            }
        }
    }
}

/// A sample for a reader, in order: dropped if the reader had it (a repeat after a
/// move), else offered; gaps after a move are counted as lost (see [`super`]).
fn accept(slot: &mut ReaderSlot, view: u64, topic_seq: u64, node: u32, history: bool, bytes: &[u8]) {
    let src = Src::Bytes(bytes);
    if !src.has_header() {
        slot.core.reject(Rejection::ShortMessage { sender: node, len: bytes.len() });
        return;
    }
    let (info, _) = info_of(|i| src.word(i), NodeId(node), ViewId(view), topic_seq, history);
    if slot.history {
        // `topic_seq` is the same at every member: a repeat after a move is one
        // this reader had.
        if slot.last_topic_seq.is_some_and(|l| topic_seq <= l) {
            return;
        }
        slot.last_topic_seq = Some(topic_seq);
    } else {
        let key = info.writer.key();
        if slot.resumed.contains(&key) {
            let last = slot.last.get(&key).copied().unwrap_or(0);
            if info.seq <= last {
                return; // the new member relayed what the old one had
            }
            slot.resumed.remove(&key);
            lock(&slot.core.q).status.lost += info.seq - last - 1;
        }
        slot.last.insert(key, info.seq);
    }
    slot.core.offer(&info, src);
}

/// Fetches reader `id`'s history `range` in pages, then lets the live samples
/// held meanwhile through. Ends the hold even if the fetch fails (counting the
/// rest of the range as lost), unless the client moved meanwhile.
pub(super) fn catch_up(h: &Handle, id: u32, topic: &str, range: (u64, u64)) -> Result<(), DdsError> {
    let session = h.session.load(Ordering::Acquire);
    let (mut from, to) = range;
    let mut result = Ok(());
    while from < to {
        let call = Call::History { topic: topic.into(), reader: id, from, to };
        let (entries, next, lost) = match h.call(&call) {
            Ok(Reply::History { entries, next, lost }) => (entries, next, lost),
            Ok(_) => {
                result = Err(DdsError::Protocol(crate::ProtocolError::Unexpected));
                break;
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        };
        let mut readers = lock(&h.readers);
        let Some(slot) = readers.get_mut(&id) else { return Ok(()) };
        lock(&slot.core.q).status.lost += lost;
        let in_range = entries.iter().all(|(seq, ..)| *seq >= from && *seq < to);
        if !in_range || next <= from || next > to {
            result = Err(DdsError::Protocol(crate::ProtocolError::OutOfRange));
            break;
        }
        for (seq, view, node, bytes) in entries {
            accept(slot, view, seq, node, true, &bytes);
        }
        from = next;
    }
    let mut readers = lock(&h.readers);
    if h.session.load(Ordering::Acquire) != session {
        // The client moved meanwhile: the catch-up of the new session takes over
        // (and the live samples stay held for it).
        return result;
    }
    if let Some(slot) = readers.get_mut(&id) {
        if from < to {
            lock(&slot.core.q).status.lost += to - from;
        }
        for (view, topic_seq, node, history, bytes) in slot.held.take().unwrap_or_default() {
            accept(slot, view, topic_seq, node, history, &bytes);
        }
    }
    result
}

/// Connects to another member and registers every writer (sending what is
/// unacknowledged again) and reader (resuming where it stopped).
fn move_on(h: &Arc<Handle>) -> Result<(), ClientEnd> {
    let deadline = Instant::now() + h.cfg.failover_timeout;
    loop {
        if h.stop.load(Ordering::Acquire) {
            return Err(ClientEnd::Closed);
        }
        // Writers post nothing until registered on the new session.
        h.session.fetch_add(1, Ordering::AcqRel);
        let why = match h.link.reconnect(h.cfg.connect_timeout) {
            Ok(()) => match register_all(h) {
                Ok(()) => {
                    h.failovers.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(member = %h.link.member().0, "the client moved");
                    return Ok(());
                }
                Err(e) => e,
            },
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            tracing::warn!(%why, "the last member tried did not take the client");
            return Err(ClientEnd::NoMember(h.cfg.failover_timeout));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn register_all(h: &Arc<Handle>) -> Result<(), String> {
    let writers: Vec<_> = lock(&h.writers).values().cloned().collect();
    for w in writers {
        w.register(h).map_err(|e| e.to_string())?;
    }
    let calls: Vec<(u32, Call)> = {
        let mut readers = lock(&h.readers);
        readers
            .iter_mut()
            .map(|(id, r)| {
                r.resumed = r.last.keys().copied().collect();
                if r.history {
                    r.held.get_or_insert_with(Vec::new);
                }
                let from = r.history.then(|| r.last_topic_seq.map_or(0, |s| s + 1));
                (*id, Call::Reader { topic: r.topic.clone(), reader: *id, level: r.level, from })
            })
            .collect()
    };
    for (id, call) in calls {
        match h.call(&call).map_err(|e| e.to_string())? {
            Reply::Reader { lost, incompatible, history } => {
                let topic = match lock(&h.readers).get(&id) {
                    Some(r) => {
                        lock(&r.core.q).status.lost += lost;
                        r.core.set_incompatible(super::incompatible_list(incompatible));
                        r.topic.clone()
                    }
                    None => continue,
                };
                // The history comes on its own thread: this one keeps taking the
                // live samples (held until the history is in).
                let h2 = h.clone();
                let spawned = std::thread::Builder::new().name("dds-client-history".into()).spawn(move || {
                    if let Err(e) = catch_up(&h2, id, &topic, history) {
                        tracing::warn!(%e, reader = id, "a client reader's history after a move");
                    }
                });
                if spawned.is_err() {
                    return Err("no thread for a reader's history".into());
                }
            }
            other => return Err(format!("unexpected reply {other:?}")),
        }
    }
    Ok(())
}
