//! The sans-IO view-change engine of one node in one view (Derecho TOCS §4; docs/DESIGN.md
//! "views").
//!
//! ```text
//!  suspect(rank) ─────┐                     ┌──▶ Pushes (membership row; smc wedge)
//!  request_join(j) ───┤   ┌────────────┐    ├──▶ Action::Disconnect(node)
//!  leave() ───────────┼──▶│   Engine   │────┼──▶ Action::Deliver{subgroup, batch} (the trim)
//!  step(cores) ───────┘   └────────────┘    ├──▶ Action::Install(Next)
//!  membership rows ──────────▲              └──▶ Action::Stop(why)
//! ```
//!
//! Each [`Engine::step`] reads the membership table and the node's smc cores and runs
//! the stages in order, each in its own file:
//!
//! 1. suspicion (`suspicion.rs`): OR the suspicions of every row not suspected (gossip); a
//!    suspected row is frozen (never read again) and its node disconnected; stop if a
//!    live row suspects this node, or if the live members are no majority.
//! 2. wedge: on any pending change, freeze every subgroup (smc `wedge`), copy each
//!    one's final `received` into the membership row, then set `wedged` (pushed after
//!    the smc pushes and the row's data, so it vouches for final `received`).
//! 3. leader (`leader.rs`): the leader (lowest rank not suspected) proposes the next view and
//!    commits it once every live member holds it; the others copy its proposal (the
//!    ack) and its commit. A new leader first waits until every live row suspects
//!    every rank below it, then adopts the highest proposal a live row holds.
//! 4. trim (`trim.rs`): the view's leader publishes every subgroup's ragged trim (per
//!    sender, the minimum `received` over the subgroup's live members, from the rows);
//!    every member echoes all cuts, and a subgroup member delivers exactly up to its
//!    cut once every live member of the view echoed the same one. A new leader adopts
//!    any cut already echoed.
//! 5. install: once committed and trimmed, the next view (with the suspicions carried
//!    over and this node's discarded messages, to send again).

mod leader;
mod suspicion;
#[cfg(test)]
mod tests;
mod trim;

use crate::layout::{Layout, MAX_DOC};
use crate::membership::{Joiner, MembershipLayout, Proposal};
use crate::view::{LayoutDoc, View};
use spindle_smc::{Deliverable, SmcCore, SubgroupSpec};
use spindle_sst::transport::NodeId;
use spindle_sst::{LocalRow, Pushes, Table};
use std::sync::Arc;

/// Access to this node's smc cores, by subgroup index in the view's layout.
pub trait Cores {
    /// Runs `f` on this node's core of subgroup `k` (one this node is a member of).
    fn with_core<R>(&mut self, k: usize, f: impl FnOnce(&mut SmcCore) -> R) -> R;
}

impl Cores for Vec<Option<SmcCore>> {
    fn with_core<R>(&mut self, k: usize, f: impl FnOnce(&mut SmcCore) -> R) -> R {
        f(self[k].as_mut().expect("a core of a subgroup this node is in"))
    }
}

/// Why this node stops being a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The live members it sees are no majority of the view: it must not go on.
    Minority {
        /// Members it does not suspect (itself included).
        live: usize,
        /// Members of the view.
        members: usize,
        /// The members it suspects (lost), in view order.
        lost: Vec<NodeId>,
    },
    /// The others suspect it, or a committed view removed it.
    Removed,
    /// It asked to leave and the next view no longer has it.
    Left,
    /// The membership rows said something impossible (a peer's bug or corruption).
    Protocol(String),
}

/// The next view, ready to install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Next {
    /// The view.
    pub view: View,
    /// Processes added by it (they need the view and the state sent to them).
    pub joins: Vec<Joiner>,
    /// Members of the next view this node already suspects (they start out suspected).
    pub suspects: Vec<NodeId>,
    /// Members of the old view removed as failed.
    pub failed: Vec<NodeId>,
    /// Members of the old view that left gracefully.
    pub left: Vec<NodeId>,
    /// Per ordered subgroup this node sent in: the trim's count for its messages.
    /// The driver takes the messages from that index on out of the old core
    /// ([`SmcCore::own_messages_from`], once no send is in flight) and sends them
    /// again in the next view, in order, before anything new.
    pub my_cuts: Vec<(usize, u64)>,
}

