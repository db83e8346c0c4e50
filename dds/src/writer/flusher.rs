//! The process's pack flusher: one thread that sends the open pack of a writer
//! batching with a delay ([`super::Batching::Within`]) once the delay has passed,
//! if nothing sent it before. A writer that opens a pack leaves a reminder unless
//! it has one with the flusher already (one per writer: a busy writer opens a pack
//! every few microseconds); the thread sleeps until the earliest reminder is due
//! (or, with none, until one comes), sends the pack then open if its delay has
//! passed, else moves the reminder to when it will have, and drops it once the
//! writer has no pack open. It never waits for room: a pack that cannot go out now
//! is looked at again a delay later.

use super::sending::{Batching, Sending};
use crate::participant::state::Participant;
use crate::topic::TopicState;
use crate::DdsError;
use spindle_sst::sync::lock;
use std::sync::{Arc, Condvar, Mutex, OnceLock, TryLockError, Weak};
use std::time::{Duration, Instant};

/// What a reminder flushes: a writer's participant, topic and send state (weak,
/// so that a reminder keeps none of them alive).
#[derive(Debug)]
pub(crate) struct Target {
    pub(super) p: Weak<Participant>,
    pub(super) topic: Weak<TopicState>,
    pub(super) sending: Weak<Mutex<Sending>>,
}

/// How soon a reminder that found its writer's send lock taken looks again (at
/// most: its delay, if shorter).
const BUSY: Duration = Duration::from_millis(1);

/// `target`'s open pack is to be looked at `at`.
struct Reminder {
    at: Instant,
    delay: Duration,
    target: Arc<Target>,
}

struct State {
    due: Vec<Reminder>,
    /// The thread is asleep until this (`None`: until a reminder comes); a
    /// reminder due earlier wakes it.
    asleep: Option<Option<Instant>>,
}

struct Flusher {
    state: Mutex<State>,
    cond: Condvar,
}

/// The process's flusher, its thread started at the first call; an error if no
/// thread could be started.
pub(super) fn start() -> Result<(), DdsError> {
    flusher().map(|_| ())
}

/// Leaves a reminder: `target`'s pack, opened `now`, is due `delay` later, and
/// if it cannot go out then, again every `delay`. False if the flusher has no
/// thread (batching with a delay is refused then) or the delay reaches past what
/// an `Instant` holds (then only a flush sends it).
pub(super) fn remind(now: Instant, delay: Duration, target: &Arc<Target>) -> bool {
    let (Ok(f), Some(at)) = (flusher(), now.checked_add(delay)) else { return false };
    let mut g = lock(&f.state);
    g.due.push(Reminder { at, delay, target: target.clone() });
    if let Some(until) = g.asleep {
        if until.map_or(true, |u| at < u) {
            g.asleep = None;
            f.cond.notify_one();
        }
    }
    true
}

fn flusher() -> Result<&'static Flusher, DdsError> {
    static F: OnceLock<Result<&'static Flusher, std::io::ErrorKind>> = OnceLock::new();
    let f = F.get_or_init(|| {
        let f: &'static Flusher = Box::leak(Box::new(Flusher {
            state: Mutex::new(State { due: Vec::new(), asleep: None }),
            cond: Condvar::new(),
        }));
        match std::thread::Builder::new().name("dds-pack-flusher".into()).spawn(move || run(f)) {
            Ok(_) => Ok(f),
            Err(e) => Err(e.kind()),
        }
    });
    f.map_err(DdsError::NoThread)
}

fn run(f: &'static Flusher) {
    let mut g = lock(&f.state);
    loop {
        let now = Instant::now();
        match g.due.iter().map(|r| r.at).min() {
            None => {
                g.asleep = Some(None);
                g = f.cond.wait(g).unwrap_or_else(|p| p.into_inner());
                g.asleep = None;
            }
            Some(next) if next > now => {
                g.asleep = Some(Some(next));
                g = f.cond.wait_timeout(g, next - now).unwrap_or_else(|p| p.into_inner()).0;
                g.asleep = None;
            }
            Some(_) => {
                let (ripe, later): (Vec<Reminder>, Vec<Reminder>) =
                    std::mem::take(&mut g.due).into_iter().partition(|r| r.at <= now);
                g.due = later;
                // Sent without the reminders' lock: a writer leaving one meanwhile
                // does not wait for these sends.
                drop(g);
                let again: Vec<Reminder> = ripe.into_iter().filter_map(|r| r.fire(now)).collect();
                g = lock(&f.state);
                g.due.extend(again);
            }
        }
    }
}

impl Reminder {
    /// Sends the writer's open pack if its delay has passed; itself again, when
    /// the pack's delay will have passed or a delay later if the pack could not go
    /// out now; nothing once the writer has no pack open, no delay any more, or
    /// is gone.
    fn fire(self, now: Instant) -> Option<Reminder> {
        // The writer's state first: a writer already gone is seen before anything
        // else of it is held here.
        let t = &self.target;
        let sending = t.sending.upgrade()?;
        let (Some(topic), Some(p)) = (t.topic.upgrade(), t.p.upgrade()) else { return None };
        let mut one = match sending.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            // A write holds it, and may be sending the pack: soon again.
            Err(TryLockError::WouldBlock) => return Some(Reminder { at: now + self.delay.min(BUSY), ..self }),
        };
        // The writer's setting now (it may have changed since the reminder was left).
        let (Batching::Within(delay), Some(opened)) = (one.batching, one.pending.opened_at()) else {
            one.reminded = false;
            return None;
        };
        let (Some(due), Some(retry)) = (opened.checked_add(delay), now.checked_add(delay)) else {
            one.reminded = false;
            return None;
        };
        if due > now {
            return Some(Reminder { at: due, delay, ..self });
        }
        let now_only = Some(Duration::ZERO);
        match one.send_pack(&p.group, |v| topic.subgroup_in(v), now_only, now_only) {
            Ok(()) | Err(spindle_views::group::SendError::Stopped(_)) => {
                one.reminded = false;
                None
            }
            Err(_) => Some(Reminder { at: retry, delay, ..self }),
        }
    }
}
