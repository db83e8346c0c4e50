//! A deterministic simulator of restores: the members of one view, all out of it,
//! running the real [`Restore`] core over a network that delays, reorders and (in
//! some seeds) loses requests and answers, with members that become out at
//! different steps, members killed mid-restore, and members started again on their
//! state directories (they ask, follow redirects and count, but remember no
//! binding). Invariants, one per file, are checked after every step.
//!
//! Everything derives from one seed; a failing seed is printed and
//! [`RestoreSim::run_seed`] replays it.

pub mod one_restarter;
pub mod progress;
pub mod restarted_view;

use super::{Answer, Reply, Restore, Stand};
use crate::view::{View, ViewId};
use spindle_smc::sim::{Rng, Violation};
use spindle_sst::transport::NodeId;

/// One seed's setup.
#[derive(Debug, Clone)]
pub struct RestoreSimConfig {
    /// The seed.
    pub seed: u64,
    /// Members of the view.
    pub members: u32,
    /// Members dead from the start.
    pub dead: Vec<NodeId>,
    /// Members started again on their state directories (no restore core), each
    /// asking the member it found by discovery.
    pub restarted: Vec<(NodeId, NodeId)>,
    /// Per member: the step at which it is out of the view.
    pub out_at: Vec<u64>,
    /// Members killed mid-restore, and when.
    pub kills: Vec<(NodeId, u64)>,
    /// Percent of requests and answers lost.
    pub loss: u64,
    /// Percent of steps that deliver a message (the rest are members' turns).
    pub deliver: u64,
    /// Steps to run.
    pub steps: u64,
}

impl RestoreSimConfig {
    /// The setup `seed` stands for: 3 to 9 members, fewer than half of them dead
    /// in most seeds (any number in some), some started again; a quarter of the
    /// seeds lose messages or kill members mid-restore.
    pub fn from_seed(seed: u64) -> RestoreSimConfig {
        let mut rng = Rng::new(seed ^ 0x7e57_0e5e);
        let members = 3 + rng.below(7) as u32;
        let mut ids: Vec<NodeId> = (0..members).map(NodeId).collect();
        // Shuffle, then take the dead and the restarted from the front.
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let minority = (members as u64 - 1) / 2;
        let dead_n = if rng.chance(10) { rng.below(members as u64) } else { rng.below(minority + 1) } as usize;
        let dead: Vec<NodeId> = ids[..dead_n].to_vec();
        let live: Vec<NodeId> = ids[dead_n..].to_vec();
        let restarted_n = rng.below(live.len() as u64 / 2 + 1) as usize;
        let stranded = &live[restarted_n..];
        let restarted = live[..restarted_n]
            .iter()
            .map(|r| (*r, if stranded.is_empty() { *r } else { stranded[rng.below(stranded.len() as u64) as usize] }))
            .collect();
        // Out of the view over a long stretch, or nearly at once (more races).
        let spread = if rng.chance(50) { 300 } else { 1 + rng.below(20) };
        let out_at = (0..members).map(|_| rng.below(spread)).collect();
        let faulty = rng.chance(25);
        let loss = if faulty && rng.chance(50) { 1 + rng.below(40) } else { 0 };
        let deliver = 20 + rng.below(60);
        let mut kills = Vec::new();
        if faulty && (loss == 0 || rng.chance(50)) {
            for _ in 0..1 + rng.below(2) {
                kills.push((live[rng.below(live.len() as u64) as usize], rng.below(2000)));
            }
        }
        RestoreSimConfig { seed, members, dead, restarted, out_at, kills, loss, deliver, steps: 20_000 }
    }

    /// True when the seed kills nobody mid-restore and loses nothing: then the
    /// restore must finish.
    pub fn clean(&self) -> bool {
        self.kills.is_empty() && self.loss == 0
    }
}

/// A message in flight.
#[derive(Debug, Clone, Copy)]
enum Msg {
    Request { from: NodeId, to: NodeId, last: ViewId },
    Answer { to: NodeId, answer: Answer },
}

/// One simulated member.
#[derive(Debug)]
pub struct SimMember {
    /// Its id.
    pub id: NodeId,
    /// False once dead.
    pub alive: bool,
    /// Out of the view yet (before that it answers "between views").
    pub out: bool,
    /// Its restore, for a member that stayed alive; `None` for one started again.
    pub core: Option<Restore>,
    /// Started again: the member it asks (found by discovery), and whether it was
    /// taken in.
    pub restarted: Option<(NodeId, bool)>,
    waiting: bool,
}

impl SimMember {
    /// It runs a view (restarted it, or was taken in).
    pub fn running(&self) -> bool {
        match (&self.core, self.restarted) {
            (Some(c), _) => matches!(c.stand(), Stand::Restarted | Stand::Joined),
            (None, Some((_, joined))) => joined,
            _ => false,
        }
    }
}

/// What a finished run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Members that restarted the view (at most one).
    pub restarts: u64,
    /// Members running a view at the end.
    pub running: u64,
    /// Requests sent.
    pub requests: u64,
}

/// The simulator.
#[derive(Debug)]
pub struct RestoreSim {
    /// The setup.
    pub cfg: RestoreSimConfig,
    /// The view being restored.
    pub view: View,
    /// The members, by id.
    pub members: Vec<SimMember>,
    rng: Rng,
    flight: Vec<Msg>,
    step: u64,
    report: Report,
    restarters: one_restarter::Restarters,
}