/// What a step asks the driver to do, in order.
#[derive(Debug)]
pub enum Action {
    /// Cut this node off at the transport (it is suspected).
    Disconnect(NodeId),
    /// Deliver this trimmed batch of subgroup `subgroup`, then hand it back to the
    /// core's `finish`.
    Deliver {
        /// Subgroup index.
        subgroup: usize,
        /// The batch.
        batch: Deliverable,
    },
    /// Install the next view; this engine is done.
    Install(Next),
    /// Stop: this node is no longer a member; this engine is done.
    Stop(StopReason),
}

/// A join request the leader cannot take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinRefusal {
    /// Ask this member instead (the leader, as far as this node knows).
    Redirect(NodeId),
    /// The id is a member already.
    Duplicate,
    /// This node is stopping or the view is being replaced.
    Closing,
}

/// Deliberate protocol bugs, for the tests that show the simulator catches them.
/// Outside unit tests they are always off ([`Engine::faults`] is a constant).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Faults {
    /// Each member cuts at what it received itself, without agreeing on a cut.
    pub local_cut: bool,
    /// Never send the messages the trim discarded again.
    pub no_resend: bool,
    /// A new leader acts at once, without waiting for the others to suspect the old.
    pub no_takeover_wait: bool,
    /// A member that did not issue the proposal installs the next view with the
    /// old layout document.
    pub stale_layout: bool,
    /// Driver (simulator only): set up a view's links one peer after another in id
    /// order, so a peer that never comes uses up the deadline of every later one
    /// (the tcp setup before the fix).
    #[cfg_attr(not(test), allow(dead_code))]
    pub sequential_setup: bool,
    /// Driver (simulator only): a member still in its setup is held silent from the
    /// moment this node runs the view, with no grace for its setup deadline.
    #[cfg_attr(not(test), allow(dead_code))]
    pub no_setup_grace: bool,
}

/// One node's view-change engine for one view (see the module docs).
#[derive(Debug)]
pub struct Engine {
    #[cfg(test)]
    pub(crate) faults: Faults,
    view: View,
    specs: Vec<SubgroupSpec>,
    lay: MembershipLayout,
    row: LocalRow,
    table: Arc<Table>,
    me: usize,
    majority: bool,
    /// Ranks suspected (only grows).
    susp: u64,
    /// Ranks disconnected so far.
    cut_off: u64,
    wedged: bool,
    joins: Vec<Joiner>,
    leave: bool,
    /// Per subgroup: the cut echoed (if any) and whether its batch was handed out.
    /// Every member echoes every subgroup's cut, all at once.
    cuts: Vec<Option<Vec<u64>>>,
    trimmed: Vec<bool>,
    done: bool,
    dirty: bool,
    /// Applies layout edits (leader only); `None`: a static layout.
    editor: Option<Arc<dyn Layout>>,
    /// The document the live rows' edits lead to, if it differs from the view's,
    /// and the edit counters it was computed from.
    pending_doc: Option<LayoutDoc>,
    edits_seen: Option<(u64, u64)>,
    /// The proposal slot and length of the layout document this row holds, if any.
    doc_push: Option<(u64, usize)>,
}

impl Engine {
    /// The engine of this node (the row's owner) in `view`, whose subgroups are
    /// `specs`; `row` is its row of a membership table over `view.members()` laid out
    /// with [`MembershipLayout::new`] for the specs' sender counts. `suspects` start
    /// out suspected (carried over from the previous view).
    pub fn new(view: View, specs: Vec<SubgroupSpec>, row: LocalRow, majority: bool, suspects: &[NodeId]) -> Engine {
        let senders: Vec<usize> = specs.iter().map(|s| s.senders.len()).collect();
        let lay = MembershipLayout::new(&senders);
        let table = row.table().clone();
        assert_eq!(table.members(), view.members(), "one membership row per member");
        let me = table.my_rank();
        let susp = suspects.iter().filter_map(|n| view.rank_of(*n)).filter(|r| *r != me).fold(0, |m, r| m | 1 << r);
        let k = specs.len();
        let mut e = Engine {
            #[cfg(test)]
            faults: Faults::default(),
            view,
            specs,
            lay,
            row,
            table,
            me,
            majority,
            susp: 0,
            cut_off: 0,
            wedged: false,
            joins: Vec::new(),
            leave: false,
            cuts: vec![None; k],
            trimmed: vec![false; k],
            done: false,
            dirty: false,
            editor: None,
            pending_doc: None,
            edits_seen: None,
            doc_push: None,
        };
        e.add_suspects(susp);
        e
    }

