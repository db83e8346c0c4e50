//! View changes (kills, restarts, late joins) and clients' failovers.

use super::catchup::Fetch;
use super::world::World;
use crate::qos::Level;
use crate::table::{Endpoint, TopicEntry};
use spindle_sst::transport::NodeId;
use spindle_views::view::ViewId;

/// How a member leaves the view.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Gone {
    /// Its process ends: its engine and unwritten log records are lost.
    Killed(NodeId),
    /// It runs on out of the view, to be taken back (a rejoin).
    Removed(NodeId),
}

impl World {
    /// A kill, a restart, a late join, a removal or a return, or a client's
    /// failover, by the seed's odds.
    pub(crate) fn fault(&mut self) {
        let roll = self.rng.below(100);
        if roll < self.cfg.kill * 10 && self.stats.kills < self.cfg.max_kills {
            if let Some(victim) = self.victim() {
                self.stats.kills += 1;
                let members: Vec<NodeId> = self.in_view.iter().copied().filter(|n| *n != victim).collect();
                self.new_view(members, Some(Gone::Killed(victim)));
            }
        } else if roll < 40 && !self.later.is_empty() {
            let n = self.later.remove(0);
            self.stats.joins += 1;
            self.join(n);
        } else if roll < 40 + self.cfg.restart * 10 && !self.dead.is_empty() {
            let n = self.dead.remove(0);
            self.stats.restarts += 1;
            self.join(n);
        } else if (70..75).contains(&roll) && self.stats.removals < self.cfg.max_removals {
            if let Some(out) = self.victim() {
                self.stats.removals += 1;
                let members: Vec<NodeId> = self.in_view.iter().copied().filter(|n| *n != out).collect();
                self.new_view(members, Some(Gone::Removed(out)));
            }
        } else if (75..80).contains(&roll) && !self.removed.is_empty() {
            let n = self.removed.remove(0);
            self.take_back(n);
        } else if roll >= 100 - self.cfg.failover * 10 && !self.clients.is_empty() {
            let i = self.rng.below(self.clients.len() as u64) as usize;
            self.failover(i);
        }
    }

    /// A member that may leave the view now: a complete one, while another
    /// complete one stays among the members every late join in progress asks, so
    /// the history always has a source. (A join whose every source goes ends
    /// without the history, which its readers are told; its numbering is then its
    /// own. The simulator keeps to the runs where that does not happen.)
    fn victim(&mut self) -> Option<NodeId> {
        let complete: Vec<NodeId> =
            self.in_view.iter().copied().filter(|n| self.members[n.0 as usize].complete()).collect();
        let victim = match complete.len() {
            0 | 1 => None,
            n => Some(complete[self.rng.below(n as u64) as usize]),
        };
        let serves = |c: NodeId, view| {
            let e = self.members[c.0 as usize].engine.as_ref().filter(|_| self.in_view.contains(&c));
            e.and_then(|e| e.seam_of(view)).is_some_and(|s| s.complete)
        };
        let sourced =
            |v: NodeId| self.fetches.iter().all(|(_, f)| f.pending.iter().any(|c| *c != v && serves(*c, f.view)));
        victim.filter(|v| sourced(*v))
    }

    /// A removed member comes back with the engine it had: told it rejoined (as
    /// the participant tells its topics before the view that has it again
    /// starts), it catches up on what it missed.
    pub(crate) fn take_back(&mut self, n: NodeId) {
        self.stats.rejoins += 1;
        let m = self.member(n);
        m.rejoins += 1;
        if let Some(e) = m.engine.as_mut() {
            e.rejoined();
        }
        let mut members = self.in_view.clone();
        members.push(n);
        self.new_view(members, None);
    }

    /// Node `n` starts (again) and the next view has it.
    fn join(&mut self, n: NodeId) {
        if let Err(why) = self.start_member(n) {
            // Reported by the logged invariant's check of the reopen.
            self.failed_joins.push(n);
            tracing::error!(%why, "sim: a member could not start");
            return;
        }
        let mut members = self.in_view.clone();
        members.push(n);
        self.new_view(members, None);
    }

    pub(crate) fn start_member(&mut self, n: NodeId) -> Result<(), String> {
        let (qos, keyed, now, mutation) = (self.cfg.qos, self.cfg.instances > 0, self.now(), self.cfg.mutation);
        let (step, reads) = (self.step, !(self.cfg.unread && n.0 == 0));
        let m = self.member(n);
        m.start(qos, keyed, reads, (now, step), mutation)?;
        let out = m.drain(keyed);
        debug_assert!(out.is_empty(), "a new member serves no client yet");
        super::invariants::logged::reopened(self.member(n))
    }

