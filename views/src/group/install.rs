//! The manager thread: installs each next view (welcomes joiners, stops the old
//! epoch, starts the next, sends again what the trim discarded) and stops the node.

use super::epoch::{Epoch, SetupFailed};
use super::{control, Event, Inner};
use crate::engine::{Next, StopReason};
use crate::wire::ViewMsg;
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The manager thread: installs views and stops the node.
pub(crate) fn manage(inner: Arc<Inner>, rx: Receiver<Event>, tx: std::sync::mpsc::Sender<Event>) {
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Event::Install(next, began)) => {
                if let Err(failed) = install(&inner, *next, began, &tx) {
                    let why = failed.to_string();
                    // A host without room for the view's shared memory stops the node
                    // with that reason: joining again would meet the same wall.
                    if !inner.cfg.rejoin || inner.status.is_shut_down() || failed.lasting() {
                        inner.stop_with(why);
                        return;
                    }
                    // The next view could not start here (its setup failed): the
                    // others go on without this node; join them again.
                    if let Err(e) = super::rejoin::rejoin(&inner, &why, &tx) {
                        inner.stop_with(format!("{why}; then {e}"));
                        return;
                    }
                }
            }
            Ok(Event::Stop(why)) => {
                let view = spindle_sst::sync::read(&inner.current).as_ref().map(|e| e.view.clone());
                let removal = view.and_then(|v| match &why {
                    StopReason::Minority { lost, .. } => Some(super::Removal::NoMajority(super::NoMajority {
                        view: v.id(),
                        members: v.members().to_vec(),
                        lost: lost.clone(),
                    })),
                    StopReason::Removed => Some(super::Removal::Removed { view: v.id() }),
                    _ => None,
                });
                if let Some(r) = &removal {
                    tracing::warn!(%r, "out of the view");
                    inner.status.set_removal(Some(r.clone()));
                    // No send goes into the ended view once the application heard:
                    // those that follow fail with the reason.
                    inner.freeze_current();
                    inner.hooks.removed(r);
                }
                let text = match why {
                    StopReason::Minority { live, members, .. } => format!(
                        "only {live} of {members} members are reachable: a minority must not go on (majority rule)"
                    ),
                    StopReason::Removed => "removed from the group by the others".into(),
                    StopReason::Left => "left the group".into(),
                    StopReason::Protocol(ref why) => format!("membership protocol error: {why}"),
                };
                let removed = matches!(why, StopReason::Minority { .. } | StopReason::Removed);
                if removed && inner.cfg.rejoin && !inner.status.is_shut_down() {
                    match super::rejoin::rejoin(&inner, &text, &tx) {
                        Ok(()) => continue,
                        Err(e) => {
                            inner.stop_with(format!("{text}; then {e}"));
                            return;
                        }
                    }
                }
                inner.stop_with(text);
                return;
            }
            Err(RecvTimeoutError::Timeout) if inner.status.is_shut_down() => return,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn install(
    inner: &Arc<Inner>,
    next: Next,
    began: Instant,
    tx: &std::sync::mpsc::Sender<Event>,
) -> Result<(), SetupFailed> {
    let me = NodeId(inner.cfg.node_id);
    let mut cur = spindle_sst::sync::write(&inner.current);
    let mut old = cur.take().ok_or("no view to leave")?;
    // No locked send is in flight now (they hold the read lock); a send that took
    // no lock (`Group::send_cached`) and claimed before the wedge is waited for.
    // Then take what the trim discarded, including anything published since the
    // engine looked.
    for s in old.subs.iter().flatten() {
        settle_claims(s);
    }
    let mut resend: Vec<(usize, Vec<Vec<u8>>)> = next
        .my_cuts
        .iter()
        .filter_map(|(k, cut)| old.sub(*k).map(|s| (*k, s.with_core(|c| c.own_messages_from(*cut)))))
        .collect();
    // Messages of an earlier change that the old view wedged before they were sent
    // again: they follow the ones it did send (nothing else was sent in it).
    for (k, msgs) in std::mem::take(&mut *lock(&inner.carry)) {
        match resend.iter_mut().find(|(x, _)| *x == k) {
            Some((_, v)) => v.extend(msgs),
            None => resend.push((k, msgs)),
        }
    }
    inner.directory.enter(&next.view, &next.joins);
    let msg = ViewMsg {
        id: next.view.id().0,
        members: inner.directory.members_of(&next.view),
        layout_version: next.view.layout().version(),
        layout: next.view.layout().bytes().to_vec(),
        next_node: next.view.next_node(),
    };
    for j in &next.joins {
        if let Some(stream) = inner.directory.take_joiner(j.node) {
            if let Err(e) = control::welcome(inner, stream, msg.clone(), false) {
                tracing::warn!(joiner = %j.node, %e, "could not send the view to a joiner");
            }
        }
    }
    tracing::info!(node = %me, "trim done, stopping the old view");
    let old_view = old.view.clone();
    inner.hooks.view_ended(&old_view, &old.transport);
    old.stop();
    drop(old);
    inner.directory.clear_joiners(); // requests not taken into this view are retried by the joiners
    let epoch = Epoch::start(inner, next.view.clone(), &next.suspects, tx.clone())?;
    let mut resent = 0;
    let mut carried = 0;
    for (old_k, msgs) in resend {
        // A dynamic layout may number the subgroups differently in the next view.
        let successor = inner.layout.successor(&old_view, old_k, &next.view);
        match successor.and_then(|k| Some((k, epoch.sub(k)?))) {
            Some((k, s)) => {
                let mut msgs = msgs.into_iter();
                while let Some(m) = msgs.next() {
                    match s.send(&m) {
                        Ok(_) => resent += 1,
                        // The new view is already changing (an edit or a failure came
                        // at once): the rest go out after the next install.
                        Err(spindle_smc::SendError::Wedged) => {
                            let rest: Vec<Vec<u8>> = std::iter::once(m).chain(msgs).collect();
                            carried += rest.len() as u64;
                            lock(&inner.carry).push((k, rest));
                            break;
                        }
                        Err(e @ spindle_smc::SendError::NoRoom(_)) => {
                            return Err(SetupFailed::NoRoom(format!("resending in view {}: {e}", next.view.id().0)))
                        }
                        Err(e) => return Err(format!("resending in view {}: {e}", next.view.id().0).into()),
                    }
                }
            }
            None => {
                tracing::warn!(node = %me, subgroup = old_k, lost = msgs.len(), "no longer a sender: messages dropped")
            }
        }
    }
    let transport = epoch.transport.clone();
    // Counted before it is visible, so that no reader sees the view and an older count.
    inner.counters.view_installed(began.elapsed(), resent, carried);
    *cur = Some(epoch);
    drop(cur);
    tracing::info!(node = %me, view = next.view.id().0, members = ?next.view.members(), "view installed");
    super::restart::remember(inner, &next.view);
    inner.status.bump();
    inner.hooks.view_started(&next.view, &transport);
    Ok(())
}

/// Waits until every claim of wedged subgroup `s` is published and taken in (see
/// [`spindle_smc::SmcCore::claims_settled`]). A claim's sender publishes it without
/// waiting on anything, so this is short; a thread descheduled mid-send makes it
/// longer, which is said once a second.
fn settle_claims(s: &spindle_smc::runtime::Subgroup) {
    let began = Instant::now();
    let mut said = began;
    let backoff = crossbeam_utils::Backoff::new();
    while !s.with_core(|c| c.claims_settled()) {
        if said.elapsed() >= Duration::from_secs(1) {
            said = Instant::now();
            tracing::warn!(
                waited_ms = began.elapsed().as_millis() as u64,
                "a send claimed before the wedge is not published yet"
            );
        }
        if backoff.is_completed() {
            std::thread::sleep(Duration::from_micros(50));
        } else {
            backoff.snooze();
        }
    }
}
