//! Sending: into a subgroup by index, or into the one a dynamic layout names in the
//! view the send happens in.

use super::{Group, SendError};
use crate::view::View;
use std::time::{Duration, Instant};

/// Sends in one subgroup of a [`Group`] (see [`Group::subgroup`]).
#[derive(Debug, Clone, Copy)]
pub struct SubgroupHandle<'a> {
    group: &'a Group,
    k: usize,
}

impl SubgroupHandle<'_> {
    /// Sends a copy of `data` (see [`Group::send`]).
    pub fn send(&self, data: &[u8]) -> Result<(), SendError> {
        self.group.send(self.k, data)
    }
    /// Sends a message built in place (see [`Group::send_with`]).
    pub fn send_with(
        &self,
        len: usize,
        build: impl Fn(&mut spindle_smc::runtime::SendSlot<'_>),
    ) -> Result<(), SendError> {
        self.group.send_with(self.k, len, build)
    }
}

impl Group {
    /// A handle for sending in subgroup `k` (the subgroup of that index in every view).
    pub fn subgroup(&self, k: usize) -> SubgroupHandle<'_> {
        SubgroupHandle { group: self, k }
    }

    /// Sends a copy of `data` in subgroup `k`; waits through view changes (up to the
    /// send timeout for a view that has the subgroup).
    pub fn send(&self, k: usize, data: &[u8]) -> Result<(), SendError> {
        self.send_with(k, data.len(), |slot| slot.write(0, data))
    }

    /// Sends a `len`-byte message built in place by `build` (which may run more than
    /// once if a view change interrupts the send).
    pub fn send_with(
        &self,
        k: usize,
        len: usize,
        build: impl Fn(&mut spindle_smc::runtime::SendSlot<'_>),
    ) -> Result<(), SendError> {
        self.send_where(|_| Some(k), len, build)
    }

    /// Like [`Group::send_with`], into the subgroup `pick` names in the view the
    /// send happens in (`None`: not in this view; wait for the next). For dynamic
    /// layouts, whose subgroups may be numbered anew in every view: the choice and
    /// the send happen in the same view.
    pub fn send_where(
        &self,
        pick: impl Fn(&View) -> Option<usize>,
        len: usize,
        build: impl Fn(&mut spindle_smc::runtime::SendSlot<'_>),
    ) -> Result<(), SendError> {
        self.send_where_within(pick, len, build, None, None)
    }

    /// [`Group::send_where`] with bounds on its waits: for room in a full window
    /// or arena, up to `room` (`None`: as long as it takes), and for a view that has
    /// the subgroup, up to `view` (`None`: the send timeout). Past either bound it
    /// fails with [`SendError::Timeout`] (room) or [`SendError::NotReady`] (view);
    /// `Some(Duration::ZERO)` for both never waits.
    #[inline]
    pub fn send_where_within(
        &self,
        pick: impl Fn(&View) -> Option<usize>,
        len: usize,
        build: impl Fn(&mut spindle_smc::runtime::SendSlot<'_>),
        room: Option<Duration>,
        view: Option<Duration>,
    ) -> Result<(), SendError> {
        // The common case inline (a view, room now); waiting out of line.
        match self.attempt(&pick, len, &build) {
            Ok(()) => Ok(()),
            Err(Unsent::Failed(e)) => Err(e),
            Err(_) => self.send_waiting(pick, len, build, room, view),
        }
    }

    /// [`Group::send_where_within`] for a sender that keeps `cache` from send to
    /// send (one cache per sending thread, or under the caller's own lock): it
    /// sends into the subgroup its last send used without the view's lock, and
    /// takes the locked path on the first send, after a view change, a rejoin or
    /// a stop, and whenever that subgroup takes no claim now (wedged for a view
    /// change, window full: the locked path waits as `send_where_within` does).
    /// `pick` must name the same subgroup for the same view, as in
    /// [`Group::send_where`].
    ///
    /// Why this needs no lock: a subgroup's claims end for good when its view is
    /// wedged, with a locked write to the word a claim is taken with; a claim
    /// taken before that is published by its sender without waiting, and a view is
    /// installed only once every claim of its wedged subgroups is taken in (see
    /// `install`), so the trimmed messages it sends again include it.
    #[inline]
    pub fn send_cached(
        &self,
        cache: &mut SendCache,
        pick: impl Fn(&View) -> Option<usize>,
        len: usize,
        build: impl Fn(&mut spindle_smc::runtime::SendSlot<'_>),
        room: Option<Duration>,
        view: Option<Duration>,
    ) -> Result<(), SendError> {
        // Plain loads: a view installed, a rejoin or a stop moves the generation,
        // and the handle of the view before is let go of at the next send.
        let gen = self.inner.status.generation();
        if let Some(s) = cache.sub.as_ref().filter(|_| cache.gen == gen && self.stopped().is_none()) {
            if let Ok(mut slot) = s.try_reserve(len) {
                build(&mut slot);
                slot.commit();
                return Ok(());
            }
        }
        cache.sub = None;
        self.send_where_within(&pick, len, &build, room, view)?;
        // The subgroup of the view the next send is likely to happen in (if the view
        // changed since, its subgroup is wedged or the generation moved on, and the
        // next send comes back here).
        let gen = self.inner.status.generation();
        let cur = spindle_sst::sync::read(&self.inner.current);
        cache.sub = cur.as_ref().and_then(|e| e.sub(pick(&e.view)?)).cloned();
        cache.gen = gen;
        Ok(())
    }

    /// One try of a send in the current view: sent, or why not (see [`Unsent`]).
    #[inline]
    fn attempt(
        &self,
        pick: &impl Fn(&View) -> Option<usize>,
        len: usize,
        build: &impl Fn(&mut spindle_smc::runtime::SendSlot<'_>),
    ) -> Result<(), Unsent> {
        if let Some(why) = self.stopped() {
            return Err(Unsent::Failed(SendError::Stopped(why)));
        }
        // Held through the commit: a view change installs only once no send is in
        // flight (see `install`).
        let cur = spindle_sst::sync::read(&self.inner.current);
        let Some(e) = cur.as_ref() else {
            // Out of the view for lack of a majority: say so now, not after the
            // send timeout (a removed node waits: it is back soon).
            if let Some(super::Removal::NoMajority(m)) = self.inner.status.removal() {
                return Err(Unsent::Failed(SendError::NoMajority(m)));
            }
            return Err(Unsent::NoView);
        };
        let Some(k) = pick(&e.view) else { return Err(Unsent::NotReady(None)) };
        let Some(s) = e.sub(k) else {
            // A subgroup of the view without this node, or the layout not
            // satisfied yet.
            return Err(match e.specs.get(k) {
                Some(_) => Unsent::Failed(SendError::NotSender(k)),
                None => Unsent::NotReady(Some(k)),
            });
        };
        let tried = match s.try_reserve(len) {
            Ok(mut slot) => {
                build(&mut slot);
                slot.commit();
                Ok(())
            }
            Err(spindle_smc::SendError::NotSender) => Err(Unsent::Failed(SendError::NotSender(k))),
            Err(spindle_smc::SendError::TooLarge { len, max }) => Err(Unsent::Failed(SendError::TooLarge { len, max })),
            Err(spindle_smc::SendError::NoRoom(e)) => Err(Unsent::Failed(SendError::NoRoom(e))),
            Err(spindle_smc::SendError::Busy) => Err(Unsent::NoRoom { sub: s.clone(), busy: true }),
            Err(spindle_smc::SendError::Full) => Err(Unsent::NoRoom { sub: s.clone(), busy: false }),
            Err(spindle_smc::SendError::Wedged) => Err(Unsent::NotReady(Some(k))), // the next view
        };
        tried
    }

    /// [`Group::send_where_within`] past its first try: tries again, waiting for
    /// room and for a view with the subgroup within the bounds given.
    #[inline(never)]
    fn send_waiting(
        &self,
        pick: impl Fn(&View) -> Option<usize>,
        len: usize,
        build: impl Fn(&mut spindle_smc::runtime::SendSlot<'_>),
        room: Option<Duration>,
        view: Option<Duration>,
    ) -> Result<(), SendError> {
        let mut room_deadline: Option<Instant> = None;
        let mut k = None;
        // Read the clock only once a send has to wait (not on every message).
        let mut deadline = None;
        let backoff = crossbeam_utils::Backoff::new();
        loop {
            let gen = self.inner.status.generation();
            match self.attempt(&pick, len, &build) {
                Ok(()) => return Ok(()),
                Err(Unsent::Failed(e)) => return Err(e),
                Err(Unsent::NoRoom { busy: true, .. }) if !backoff.is_completed() => {
                    backoff.snooze();
                    continue;
                }
                Err(Unsent::NoRoom { sub, .. }) => {
                    // Back-pressure, not a view that is not ready: its own bound. The
                    // wait is outside the view's lock, which a view change must be
                    // able to take meanwhile.
                    let mut wait = Duration::from_millis(20);
                    if let Some(room) = room {
                        let until = *room_deadline.get_or_insert_with(|| Instant::now() + room);
                        let left = until.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return Err(SendError::Timeout(room));
                        }
                        wait = wait.min(left);
                    }
                    sub.wait_for_room(wait);
                    backoff.reset();
                    continue;
                }
                Err(Unsent::NotReady(picked)) => k = picked,
                Err(Unsent::NoView) => {}
            }
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + view.unwrap_or(self.inner.send_timeout));
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SendError::NotReady(k));
            }
            self.inner.status.wait_change(gen, left.min(Duration::from_millis(20)));
        }
    }
}

/// What [`Group::send_cached`] keeps between sends: the subgroup the last one
/// went to, and the group's generation then. It holds that subgroup's view (its
/// memory and links) until the next send after a view change, or its drop.
#[derive(Debug, Default)]
pub struct SendCache {
    sub: Option<spindle_smc::runtime::Subgroup>,
    gen: u64,
}

/// Why one try of a send sent nothing.
enum Unsent {
    /// An error that waiting does not mend.
    Failed(SendError),
    /// No room in the subgroup's window or arena now (`busy`: for the moment the
    /// predicate thread adds nulls).
    NoRoom { sub: spindle_smc::runtime::Subgroup, busy: bool },
    /// A view, but not one to send in: the pick named no subgroup (`None`), or
    /// subgroup `k` is not set up yet or is ending.
    NotReady(Option<usize>),
    /// No view at all for now.
    NoView,
}