    /// The next view has `members`; `gone` left (its undelivered messages are
    /// gone with it). Every survivor first delivers what anyone delivered of this
    /// view; a removed member stays where it was.
    pub(crate) fn new_view(&mut self, members: Vec<NodeId>, gone: Option<Gone>) {
        let left = gone.map(|g| match g {
            Gone::Killed(n) | Gone::Removed(n) => n,
        });
        if self.unordered() {
            self.end_unordered_view(left);
        }
        let trim = self.in_view.iter().map(|n| self.members[n.0 as usize].cursor).max().unwrap_or(0);
        self.commit(trim);
        let carry: Vec<(NodeId, Vec<u8>)> =
            self.log.drain(trim..).filter(|(sender, _)| Some(*sender) != left).collect();
        for n in self.in_view.clone() {
            if Some(n) != left {
                while self.members[n.0 as usize].cursor < trim {
                    let k = 1 + self.rng.below(8) as usize;
                    self.deliver(n, k);
                }
            }
        }
        match gone {
            Some(Gone::Killed(k)) => {
                let m = self.member(k);
                m.engine = None;
                // What its log's writer had not written is gone with it.
                m.pending.clear();
                self.fetches.retain(|(n, _)| *n != k);
                self.dead.push(k);
            }
            Some(Gone::Removed(k)) => {
                // It runs on, out of the view, and asks no one; its clients move
                // on (`World::act`), as from a member whose view no longer has it.
                self.fetches.retain(|(n, _)| *n != k);
                self.removed.push(k);
            }
            None => {}
        }
        self.log = carry;
        self.commit_reset();
        self.view = ViewId(self.view.0 + 1);
        if super::tracing_on() {
            eprintln!(
                "step {}: view {} {members:?} gone {gone:?} trim {trim} order {}",
                self.step,
                self.view.0,
                self.order.len()
            );
        }
        self.in_view = members.clone();
        self.stats.views += 1;
        let entry = self.entry();
        let (view, now, keyed) = (self.view, self.now(), self.cfg.instances > 0);
        for n in members.iter().copied() {
            let m = self.member(n);
            m.cursor = 0;
            let Some(e) = m.engine.as_mut() else { continue };
            let others = e.enter_view(view, &entry, &members, now, &mut m.fx);
            e.view_started(&entry, &members, &mut m.fx);
            let from = e.next_seq();
            let out = self.member(n).drain(keyed);
            self.hand_to_clients(n, &out);
            if let Some(others) = others {
                self.fetches.push((n, Fetch::new(view, from, others, self.step)));
            }
        }
    }

    /// The topic as the view's table lists it: every member's writer and reader.
    fn entry(&self) -> TopicEntry {
        let level = self.cfg.qos.level;
        let ends =
            |l| self.in_view.iter().map(|n| Endpoint { node: n.0, id: super::member::WRITER, level: l }).collect();
        TopicEntry {
            name: "sim".into(),
            type_name: "sim".into(),
            qos: self.cfg.qos,
            writers: ends(level),
            readers: ends(Level::Unordered),
        }
    }

    /// Every client attaches to a member of the first view.
    pub(crate) fn attach_clients(&mut self) {
        for i in 0..self.clients.len() {
            self.failover(i);
        }
        self.stats.failovers = 0;
    }

    /// Client `i` moves to another complete member of the view (if there is one),
    /// resumes its reader there and sends again what was not acknowledged.
    pub(crate) fn failover(&mut self, i: usize) {
        let old = self.clients[i].at;
        let to: Vec<NodeId> =
            self.in_view.iter().copied().filter(|n| Some(*n) != old && self.members[n.0 as usize].complete()).collect();
        if to.is_empty() {
            return;
        }
        let new = to[self.rng.below(to.len() as u64) as usize];
        self.stats.failovers += 1;
        let id = self.clients[i].id;
        if let Some(e) = old.and_then(|o| self.members[o.0 as usize].engine.as_mut()) {
            e.forget_client(id);
        }
        let (page, now) = (self.cfg.page, self.now());
        let e = self.members[new.0 as usize].engine.as_mut().expect("complete members run");
        self.clients[i].attach(new, e, page, (now, self.step));
        let resend: Vec<u64> = self.clients[i].unacked().collect();
        let ns = now.wall.duration_since(std::time::SystemTime::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        for seq in resend {
            let instance = self.client_instance(seq);
            let bytes = self.clients[i].sample(self.cfg.qos.level, seq, instance, ns);
            self.log.push((new, bytes));
        }
    }
}
