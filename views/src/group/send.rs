//! Sending: into a subgroup by index, or into the one a dynamic layout names in the
//! view the send happens in.

use super::{Group, SendError};
use crate::view::View;
use spindle_sst::transport::NodeId;
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
        if self.send_now(&pick, len, &build) {
            return Ok(());
        }
        self.send_waiting(pick, len, build, room, view)
    }

    /// The common case of a send, tried once: a view in which this node sends in
    /// the subgroup `pick` names, with room now. False if the send has to take
    /// [`Group::send_waiting`] (no view, a view change, a full window, an error to
    /// report); nothing was sent then.
    #[inline]
    fn send_now(
        &self,
        pick: &impl Fn(&View) -> Option<usize>,
        len: usize,
        build: &impl Fn(&mut spindle_smc::runtime::SendSlot<'_>),
    ) -> bool {
        if self.inner.status.is_stopped() {
            return false;
        }
        // Held through the commit: a view change installs only once no send is in
        // flight (see `install`).
        let cur = spindle_sst::sync::read(&self.inner.current);
        let Some(sub) = cur.as_ref().and_then(|e| pick(&e.view).and_then(|k| e.sub(k))) else { return false };
        // A member that does not send in the subgroup is refused here (no sender
        // handle) and told so by the slow path.
        let Ok(mut slot) = sub.try_reserve(len) else { return false };
        build(&mut slot);
        slot.commit();
        true
    }

    /// [`Group::send_where_within`] past its first try: waits for room and for a
    /// view with the subgroup, within the bounds given.
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
            if let Some(why) = self.stopped() {
                return Err(SendError::Stopped(why));
            }
            let gen = self.inner.status.generation();
            // A full window or arena: wait for room outside the view's lock, which
            // a view change must be able to take meanwhile.
            let mut full = None;
            {
                let cur = spindle_sst::sync::read(&self.inner.current);
                if cur.is_none() {
                    // Out of the view for lack of a majority: say so now, not after
                    // the send timeout (a removed node waits: it is back soon).
                    if let Some(super::Removal::NoMajority(m)) = self.inner.status.removal() {
                        return Err(SendError::NoMajority(m));
                    }
                }
                if let Some(e) = cur.as_ref() {
                    k = pick(&e.view);
                    let here = k.map(|k| (k, e.specs.get(k), e.sub(k)));
                    match here {
                        Some((_, Some(spec), Some(s)))
                            if spec.sender_rank(NodeId(self.inner.cfg.node_id)).is_some() =>
                        {
                            match s.try_reserve(len) {
                                Ok(mut slot) => {
                                    build(&mut slot);
                                    slot.commit();
                                    return Ok(());
                                }
                                Err(spindle_smc::SendError::TooLarge { len, max }) => {
                                    return Err(SendError::TooLarge { len, max })
                                }
                                Err(spindle_smc::SendError::NoRoom(e)) => return Err(SendError::NoRoom(e)),
                                Err(spindle_smc::SendError::Busy) if !backoff.is_completed() => {
                                    backoff.snooze();
                                    continue;
                                }
                                Err(spindle_smc::SendError::Full | spindle_smc::SendError::Busy) => {
                                    full = Some(s.clone())
                                }
                                Err(_) => {} // wedged: wait for the next view
                            }
                        }
                        Some((k, Some(_), _)) => return Err(SendError::NotSender(k)),
                        // The layout is not satisfied yet, or the pick named no subgroup.
                        Some((_, None, _)) | None => {}
                    }
                }
            }
            if let Some(s) = full {
                // Back-pressure, not a view that is not ready: its own bound.
                let mut wait = Duration::from_millis(20);
                if let Some(room) = room {
                    let until = *room_deadline.get_or_insert_with(|| Instant::now() + room);
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(SendError::Timeout(room));
                    }
                    wait = wait.min(left);
                }
                s.wait_for_room(wait);
                backoff.reset();
                continue;
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
