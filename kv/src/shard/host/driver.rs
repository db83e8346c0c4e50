//! The member's driver thread: opens and closes the shards' stores as this
//! member becomes and stops being one of their replicas; at the primary of a
//! migration's new owner, runs its [`Puller`] step by step; at the primary of
//! any shard, appends the ends of pulls its log owes ([`rules::ends_owed`]). It
//! wakes on every view and at least every [`TICK`].

use super::Inner;
use crate::shard::puller::{Puller, Step};
use crate::shard::rules;
use crate::shard::wire::{PeerReply, PeerRequest};
use crate::update::Writer;
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::sync::lock;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The longest the driver sleeps.
pub const TICK: Duration = Duration::from_millis(50);
/// How long a pull step that failed waits before it is done again.
const RETRY: Duration = Duration::from_millis(20);
/// How long a pull step whose old owner answered "not ready" waits before it
/// asks again (the old owner is finishing what it admitted in the older view,
/// or its log's new primary is recovering: a few milliseconds).
const NOT_READY: Duration = Duration::from_millis(2);

/// A puller and the step it is to do next.
struct Running {
    puller: Puller,
    next: Step,
    /// Time spent asking for the batch to be logged next, where it was not
    /// asked ahead.
    asked: Duration,
}

pub(super) fn run(inner: &Inner) {
    let mut pullers: BTreeMap<u64, Running> = BTreeMap::new();
    while !inner.stop.load(Ordering::SeqCst) {
        // (A store that did not open is tried again on the next round; the
        // reason is logged.)
        let _ = inner.hold_stores();
        let (map, seen) = {
            let st = lock(&inner.view);
            (st.map.clone(), st.version)
        };
        // Pullers for the migrations to shards this member is the primary of.
        pullers.retain(|id, r| {
            map.migrations().iter().any(|m| m.id == *id) && inner.primary(r.puller.migration().to) == Some(inner.me)
        });
        for m in map.migrations() {
            if inner.primary(m.to) == Some(inner.me) && !pullers.contains_key(&m.id) {
                let (puller, next) = Puller::with_batch(*m, inner.pull_batch, inner.pull_bytes);
                pullers.insert(m.id, Running { puller, next, asked: Duration::ZERO });
            }
        }
        let mut idle = true;
        for r in pullers.values_mut() {
            if inner.stop.load(Ordering::SeqCst) {
                return;
            }
            idle &= !step(inner, r);
        }
        pullers.retain(|_, r| !r.puller.is_done());
        lock(&inner.cursors).retain(|id, _| pullers.contains_key(id));
        lock(&inner.read_cache).retain(|id, _| pullers.contains_key(id));
        tidy(inner);
        if idle {
            // A migration to a shard whose log has no primary yet (its new view's
            // primary is recovering): on when the log takes appends, which comes
            // after the view's start.
            if let Some(m) = map.migrations().iter().find(|m| inner.primary(m.to).is_none()) {
                if inner.logs.get(usize::from(m.to)).is_some_and(|l| l.wait_for_primary(TICK).is_some()) {
                    continue;
                }
            }
            let st = lock(&inner.view);
            // (Not if a view started since the map was read.)
            if st.version == seen {
                drop(inner.changed.wait_timeout(st, TICK));
            }
        }
    }
}

