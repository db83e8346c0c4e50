//! The client's receiving thread: samples to their readers (with the duplicate
//! and gap checks a move needs), acknowledgements to their writers, and the move
//! to another member when the session ends (see [`super`]).

use super::wire::{decode, Call, Push, Reply};
use super::Handle;
use crate::sample::info_of;
use crate::sink::Src;
use sst::sync::atomic::Ordering;
use sst::sync::lock;
use sst::transport::NodeId;
use std::time::{Duration, Instant};
use views::view::ViewId;

/// Runs until the client is closed or no member takes it within the failover
/// timeout.
pub(super) fn run(h: &Handle) {
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
                    tracing::error!(%why, "no member took the client");
                    lock(&h.ended).get_or_insert(why);
                    break;
                }
            }
        }
    }
}

/// One push from the member.
fn take(h: &Handle, bytes: &[u8]) {
    let push = match decode::<Push>(bytes) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(%e, "a push that does not decode: ignored");
            return;
        }
    };
    match push {
        Push::Sample { reader, view, topic_seq, node, history, bytes } => {
            let mut readers = lock(&h.readers);
            let Some(slot) = readers.get_mut(&reader) else { return };
            let src = Src::Bytes(&bytes);
            if !src.has_header() {
                slot.core.reject(format!("a relayed sample of {} bytes has no whole header", bytes.len()));
                return;
            }
            let (info, _) = info_of(|i| src.word(i), NodeId(node), ViewId(view), topic_seq, history);
            if slot.history {
                // `topic_seq` is the same at every member: a repeat after a move is
                // one this reader had.
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
            let core = slot.core.clone();
            drop(readers);
            core.offer(&info, src);
        }
        Push::Acked { writer, seq } => {
            if let Some(w) = lock(&h.writers).get(&writer).cloned() {
                w.acked(seq);
            }
        }
        Push::Failed { writer, seq, why } => {
            if let Some(w) = lock(&h.writers).get(&writer).cloned() {
                w.failed(seq, why);
            }
        }
    }
}

/// Connects to another member and registers every writer (sending what is
/// unacknowledged again) and reader (resuming where it stopped).
fn move_on(h: &Handle) -> Result<(), String> {
    let deadline = Instant::now() + h.cfg.failover_timeout;
    loop {
        if h.stop.load(Ordering::Acquire) {
            return Err("closed".into());
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
            return Err(format!("no member took the client within {:?}: {why}", h.cfg.failover_timeout));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn register_all(h: &Handle) -> Result<(), String> {
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
                let from = r.history.then(|| r.last_topic_seq.map_or(0, |s| s + 1));
                (*id, Call::Reader { topic: r.topic.clone(), reader: *id, level: r.level, from })
            })
            .collect()
    };
    for (id, call) in calls {
        match h.call(&call).map_err(|e| e.to_string())? {
            Reply::Reader { lost, incompatible } => {
                if let Some(r) = lock(&h.readers).get(&id) {
                    lock(&r.core.q).status.lost += lost;
                    r.core.set_incompatible(super::incompatible_list(incompatible));
                }
            }
            other => return Err(format!("unexpected reply {other:?}")),
        }
    }
    Ok(())
}