    /// The deliberate bugs in force: set by unit tests, none otherwise.
    fn faults(&self) -> Faults {
        #[cfg(test)]
        return self.faults;
        #[cfg(not(test))]
        Faults::default()
    }

    /// The view this engine runs.
    pub fn view(&self) -> &View {
        &self.view
    }
    /// This node's rank.
    pub fn rank(&self) -> usize {
        self.me
    }
    /// True once [`Action::Install`] or [`Action::Stop`] was returned.
    pub fn is_done(&self) -> bool {
        self.done
    }
    /// True while this node holds a commit but has not finished every trim.
    pub fn is_trimming(&self) -> bool {
        !self.done && self.committed() > 0
    }

    /// True once a change is under way (this node is wedged).
    pub fn is_wedged(&self) -> bool {
        self.wedged
    }
    /// A one-line account of the change under way (for logs and stall reports).
    pub fn summary(&self) -> String {
        format!(
            "view {} rank {} wedged {} suspects {:?} proposal {} committed {} joins {} leaving {} cuts {:?} trimmed {:?}",
            self.view.id().0,
            self.me,
            self.wedged,
            self.suspects(),
            self.my_proposal_no(),
            self.committed(),
            self.joins.len(),
            self.leave,
            self.cuts,
            self.trimmed
        )
    }

    /// True if `node` has finished its part of this view's change: it holds the
    /// commit and has echoed the cuts. Such a node moves on
    /// and closes its links; that is no failure (a driver ignores its link breaks and
    /// silence for this view).
    pub fn peer_done(&self, node: NodeId) -> bool {
        let Some(r) = self.view.rank_of(node) else { return false };
        self.table.counter(r, self.lay.committed) > 0 && self.echoed_by(r)
    }

    /// The membership table.
    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// A number that moves whenever a step could have something new to do.
    pub fn fingerprint(&self) -> u64 {
        self.lay.fingerprint(&self.table)
    }

    /// Raises this node's heartbeat and returns its (quiet) push.
    pub fn beat(&self) -> spindle_sst::Push {
        self.row.increment(self.lay.heartbeat);
        self.row.push(self.lay.heartbeat.range()).quiet()
    }

    /// The heartbeat column (for a failure detector over the table).
    pub fn heartbeat_column(&self) -> spindle_sst::Counter {
        self.lay.heartbeat
    }

    /// The members this node suspects.
    pub fn suspects(&self) -> Vec<NodeId> {
        self.ranks(self.susp)
    }

    /// Reports a failure signal (heartbeat timeout, broken connection) about `node`.
    pub fn suspect(&mut self, node: NodeId) {
        if let Some(r) = self.view.rank_of(node).filter(|r| *r != self.me) {
            self.add_suspects(1 << r);
        }
    }

    /// Asks to add a process. Only the leader takes it; others name the leader.
    pub fn request_join(&mut self, j: Joiner) -> Result<(), JoinRefusal> {
        if self.done {
            return Err(JoinRefusal::Closing);
        }
        if self.view.rank_of(j.node).is_some() {
            return Err(JoinRefusal::Duplicate);
        }
        let leader = self.leader_rank();
        if leader != self.me {
            return Err(JoinRefusal::Redirect(self.view.members()[leader]));
        }
        if !self.joins.iter().any(|x| x.node == j.node) {
            self.joins.push(j);
        }
        Ok(())
    }

    /// The layout that applies edits when this node leads (none: edits are ignored).
    pub fn set_editor(&mut self, layout: Arc<dyn Layout>) {
        self.editor = Some(layout);
    }

