//! Which member starts a view's group again once every live member of it is out of
//! it: the sans-IO core of a restore (the driver is `group::rejoin` and
//! `group::control`; the simulator is `sim`, built for tests and with the `sim`
//! feature).
//!
//! A member is *out* of view `v` when it lost the majority of `v` (stranded) or the
//! others removed it from `v`, and it installed nothing after `v`. When the live
//! members of `v` are all out at once (a false suspicion together with a real
//! failure can do that: two of four see the other two gone, the fourth sees itself
//! cut off), no one runs a view any more, and a member that asks to be taken back
//! only hears "between views". One of them must start view `v + 1` with the others,
//! and never two: two would be two groups of one name.
//!
//! The runtime runs this core at every member out of its view; members that
//! stayed alive ask to be counted, and so do members started again on their state
//! directories.
//!
//! The rule here: a member out of `v` is *counted* by the one it asks to take it
//! back, and a count binds it for good.
//!
//! - Each out member is a **candidate** at first. It asks the members of `v` with a
//!   lower id than its own, lowest first, to count it. A candidate counts any
//!   member of `v` that asks (a member restarted on its state directory whose last
//!   view is `v` asks too), and restarts `v + 1` once it and the members it counted
//!   are a strict majority of `v`.
//! - While its own request is out, a candidate restarts nothing. Counted (or not
//!   sure: the request went out and no answer came back), it is **bound** to the one
//!   that counted it and never restarts; whoever asks it from then on is sent on
//!   there, and so is it when it asks again and hears that its own counter is bound
//!   elsewhere. Refused for certain, or not reached at all, it is a candidate again.
//! - Counts only ever point to a lower id, so chains of bindings end at one
//!   candidate, which gathers everyone the chains lead to.
//!
//! The restarted view `v + 1` lists the restarter and every member it counted, in
//! their order in `v`, as a view change that removed the others would. Each counted
//! member asks its counter again and is told to start that view (a
//! [`Reply::Restored`]); one that stayed alive continues its own state there, as a
//! member that stays in a view does, so no one's state replaces another's. (The
//! first restarts put the restarter alone in `v + 1` and had the others join it:
//! a Tailwind log whose only replicas were among the joiners then recovered empty
//! on the restarter and dropped, at each joiner, the open segment that held the
//! last acknowledged appends.)
//!
//! Why only one restarts: a restarter's majority is itself and members bound to it;
//! a member is bound to one candidate at a time and only moves on once that one is
//! bound elsewhere (and so never restarts); two strict majorities of `v` share a
//! member. What this does not cover, and docs/limits.md says: a member counted by
//! one candidate that is then killed and started again on its state directory asks
//! afresh (its binding was in memory), and a member bound to a candidate that died
//! after counting it waits for that candidate to come back.

#[cfg(all(not(loom), any(test, feature = "sim")))]
pub mod sim;

use crate::view::{View, ViewId};
use spindle_sst::transport::NodeId;

/// Where a member out of its view stands in the restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stand {
    /// It may restart the view once it counted a majority.
    Candidate,
    /// Its request to be counted is out (at the second id, after being bound to the
    /// first, if any).
    Asking {
        /// Bound to this one before asking, if it was.
        bound: Option<NodeId>,
        /// Asked.
        to: NodeId,
    },
    /// Counted by this one: it never restarts the view.
    Bound(NodeId),
    /// It started the view's successor itself.
    Restarted,
    /// It was taken into a running view.
    Joined,
}

/// What a member out of its view answers one that asks to be counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Counted: the asker is now bound here.
    Counted,
    /// Not counted: this member is bound to that one; ask there.
    Redirect(NodeId),
    /// The asker installed a later view than this member's: the group went on
    /// without this member, which must not restart it.
    Stale,
    /// The asker is not a member of the view (or is this member).
    Outsider,
    /// This member runs a view again (the asker should join it).
    Running,
    /// This member restarted the view with the asker in it: the asker starts that
    /// view ([`Restore::restarted`]).
    Restored,
}

/// How a request to be counted ended, as the asker saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The one asked counted it.
    Counted,
    /// The one asked is bound elsewhere.
    Redirect(NodeId),
    /// The one asked said no for certain (stale, between views for another reason).
    Refused,
    /// The request never left (no connection).
    Unreachable,
    /// The request left but no answer came back: it may have been counted.
    Lost,
    /// The one asked runs a view and took the asker in.
    Welcomed,
}

/// One member's restore of view `last`.
#[derive(Debug, Clone)]
pub struct Restore {
    me: NodeId,
    last: View,
    counted: Vec<NodeId>,
    stand: Stand,
    /// This round's members still to ask, the next last.
    round: Vec<NodeId>,
    /// The request in `stand` is a redirect not sent yet.
    follow: bool,
    /// The view this member restarted, once it did.
    restarted: Option<View>,
}

impl Restore {
    /// `me`, out of `last` (the last view it installed).
    pub fn new(me: NodeId, last: View) -> Restore {
        Restore {
            me,
            last,
            counted: Vec::new(),
            stand: Stand::Candidate,
            round: Vec::new(),
            follow: false,
            restarted: None,
        }
    }

