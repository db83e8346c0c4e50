//! Views: entering the topic's subgroup (a seam, perhaps a late join), a view
//! starting (which writers are alive), and a rejoin of the participant.

use super::{CatchUp, Effects, Now, Seam, TopicEngine, PIN_FOR, SEAMS};
use crate::qos::Level;
use crate::sample::WriterId;
use crate::table::{Endpoint, TopicEntry};
use spindle_sst::transport::NodeId;
use spindle_views::view::ViewId;

impl<R> TopicEngine<R> {
    /// A new view in which this node is in the topic's subgroup (`entry` as the
    /// view's table lists it, `members` the subgroup's). Returns the members to
    /// catch up from when this is the node's first view in the topic and the topic
    /// keeps history (then live samples wait until [`TopicEngine::caught_up`]).
    pub(crate) fn enter_view(
        &mut self,
        view: ViewId,
        entry: &TopicEntry,
        members: &[NodeId],
        now: Now,
        fx: &mut impl Effects<R>,
    ) -> Option<Vec<NodeId>> {
        let first = self.last_view.is_none();
        self.last_view = Some(view);
        // An Ordered topic with no history asks too, for where the order stands (a
        // rejoined one: what it missed), so that it numbers samples as the others
        // do; an Unordered one has no common numbering to ask about.
        let ordered = self.qos.level >= Level::Ordered;
        let rejoined = first && std::mem::take(&mut self.rejoined) && ordered;
        let catch_up = first && ordered;
        let complete = self.catching_up.is_none() && !catch_up;
        let seq = self.next_seq;
        let joined = members.iter().any(|m| *m != self.me && !self.subgroup.contains(m));
        if joined {
            // A late joiner asks for the history as it stands now: keep it so.
            self.pin(seq, now);
        }
        self.subgroup = members.to_vec();
        let seen = if joined { self.clients.seen() } else { Vec::new() };
        self.seams.push_back(Seam { view, seq, complete, joined, seen });
        if self.seams.len() > SEAMS {
            self.seams.pop_front();
        }
        fx.entered();
        for w in &entry.writers {
            match self.writer_levels.iter_mut().find(|(k, _)| *k == (w.node, w.id)) {
                Some(x) => x.1 = w.level,
                None => self.writer_levels.push(((w.node, w.id), w.level)),
            }
        }
        // Requested/offered: every pair of a local endpoint and a peer endpoint of a
        // member (endpoints of failed nodes stay in the table but are no peers).
        let unmet = |peers: &[Endpoint], ok: &dyn Fn(Level) -> bool| -> Vec<(WriterId, Level)> {
            peers
                .iter()
                .filter(|e| members.iter().any(|m| m.0 == e.node) && !ok(e.level))
                .map(|e| (WriterId { node: NodeId(e.node), id: e.id, client: None }, e.level))
                .collect()
        };
        for r in &self.readers {
            fx.set_incompatible(&r.handle, unmet(&entry.writers, &|offered| offered.satisfies(r.level)));
        }
        for (id, w) in self.writers.iter() {
            fx.writer_incompatible(*id, unmet(&entry.readers, &|requested| w.level.satisfies(requested)));
        }
        if catch_up {
            let others: Vec<NodeId> = members.iter().copied().filter(|n| *n != self.me).collect();
            if !others.is_empty() {
                let rejoined_at = rejoined.then_some(self.next_seq);
                self.catching_up = Some(CatchUp { view, buffered: Vec::new(), rejoined_at });
                return Some(others);
            }
            // Alone in the topic: its own history (its log, or nothing) is all there is.
            if let Some(s) = self.seams.back_mut() {
                s.complete = true;
            }
        }
        None
    }

    /// Keeps the history as it stands at `seq` for a late joiner.
    pub(super) fn pin(&mut self, seq: u64, now: Now) {
        #[cfg(test)]
        if self.mutation == Some(super::Mutation::NoPin) {
            return;
        }
        if self.keeps_history() {
            self.store.pin(seq, PIN_FOR, now.at);
        }
    }

    /// A view starts (at every member, at the same point of the topic's order):
    /// `entry` is the topic as the view's table lists it, `members` the view's.
    /// Writers no longer listed or whose participant left are gone: the local
    /// readers' instances they alone wrote have no writers now.
    pub(crate) fn view_started(&mut self, entry: &TopicEntry, members: &[NodeId], fx: &mut impl Effects<R>) {
        let alive: Vec<(u64, u32, bool)> = entry
            .writers
            .iter()
            .filter(|w| w.id != crate::sample::PROXY && members.iter().any(|m| m.0 == w.node))
            .map(|w| (w.node as u64, w.id, false))
            .collect();
        let lost =
            self.alive.iter().filter(|w| !alive.contains(w) && !members.iter().any(|m| m.0 as u64 == w.0)).count();
        if alive == self.alive && lost == 0 {
            return;
        }
        for r in &self.readers {
            fx.writers_now(&r.handle, &alive, lost, true);
        }
        self.alive = alive;
    }

    /// This participant was removed from the domain and is back (before the view
    /// that has it again starts): the next view it is in this topic's subgroup
    /// catches up from the others as a late joiner does, from where its own order
    /// stopped; what their history no longer holds counts as lost at its readers.
    pub(crate) fn rejoined(&mut self) {
        self.last_view = None;
        self.rejoined = true;
    }
}
