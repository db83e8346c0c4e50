//! The group around the shards: view changes that install new maps, the
//! operator's migrations, and failures of primaries.

use super::{pick_range, Ev, Job, Member, Phase, PullIn, Sim};
use crate::shard::map::{MapEdit, Shard};
use std::collections::BTreeMap;

impl Sim {
    /// Starts a view change if one is due and none runs.
    pub(super) fn kick(&mut self) {
        if self.phase != Phase::Idle || (self.edits.is_empty() && !self.want_view) {
            return;
        }
        self.phase = Phase::Wedging;
        for s in 0..self.cfg.shards {
            self.later(Ev::Wedge(s));
        }
    }

    /// A member wedges its view; once all have, the leader decides the next one.
    pub(super) fn wedge(&mut self, s: Shard) {
        if self.phase != Phase::Wedging {
            return;
        }
        self.members[usize::from(s)].wedged = true;
        if !self.members.iter().all(|m| m.wedged) {
            return;
        }
        let mut map = self.map().clone();
        for e in std::mem::take(&mut self.edits) {
            // A refused edit (a range moving already, say) is dropped.
            if let Ok(Some(next)) = map.apply(&e) {
                map = next;
            }
        }
        self.maps.push(map);
        self.want_view = false;
        self.phase = Phase::Installing;
        self.report.views += 1;
        for s in 0..self.cfg.shards {
            self.later(Ev::Install(s));
        }
    }

    /// A member installs the newest view.
    pub(super) fn install(&mut self, s: Shard) {
        let newest = self.maps.len() as u64 - 1;
        let m = &mut self.members[usize::from(s)];
        if self.phase != Phase::Installing || (m.installed == newest && !m.wedged) {
            return;
        }
        m.installed = newest;
        m.wedged = false;
        let map = &self.maps[newest as usize];
        let ended: Vec<u64> =
            m.awaiting_edit.iter().copied().filter(|id| !map.migrations().iter().any(|g| g.id == *id)).collect();
        let life = m.life;
        for mig in &ended {
            m.awaiting_edit.remove(mig);
        }
        for mig in ended {
            self.later(Ev::Pull { shard: s, life, mig, input: PullIn::Edited });
        }
        self.start_pullers(s);
        self.later(Ev::Tidy { shard: s, life });
        if self.phase == Phase::Installing && self.members.iter().all(|m| m.installed == newest && !m.wedged) {
            self.phase = Phase::Idle;
            self.kick();
        }
    }

    /// The operator asks for a migration (and, while it has more to ask, plans
    /// the next).
    pub(super) fn migrate(&mut self) {
        if self.asked >= self.cfg.migrations {
            return;
        }
        self.asked += 1;
        let key = self.rng.below(self.keys.len() as u64) as usize;
        let h = crate::shard::key_hash(&self.keys[key]);
        let spans = self.map().spans();
        if let Some((span, owner)) = spans.into_iter().find(|(r, _)| r.contains(h)) {
            let range = pick_range(&mut self.rng, span, h);
            let to = (owner + 1 + self.rng.below(u64::from(self.cfg.shards) - 1) as Shard) % self.cfg.shards;
            self.edits.push(MapEdit::Migrate { range, to });
            self.kick();
        }
        let gap = 1 + self.rng.below(30 * self.cfg.max_delay);
        self.at(self.now + gap, Ev::Migrate);
    }

    /// Shard `s`'s primary fails; a new one takes its log and store and waits
    /// for the next view.
    pub(super) fn fail(&mut self, s: Shard) {
        self.failed += 1;
        self.report.failures += 1;
        let old = std::mem::replace(
            &mut self.members[usize::from(s)],
            Member {
                life: 0,
                installed: 0,
                wedged: true,
                log: Vec::new(),
                table: Default::default(),
                inflight: Vec::new(),
                appends: Vec::new(),
                pullers: BTreeMap::new(),
                awaiting_edit: Default::default(),
            },
        );
        {
            let m = &mut self.members[usize::from(s)];
            m.life = old.life + 1;
            m.installed = old.installed;
            m.log = old.log;
            m.table = old.table;
        }
        // Each append in flight was committed or not.
        for (_, rec, job) in old.appends {
            if self.rng.chance(50) {
                self.log(s, rec);
            }
            if let Job::Drop { target, life, mig } = job {
                self.later(Ev::Pull { shard: target, life, mig, input: PullIn::Retry });
            }
        }
        // Its clients hear of an error (or of nothing, and time out) and ask
        // again, elsewhere if the map moved.
        for c in 0..self.clients.len() {
            if self.clients[c].op.as_ref().is_some_and(|o| o.shard == s) {
                self.retry(c, true);
            }
        }
        self.want_view = true;
        match self.phase {
            // The view being installed is installed by the new one too.
            Phase::Installing => self.later(Ev::Install(s)),
            _ => self.kick(),
        }
        if self.failed < self.cfg.failures {
            let at = self.now + 1 + self.rng.below(60 * self.cfg.max_delay);
            let s = self.rng.below(u64::from(self.cfg.shards)) as Shard;
            self.at(at, Ev::Fail(s));
        }
    }
}