    /// Asks the view's leader to apply layout edit `edit` (see
    /// [`Layout::edit`]): it is published in this node's row, and the leader
    /// proposes the edited document with the next view. False if this view's edit
    /// list is full ([`crate::layout::MAX_EDITS`]) or the engine is done.
    pub fn request_edit(&mut self, edit: &[u8]) -> bool {
        if self.done || !self.lay.append_edit(&self.row, edit) {
            return false;
        }
        self.dirty = true;
        true
    }

    /// Asks to leave the group gracefully.
    pub fn leave(&mut self) {
        if !self.leave {
            self.leave = true;
            self.row.set(self.lay.leaving);
            self.dirty = true;
        }
    }

    /// One step: reads the rows and the cores, queues pushes, returns actions.
    pub fn step<C: Cores>(&mut self, cores: &mut C, pushes: &mut Pushes, out: &mut Vec<Action>) {
        if self.done {
            return;
        }
        if let Err(why) = self.gossip(out) {
            self.finish_with(Action::Stop(why), pushes, out);
            return;
        }
        self.refresh_pending_doc();
        if !self.wedged && self.change_pending() {
            self.wedge(cores, pushes);
        }
        if let Err(why) = self.lead_or_follow() {
            self.finish_with(Action::Stop(why), pushes, out);
            return;
        }
        if self.committed() > 0 {
            if let Err(why) = self.trim(cores, out) {
                self.finish_with(Action::Stop(why), pushes, out);
                return;
            }
        }
        if let Some(a) = self.try_install(cores) {
            self.finish_with(a, pushes, out);
            return;
        }
        self.flush(pushes);
    }

    fn finish_with(&mut self, a: Action, pushes: &mut Pushes, out: &mut Vec<Action>) {
        self.flush(pushes);
        self.done = true;
        out.push(a);
    }

    fn flush(&mut self, pushes: &mut Pushes) {
        if std::mem::take(&mut self.dirty) {
            for p in self.lay.pushes(&self.row, self.doc_push) {
                pushes.push(p);
            }
        }
    }

    // ---------------------------------------------------------------- helpers