    /// The view being restored.
    pub fn view(&self) -> ViewId {
        self.last.id()
    }

    /// Where this member stands.
    pub fn stand(&self) -> Stand {
        self.stand
    }

    /// The members this one counted.
    pub fn counted(&self) -> &[NodeId] {
        &self.counted
    }

    /// `from`, whose last installed view is `their_last`, asks to be counted.
    pub fn on_request(&mut self, from: NodeId, their_last: ViewId) -> Reply {
        if let Some(v) = self.restarted() {
            return if v.members().contains(&from) { Reply::Restored } else { Reply::Running };
        }
        if matches!(self.stand, Stand::Restarted | Stand::Joined) {
            return Reply::Running;
        }
        if their_last > self.last.id() {
            return Reply::Stale;
        }
        if from == self.me || !self.last.members().contains(&from) {
            return Reply::Outsider;
        }
        match self.stand {
            Stand::Bound(to) | Stand::Asking { bound: Some(to), .. } => Reply::Redirect(to),
            _ => {
                if !self.counted.contains(&from) {
                    self.counted.push(from);
                }
                Reply::Counted
            }
        }
    }

    /// Starts a round of requests: a candidate asks the members of the view below
    /// it, lowest first; a bound member asks only the one it is bound to (to hear
    /// whether that one runs a view, or is bound further on).
    pub fn begin_round(&mut self) {
        self.round = match self.stand {
            Stand::Candidate => self.last.members().iter().copied().filter(|m| *m < self.me).rev().collect(),
            Stand::Bound(to) => vec![to],
            _ => Vec::new(),
        };
    }

    /// The next request to send, if any: a redirect just heard, else the round's
    /// next member (the round ends once this member is bound). The request is out
    /// from here until [`Restore::answer`]; `None` while one is out, at the end of
    /// the round, or once this member runs a view.
    pub fn next_ask(&mut self) -> Option<NodeId> {
        if let Stand::Asking { to, .. } = self.stand {
            return std::mem::take(&mut self.follow).then_some(to);
        }
        let bound = match self.stand {
            Stand::Candidate => None,
            Stand::Bound(b) => Some(b),
            _ => return None,
        };
        let to = self.round.pop()?;
        self.stand = Stand::Asking { bound, to };
        Some(to)
    }

    /// How the request ended. A redirect is followed by the next
    /// [`Restore::next_ask`] (the request stays out meanwhile, so a candidate
    /// restarts nothing in between).
    pub fn answer(&mut self, a: Answer) {
        let Stand::Asking { bound, to } = self.stand else { return };
        self.follow = false;
        self.stand = match a {
            Answer::Counted | Answer::Lost => {
                self.round.clear();
                Stand::Bound(to)
            }
            Answer::Redirect(next) if next < to => {
                self.follow = true;
                Stand::Asking { bound, to: next }
            }
            // A redirect that does not lead lower is refused: chains end.
            Answer::Redirect(_) | Answer::Refused | Answer::Unreachable => match bound {
                Some(b) => Stand::Bound(b),
                None => Stand::Candidate,
            },
            Answer::Welcomed => Stand::Joined,
        };
    }

    /// The view to start, if this member is a candidate that counted a strict
    /// majority of the last view (itself included): `last + 1` with itself and the
    /// members it counted (see [`restart_view`]).
    pub fn restart(&mut self) -> Option<View> {
        if self.stand != Stand::Candidate {
            return None;
        }
        let here = self.last.members().iter().filter(|m| **m == self.me || self.counted.contains(m)).count();
        if !self.last.is_majority(here) {
            return None;
        }
        self.stand = Stand::Restarted;
        let v = restart_view(self.me, &self.counted, &self.last);
        self.restarted = Some(v.clone());
        Some(v)
    }

    /// The view this member restarted, while it is the one starting it.
    pub fn restarted(&self) -> Option<&View> {
        self.restarted.as_ref().filter(|_| self.stand == Stand::Restarted)
    }

    /// The view `restart` gave could not start (nothing ran, no one joined it):
    /// this member is a candidate again, with its counts.
    pub fn restart_failed(&mut self) {
        if self.stand == Stand::Restarted {
            self.stand = Stand::Candidate;
            self.restarted = None;
        }
    }

    /// This member was taken into a running view (not through this restore).
    pub fn joined(&mut self) {
        self.stand = Stand::Joined;
    }
}

/// The view a member restarts the group with: `last`'s next, with itself and the
/// members it `counted` in their order in `last` (so the members a layout puts
/// first, a log's primary and replicas, stay first, as a view change that removed
/// the others would keep them), and `last`'s layout and id counter.
pub fn restart_view(me: NodeId, counted: &[NodeId], last: &View) -> View {
    let members = last.members().iter().copied().filter(|m| *m == me || counted.contains(m)).collect();
    View::with_id(ViewId(last.id().0 + 1), members).with_layout(last.layout().clone()).with_next_node(last.next_node())
}

#[cfg(test)]
mod tests;