impl RestoreSim {
    /// A simulator of `cfg`.
    pub fn new(cfg: RestoreSimConfig) -> RestoreSim {
        let view = View::with_id(ViewId(7), (0..cfg.members).map(NodeId).collect());
        let members = (0..cfg.members)
            .map(|i| {
                let id = NodeId(i);
                let again = cfg.restarted.iter().find(|(r, _)| *r == id).map(|(_, c)| (*c, false));
                SimMember {
                    id,
                    alive: !cfg.dead.contains(&id),
                    out: false,
                    core: again.is_none().then(|| Restore::new(id, view.clone())),
                    restarted: again,
                    waiting: false,
                }
            })
            .collect();
        let rng = Rng::new(cfg.seed);
        RestoreSim {
            cfg,
            view,
            members,
            rng,
            flight: Vec::new(),
            step: 0,
            report: Report::default(),
            restarters: Default::default(),
        }
    }

    /// Runs seed `seed`'s setup to the end.
    pub fn run_seed(seed: u64) -> Result<Report, Violation> {
        RestoreSim::new(RestoreSimConfig::from_seed(seed)).run()
    }

    fn violation(&self, invariant: &'static str, detail: String) -> Violation {
        Violation { seed: self.cfg.seed, step: self.step, invariant, detail }
    }

    /// Runs every step, checking the invariants after each.
    pub fn run(mut self) -> Result<Report, Violation> {
        while self.step < self.cfg.steps {
            self.step += 1;
            self.tick();
            let roll = self.rng.below(100);
            if roll < self.cfg.deliver && !self.flight.is_empty() {
                let i = self.rng.below(self.flight.len() as u64) as usize;
                let m = self.flight.swap_remove(i);
                self.deliver(m);
            } else {
                let i = self.rng.below(self.cfg.members as u64) as usize;
                self.turn(i);
            }
            self.restarters.check(&self.members).map_err(|d| self.violation(one_restarter::NAME, d))?;
            restarted_view::check(&self.view, &self.members).map_err(|d| self.violation(restarted_view::NAME, d))?;
        }
        progress::check(&self.cfg, &self.members).map_err(|d| self.violation(progress::NAME, d))?;
        self.report.restarts = self.restarters.count();
        self.report.running = self.members.iter().filter(|m| m.alive && m.running()).count() as u64;
        Ok(self.report)
    }

    /// Members whose time came become out, or die.
    fn tick(&mut self) {
        for (i, m) in self.members.iter_mut().enumerate() {
            if !m.out && self.cfg.out_at[i] <= self.step {
                m.out = true;
            }
        }
        for (k, at) in &self.cfg.kills {
            if *at == self.step {
                self.members[k.0 as usize].alive = false;
            }
        }
    }

    fn lose(&mut self) -> bool {
        self.cfg.loss > 0 && self.rng.chance(self.cfg.loss)
    }

    /// Member `i` takes a turn: restarts if it may, else sends its next request (or
    /// probes someone with a plain join, as the runtime does between rounds).
    fn turn(&mut self, i: usize) {
        let m = &mut self.members[i];
        if !m.alive || !m.out || m.running() {
            return;
        }
        let me = m.id;
        if let Some((contact, _)) = m.restarted {
            if !m.waiting {
                self.send(me, contact);
            }
            return;
        }
        let core = m.core.as_mut().expect("a member that stayed alive has a core");
        // The runtime looks at its restore also while its request is out.
        if core.restart().is_some() {
            self.restarters.restarted(me);
            return;
        }
        if m.waiting {
            return;
        }
        match core.next_ask() {
            Some(to) => self.send(me, to),
            None => {
                // The end of a round: a plain join to anyone (taken only by a
                // running view), then the next round.
                core.begin_round();
                let other = NodeId(self.rng.below(self.cfg.members as u64) as u32);
                if self.members[other.0 as usize].alive && self.members[other.0 as usize].running() {
                    self.members[i].core.as_mut().expect("core").joined();
                }
            }
        }
    }

    /// `from` sends its request to `to` (at once unreachable if `to` is dead).
    fn send(&mut self, from: NodeId, to: NodeId) {
        self.members[from.0 as usize].waiting = true;
        if !self.members[to.0 as usize].alive {
            return self.answered(from, Answer::Unreachable);
        }
        self.report.requests += 1;
        self.flight.push(Msg::Request { from, to, last: self.view.id() });
    }

    fn deliver(&mut self, m: Msg) {
        match m {
            Msg::Request { from, to, last } => {
                let answer = if self.lose() || !self.members[to.0 as usize].alive {
                    Answer::Lost
                } else {
                    let target = &mut self.members[to.0 as usize];
                    if target.running() {
                        Answer::Welcomed
                    } else if !target.out {
                        Answer::Refused
                    } else {
                        match target.core.as_mut().map(|c| c.on_request(from, last)) {
                            Some(Reply::Counted) => Answer::Counted,
                            Some(Reply::Redirect(n)) => Answer::Redirect(n),
                            Some(Reply::Running | Reply::Restored) => Answer::Welcomed,
                            Some(Reply::Stale | Reply::Outsider) | None => Answer::Refused,
                        }
                    }
                };
                // A lost answer reaches the asker as a broken connection.
                let answer = if answer != Answer::Lost && self.lose() { Answer::Lost } else { answer };
                self.flight.push(Msg::Answer { to: from, answer });
            }
            Msg::Answer { to, answer } => self.answered(to, answer),
        }
    }

    fn answered(&mut self, who: NodeId, answer: Answer) {
        let m = &mut self.members[who.0 as usize];
        m.waiting = false;
        if !m.alive {
            return;
        }
        if let Some((_, joined)) = m.restarted.as_mut() {
            match answer {
                Answer::Welcomed => *joined = true,
                // It follows a redirect at once, as its join loop does, and asks
                // the member it found again after that.
                Answer::Redirect(n) => self.send(who, n),
                _ => {}
            }
            return;
        }
        m.core.as_mut().expect("core").answer(answer);
    }
}

#[cfg(test)]
mod tests;
