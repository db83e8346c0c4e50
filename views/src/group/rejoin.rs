//! Joining the group again after the others removed this node while it was alive
//! (see [`crate::config::Config::rejoin`]).
//!
//! A member is removed when the others suspect it (it stalled past the failure
//! timeout: a swap storm, a debugger, a stopped container) or when it finds itself
//! in a minority (a partition). Either way its view is over for it: what the others
//! delivered after the cut is not delivered here, and its own messages the trim
//! discarded are dropped (it cannot know which ones the others delivered). Instead
//! of stopping, the manager thread then:
//!
//! 1. ends the old view as any view ends (`on_view_end` runs) and stops its runtime
//!    (senders wait, as in any view change; clients
//!    are disconnected and fail over to another member);
//! 2. asks the members it knew (and the configured contact, and the group found by
//!    discovery) in turn to take it back, with its own node id, until one does or
//!    the application shuts the node down; a partition that has not healed yet is
//!    simply retried, with a growing pause of at most two seconds (100 ms once a
//!    member counted it). Each round first asks the members of its last view
//!    below it to count it towards restoring that view, should every live member
//!    be out of it too: see [`crate::restore`]; a member counted by one that then
//!    restarts the view starts it as a member that stays, without step 3.
//! 3. takes the welcome as a joiner does: the state hooks run, then
//!    [`GroupBuilder::on_rejoin`](super::GroupBuilder::on_rejoin), then the view
//!    starts and `on_view` sees this node back in.
//!
//! While the group still lists this node (it has not installed the view without it
//! yet) a request is refused as a duplicate; that is retried too.

use super::directory::member_info;
use super::epoch::Epoch;
use super::{control, Event, Inner};
use crate::auth::AuthError;
use crate::restore::{Answer, Restore, Stand};
use crate::view::{LayoutDoc, View, ViewId};
use crate::wire::MemberInfo;
use spindle_sst::sync::lock;
use spindle_sst::transport::NodeId;
use std::net::SocketAddr;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The view a joiner's welcome gives: runs the state hooks and learns the members'
/// addresses first.
pub(crate) fn take_welcome(inner: &Inner, (view, states, client_key): control::Welcome) -> View {
    for (k, bytes) in states {
        inner.hooks.set_state(k, &bytes);
    }
    view_of(inner, view, client_key)
}

/// The view a welcome gives, its members' addresses learnt.
fn view_of(inner: &Inner, view: crate::wire::ViewMsg, client_key: [u8; 32]) -> View {
    *spindle_sst::sync::lock(&inner.client_key) = client_key;
    inner.directory.learn(&view.members);
    View::with_id(ViewId(view.id), view.members.iter().map(|m| NodeId(m.node)).collect())
        .with_layout(LayoutDoc::new(view.layout_version, view.layout))
        .with_next_node(view.next_node)
}

/// Where to ask: every member this node knew but itself, the configured contact,
/// and what discovery finds; without duplicates.
fn contacts(inner: &Inner) -> Vec<SocketAddr> {
    let mut list = inner.directory.others();
    list.extend(inner.cfg.contact);
    if let Some(found) = super::discovery::find(&inner.cfg, Duration::from_millis(300), inner.beacon_secret()) {
        list.push(found);
    }
    list.retain(|a| *a != inner.cfg.listen);
    let mut seen = Vec::new();
    list.retain(|a| {
        let new = !seen.contains(a);
        seen.push(*a);
        new
    });
    list
}

/// Whether members that stayed alive but are out of their view ask each other to
/// be counted towards restoring it (see `crate::restore`); off, only members
/// started again on their state directories are counted.
const RESTORE_AMONG_LIVE: bool = true;