    fn ranks(&self, mask: u64) -> Vec<NodeId> {
        self.view.members().iter().enumerate().filter(|(r, _)| mask & (1 << r) != 0).map(|(_, n)| *n).collect()
    }
    fn n(&self) -> usize {
        self.view.members().len()
    }
    fn is_live(&self, r: usize) -> bool {
        self.susp & (1 << r) == 0
    }
    /// Live ranks other than this node.
    fn others(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.n()).filter(move |r| *r != self.me && self.is_live(*r))
    }
    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.n()).filter(move |r| self.is_live(*r))
    }
    fn leader_rank(&self) -> usize {
        self.live().next().unwrap_or(self.me)
    }
    fn committed(&self) -> u64 {
        self.row.get(self.lay.committed)
    }
    fn my_proposal_no(&self) -> u64 {
        self.row.get(self.lay.proposal)
    }

    fn change_pending(&self) -> bool {
        self.susp != 0
            || self.leave
            || self.live().any(|r| self.table.counter(r, self.lay.proposal) > 0 || self.table.flag(r, self.lay.leaving))
            || (self.leader_rank() == self.me && (!self.joins.is_empty() || self.pending_doc.is_some()))
    }

    /// The leader folds every live row's edits (rank order, each row's in order)
    /// over the view's document; an edit that does not apply is skipped (rows come
    /// from peers). Recomputed only when the edit counters or suspicions moved.
    fn refresh_pending_doc(&mut self) {
        let Some(editor) = self.editor.clone() else { return };
        if self.leader_rank() != self.me {
            return;
        }
        let key = (self.live().map(|r| self.table.counter(r, self.lay.edit_words)).sum::<u64>(), self.susp);
        if self.edits_seen == Some(key) {
            return;
        }
        self.edits_seen = Some(key);
        let base = self.view.layout();
        let mut doc: Option<Vec<u8>> = None;
        for r in self.live().collect::<Vec<_>>() {
            for e in self.lay.read_edits(&self.table, r) {
                let cur = doc.as_deref().unwrap_or(base.bytes());
                match editor.edit(cur, &e) {
                    Ok(Some(next)) if next.len() <= MAX_DOC => doc = Some(next),
                    Ok(Some(next)) => {
                        tracing::warn!(
                            from = r,
                            len = next.len(),
                            "layout edit skipped: the document would be too large"
                        )
                    }
                    Ok(None) => {}
                    Err(why) => tracing::warn!(from = r, %why, "layout edit skipped"),
                }
            }
        }
        self.pending_doc = doc.filter(|d| d.as_slice() != base.bytes()).map(|d| LayoutDoc::new(base.version() + 1, d));
    }

    /// Freezes every subgroup of this node, then publishes `wedged`.
    fn wedge<C: Cores>(&mut self, cores: &mut C, pushes: &mut Pushes) {
        for k in 0..self.specs.len() {
            if self.specs[k].member_rank(self.view.members()[self.me]).is_some() {
                let received = cores.with_core(k, |c| {
                    c.wedge();
                    pushes.push(c.wedged_push());
                    c.received().to_vec()
                });
                // Final now; the view's leader computes every subgroup's cut from these.
                self.lay.write_received(&self.row, k, &received);
            }
        }
        self.wedged = true;
        self.row.set(self.lay.wedged);
        self.dirty = true;
    }

    fn try_install<C: Cores>(&mut self, cores: &mut C) -> Option<Action> {
        let c = self.committed();
        if c == 0 {
            return None;
        }
        let me_node = self.view.members()[self.me];
        let mine: Vec<usize> =
            (0..self.specs.len()).filter(|k| self.specs[*k].member_rank(me_node).is_some()).collect();
        let echoed = self.specs.is_empty() || self.cuts.iter().all(|c| c.is_some());
        if !echoed
            || !mine.iter().all(|k| self.trimmed[*k])
            || mine.iter().any(|k| cores.with_core(*k, |c| c.is_delivering()))
        {
            return None;
        }
        let p = self.lay.read_proposal(&self.table, self.me, c).expect("a committed proposal is held");
        if p.removed & (1 << self.me) != 0 {
            let why = if self.leave && p.left & (1 << self.me) != 0 { StopReason::Left } else { StopReason::Removed };
            return Some(Action::Stop(why));
        }
        let mut my_cuts = Vec::new();
        for k in mine {
            if self.specs[k].mode == spindle_smc::Mode::Unordered {
                continue; // delivered on receipt somewhere, maybe: never sent twice
            }
            if self.faults().no_resend {
                continue;
            }
            if let (Some(s), Some(cut)) = (self.specs[k].sender_rank(me_node), &self.cuts[k]) {
                my_cuts.push((k, cut[s]));
            }
        }
        let mut p = p;
        if self.faults().stale_layout && p.issuer != self.me {
            p.layout = None;
        }
        let view = match next_view(&self.view, &p) {
            Ok(v) => v,
            Err(e) => return Some(Action::Stop(StopReason::Protocol(format!("committed proposal {}: {e}", p.no)))),
        };
        let suspects = self.ranks(self.susp & !p.removed);
        let failed = self.ranks(p.removed & !p.left);
        let left = self.ranks(p.left);
        Some(Action::Install(Next { view, joins: p.joins, suspects, failed, left, my_cuts }))
    }
}

/// The view a proposal leads to: the members not removed, in order, then the joiners.
/// Errors if the proposal makes no sense for `view` (a joiner already a member, no
/// member left): rows come from peers, so this is checked, not assumed.
pub fn next_view(view: &View, p: &Proposal) -> Result<View, crate::view::ViewError> {
    let mut changes = Vec::new();
    for (r, n) in view.members().iter().enumerate() {
        if p.removed & (1 << r) != 0 {
            changes.push(crate::view::Change::Failed(*n));
        }
    }
    changes.extend(p.joins.iter().map(|j| crate::view::Change::Joined(j.node)));
    // The issuer checked the majority rule.
    let next = view.next(&changes, false)?;
    Ok(match &p.layout {
        Some(doc) => next.with_layout(doc.clone()),
        None => next,
    })
}