/// Does a puller's next step; whether to come back to it at once (it got
/// somewhere, or it waited out a pause before asking again).
fn step(inner: &Inner, r: &mut Running) -> bool {
    let mig = *r.puller.migration();
    let Some(store) = inner.store(mig.to) else { return false };
    let next = match r.next.clone() {
        step @ Step::Ask { .. } => {
            let began = Instant::now();
            let answer = ask(inner, &mig, step);
            r.asked += began.elapsed();
            match answer {
                Some(PeerReply::Batch { pairs, more, writers }) => {
                    let writers = writers.map(|w| w.into_iter().map(|(client, seq)| Writer { client, seq }).collect());
                    r.puller.batch(pairs, writers, more)
                }
                other => return wait(pause(inner, mig.from, &other)),
            }
        }
        Step::Append(rec) => {
            // The next batch is asked for while this one is logged (see
            // `Puller::ask_ahead`): the old owner reads while this log writes.
            let ahead = if inner.pull_ahead { r.puller.ask_ahead() } else { None };
            let began = Instant::now();
            let (logged, answer) = std::thread::scope(|s| {
                // (A thread that could not be started asks for nothing: the batch
                // is asked for in turn.)
                let asking = ahead.map(|a| std::thread::Builder::new().spawn_scoped(s, move || ask(inner, &mig, a)));
                let logged = store.record(rec.clone());
                (logged, asking.map(|h| h.ok().and_then(|h| h.join().ok().flatten())))
            });
            match answer {
                Some(Some(PeerReply::Batch { pairs, more, .. })) => {
                    r.puller.ahead_batch(pairs, more);
                }
                Some(_) => r.puller.ahead_failed(),
                None => {}
            }
            match logged {
                Ok(_) => {
                    if let crate::Update::Pulled { pairs, .. } = &rec {
                        if let Some((last, _)) = pairs.last() {
                            lock(&inner.cursors).insert(mig.id, last.clone());
                        }
                        let bytes: usize = pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
                        inner.pulled.0.fetch_add(pairs.len() as u64, Ordering::Relaxed);
                        inner.pulled.1.fetch_add(bytes as u64, Ordering::Relaxed);
                        // Leave the rest of the time to the clients (see
                        // `HostConfig::pull_share`): the work is this append (and
                        // the ask beside it), and the ask before it, if any.
                        let work = began.elapsed() + std::mem::take(&mut r.asked);
                        std::thread::sleep(work.mul_f64(1.0 / inner.pull_share - 1.0));
                    }
                    r.puller.appended()
                }
                Err(why) => {
                    tracing::debug!(%why, "a pulled batch was not logged: asked again");
                    return wait(RETRY);
                }
            }
        }
        Step::Drop { .. } => match inner.ask_peer(mig.from, &PeerRequest::Drop { migration: mig }) {
            Some(PeerReply::Dropped) => r.puller.dropped(),
            other => return wait(pause(inner, mig.from, &other)),
        },
        Step::Edit(e) => {
            let Some(g) = inner.group() else { return false };
            match g.edit_layout(&e.encode(), Duration::from_secs(10)) {
                Ok(_) => r.puller.edited(),
                Err(why) => {
                    tracing::debug!(%why, "the end of a migration was not in a view yet: asked again");
                    return wait(RETRY);
                }
            }
        }
        Step::Done => return false,
    };
    r.next = next;
    true
}

/// Sends a puller's [`Step::Ask`] to the old owner; its answer, if any.
fn ask(inner: &Inner, mig: &crate::shard::map::Migration, step: Step) -> Option<PeerReply> {
    let Step::Ask { after, max, max_bytes, .. } = step else { return None };
    inner.ask_peer(mig.from, &PeerRequest::Ask { migration: *mig, after, max, max_bytes })
}

/// How long to wait before asking the old owner `from` again after `reply`:
/// [`NOT_READY`] if it said so or its log's primary is not known here yet (a
/// view change under way), else [`RETRY`].
fn pause(inner: &Inner, from: super::Shard, reply: &Option<PeerReply>) -> Duration {
    match reply {
        Some(PeerReply::NotReady) => NOT_READY,
        None if inner.primary(from).is_none() => NOT_READY,
        _ => RETRY,
    }
}

fn wait(pause: Duration) -> bool {
    std::thread::sleep(pause);
    true
}

/// Appends the ends of pulls the shards this member is the primary of owe, once
/// every request admitted in an older view answered.
fn tidy(inner: &Inner) {
    let map = lock(&inner.view).map.clone();
    for s in 0..inner.layout.shards {
        let Some(store) = inner.store(s) else { continue };
        if inner.primary(s) != Some(inner.me) {
            continue;
        }
        let owed = rules::ends_owed(&store.pulls(), &map);
        if owed.is_empty() || !inner.drained() {
            continue;
        }
        for rec in owed {
            if let Err(why) = store.record(rec) {
                tracing::debug!(%why, "the end of a pull was not logged: asked again");
            }
        }
    }
}