/// Leaves the view this node was removed from and joins the group again; returns
/// once it runs a view, or an error if the node was shut down meanwhile.
pub(crate) fn rejoin(inner: &Arc<Inner>, why: &str, tx: &Sender<Event>) -> Result<(), String> {
    let began = Instant::now();
    tracing::warn!(%why, "removed from the group: joining it again");
    inner.status.set_rejoining(Some(why.to_string()));
    let me_id = NodeId(inner.cfg.node_id);
    inner.clients.close_all();
    inner.freeze_current();
    let mut last = None;
    if let Some(mut old) = spindle_sst::sync::write(&inner.current).take() {
        last = Some(old.view.clone());
        // Cut every member off first: nothing written here after this is read, so
        // what the hooks read of the regions below holds every write a member
        // acknowledged in that view (a Tailwind primary acknowledges an append once
        // its write landed at each backup). Should this view be restored, the
        // members continue from what they read here.
        for &m in old.view.members().iter().filter(|m| **m != me_id) {
            old.transport.disconnect(m);
        }
        // The view is over for this node (no more deliveries): as at any view's
        // end, the application reads what it needs from its regions.
        inner.hooks.view_ended(&old.view, &old.transport);
        old.stop();
    }
    // Out of that view: it takes part in restoring it, should every live member
    // be out of it too (see `crate::restore`).
    *lock(&inner.restore) = last.map(|v| Restore::new(me_id, v));
    lock(&inner.carry).clear();
    inner.status.bump();
    let me = member_info(me_id, inner.cfg.listen);
    // Long enough for the group to finish the view change that removes this node.
    let attempt = (inner.cfg.failure_timeout() * 4).max(Duration::from_secs(3));
    let mut pause = Duration::from_millis(100);
    loop {
        if RESTORE_AMONG_LIVE {
            if let Some(done) = restore_round(inner, &me, why, began, tx) {
                return done;
            }
        }
        for contact in contacts(inner) {
            if inner.status.is_shut_down() {
                return Err("shut down while joining the group again".into());
            }
            // A plain join may wait seconds on a member between views: the restore
            // goes on between them.
            if RESTORE_AMONG_LIVE {
                if let Some(done) = restore_round(inner, &me, why, began, tx) {
                    return done;
                }
            }
            let (me, creds) = (me.clone(), inner.creds.clone());
            let answer = match on_thread(inner, tx, move || {
                control::join(me, contact, Instant::now() + attempt, attempt, None, creds.as_ref())
            }) {
                Ok(Some(a)) => a,
                Ok(None) => Err(control::JoinError::Refused("the join attempt ended".into())),
                Err(done) => return done,
            };
            match answer {
                Ok(welcome) => match start_welcomed(inner, welcome, why, began, tx) {
                    Ok(true) => return Ok(()),
                    Ok(false) => {}
                    Err(lasting) => return Err(lasting),
                },
                // This member's certificate is revoked, or expired: no member will
                // take it back (the others removed it for that, most likely).
                Err(e @ control::JoinError::Auth { why: AuthError::Revoked | AuthError::Expired, .. }) => {
                    return Err(e.to_string());
                }
                Err(e) => tracing::info!(%contact, %e, "not taken back yet"),
            }
        }
        let until = Instant::now() + pause;
        while Instant::now() < until {
            if inner.status.is_shut_down() {
                return Err("shut down while joining the group again".into());
            }
            if let Some(done) = restart_if_back(inner, tx) {
                return done;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Counted: the one that counted this member may restart the view at any
        // moment and waits for its members only `setup_timeout`, so ask it often.
        let bound = matches!(lock(&inner.restore).as_ref().map(|r| r.stand()), Some(Stand::Bound(_)));
        pause = if bound { Duration::from_millis(100) } else { (pause * 2).min(Duration::from_secs(2)) };
    }
}

/// Runs `f` (one request to a contact) on a thread of its own, so that a shutdown
/// does not wait for a contact that accepted the connection but does not answer;
/// restarts the view meanwhile if this node may. `Ok(None)`: the thread ended
/// without an answer; `Err`: what `rejoin` returns (shut down, or restarted).
fn on_thread<T: Send + 'static>(
    inner: &Arc<Inner>,
    tx: &Sender<Event>,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<Option<T>, Result<(), String>> {
    let (done_tx, done_rx) = channel();
    let spawned = std::thread::Builder::new().name("spindle-rejoin".into()).spawn(move || {
        let _ = done_tx.send(f());
    });
    if let Err(e) = spawned {
        return Err(Err(format!("no thread to join the group again: {e}")));
    }
    loop {
        if let Some(done) = restart_if_back(inner, tx) {
            return Err(done);
        }
        match done_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(a) => return Ok(Some(a)),
            Err(RecvTimeoutError::Timeout) if inner.status.is_shut_down() => {
                return Err(Err("shut down while joining the group again".into()))
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(None),
        }
    }
}

/// One round of the restore (see `crate::restore`): asks the members the restore
/// names, following redirects; returns what `rejoin` returns if it was taken in
/// or restarted the view.
fn restore_round(
    inner: &Arc<Inner>,
    me: &MemberInfo,
    why: &str,
    began: Instant,
    tx: &Sender<Event>,
) -> Option<Result<(), String>> {
    let last = {
        let mut r = lock(&inner.restore);
        let r = r.as_mut()?;
        r.begin_round();
        r.view().0
    };
    loop {
        if inner.status.is_shut_down() {
            return Some(Err("shut down while joining the group again".into()));
        }
        let Some(to) = lock(&inner.restore).as_mut().and_then(|r| r.next_ask()) else { break };
        let (answer, welcome) = match inner.directory.control_of(to) {
            None => (Answer::Unreachable, None),
            Some(addr) => {
                let (me, ask_inner) = (me.clone(), inner.clone());
                match on_thread(inner, tx, move || {
                    let creds = ask_inner.creds.clone();
                    control::restore_ask(&me, addr, last, creds.as_ref(), |a| ask_inner.directory.node_at(a))
                }) {
                    Ok(Some(a)) => a,
                    Ok(None) => (Answer::Lost, None),
                    Err(done) => return Some(done),
                }
            }
        };
        tracing::info!(asked = %to, ?answer, "restoring the last view");
        if let Some(r) = lock(&inner.restore).as_mut() {
            r.answer(answer);
        }
        let started = match welcome {
            Some(control::Taken::Joined(w)) => start_welcomed(inner, w, why, began, tx),
            Some(control::Taken::Restored((view, _, key))) => start_restored(inner, view_of(inner, view, key), tx),
            None => Ok(false),
        };
        match started {
            Ok(true) => return Some(Ok(())),
            Ok(false) => {}
            Err(lasting) => return Some(Err(lasting)),
        }
    }
    restart_if_back(inner, tx)
}

/// Starts the view a welcome gave this node; false (and it tries again) if the
/// view could not start, `Err` if trying again cannot help (see `start_view`).
fn start_welcomed(
    inner: &Arc<Inner>,
    welcome: control::Welcome,
    why: &str,
    began: Instant,
    tx: &Sender<Event>,
) -> Result<bool, String> {
    let view = take_welcome(inner, welcome);
    inner.hooks.rejoined(why);
    start_view(inner, &view, tx, || {
        inner.counters.rejoined(began.elapsed());
        tracing::info!(view = view.id().0, members = ?view.members(), "back in the group");
    })
}

/// Starts the view the member that counted this one restarted (see
/// `crate::restore`): as a member that stays in a view, it keeps its own state (the
/// restarter's sent along is not taken) and no rejoin hook runs; false (and it
/// tries again) if the view could not start, `Err` as for `start_welcomed`.
fn start_restored(inner: &Arc<Inner>, view: View, tx: &Sender<Event>) -> Result<bool, String> {
    start_view(inner, &view, tx, || {
        tracing::warn!(view = view.id().0, members = ?view.members(), "the view is restored: the group goes on");
    })
}

/// Starts `view` here and makes it current (`started` runs just before); false if
/// it could not start. `Err` where trying again cannot help (no room in
/// `/dev/shm`): joining again would only make the group change its view for a
/// member that fails every setup, so the node stops with the reason.
fn start_view(inner: &Arc<Inner>, view: &View, tx: &Sender<Event>, started: impl FnOnce()) -> Result<bool, String> {
    match Epoch::start(inner, view.clone(), &[], tx.clone()) {
        Ok(epoch) => {
            started();
            back_in(inner, epoch, view);
            Ok(true)
        }
        Err(e) if e.lasting() => Err(e.to_string()),
        Err(e) => {
            tracing::warn!(view = view.id().0, %e, "the view that takes this node back could not start; trying again");
            Ok(false)
        }
    }
}

/// A node out of its view that counted a strict majority of it restarts the group
/// (see `crate::restore`): view `last + 1` with itself and the members it counted,
/// each keeping its state; they start it when they ask again. `None` while it is
/// not (yet) time.
fn restart_if_back(inner: &Arc<Inner>, tx: &Sender<Event>) -> Option<Result<(), String>> {
    let view = lock(&inner.restore).as_mut()?.restart()?;
    match Epoch::start(inner, view.clone(), &[], tx.clone()) {
        Ok(epoch) => {
            tracing::warn!(view = view.id().0, members = ?view.members(), "a majority of the last view is back: the group goes on");
            back_in(inner, epoch, &view);
            Some(Ok(()))
        }
        Err(e) => {
            tracing::warn!(%e, "could not restart the group; trying again");
            if let Some(r) = lock(&inner.restore).as_mut() {
                r.restart_failed();
            }
            None
        }
    }
}

/// This node runs `view` again (taken back, or restarting the group): its epoch
/// becomes current, it is no longer out of the view, and the view is kept and
/// announced.
fn back_in(inner: &Arc<Inner>, epoch: Epoch, view: &View) {
    let transport = epoch.transport.clone();
    *spindle_sst::sync::write(&inner.current) = Some(epoch);
    inner.status.set_rejoining(None);
    inner.status.set_removal(None);
    *lock(&inner.restore) = None;
    super::restart::remember(inner, view);
    inner.status.bump();
    inner.hooks.view_started(view, &transport);
}
