//! What a simulated group is: its size, senders, subgroups (fixed or edited at run
//! time), sizes, modes, faults and timing, all drawn from one seed.

use crate::view::View;
use spindle_smc::sim::Rng;
use spindle_smc::{Mode, SubgroupSpec};
use spindle_sst::transport::NodeId;

/// A fault the schedule injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A random live member crashes; `torn`: its last write in flight is cut short.
    Crash {
        /// Step at which it happens.
        at: u64,
        /// Cut the crashed node's writes in flight at a random point, mid-write.
        torn: bool,
    },
    /// At `after`, a process asks to join (which starts a view change); the leader
    /// crashes at the first step after that where a change is under way.
    CrashLeaderMidChange {
        /// Earliest step.
        after: u64,
    },
    /// At `after`, a process asks to join; the leader of the last subgroup crashes
    /// at the first step after that where a member holds the commit but has not
    /// finished the trim (a subgroup leader failing mid-trim).
    CrashTrimLeader {
        /// Earliest step.
        after: u64,
    },
    /// A new process asks to join.
    Join {
        /// Step.
        at: u64,
    },
    /// A random member asks to leave.
    Leave {
        /// Step.
        at: u64,
    },
    /// A random minority of the current view is cut off from the rest, both ways.
    Partition {
        /// Step.
        at: u64,
    },
    /// At `after`, a member other than the leader crashes; at the first step after
    /// that where a member is setting up a new view, the leader of that view (its
    /// lowest-ranked member alive, there yet or not) crashes too: a second failure
    /// inside a view change.
    CrashSetupLeader {
        /// Earliest step.
        after: u64,
    },
    /// A random member asks for a layout edit: to be added to subgroup 1 (with
    /// [`GroupSimConfig::dynamic`]). The edit is retried in every view until one holds it.
    Edit {
        /// Step.
        at: u64,
    },
}

/// Who sends in subgroup 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Senders {
    /// Every member.
    All,
    /// The first half (rounded up).
    Half,
    /// The first member.
    One,
}

/// One simulated group.
#[derive(Debug, Clone)]
pub struct GroupSimConfig {
    /// The seed everything derives from.
    pub seed: u64,
    /// Members of the first view.
    pub initial: usize,
    /// Senders of subgroup 0 (all members).
    pub senders: Senders,
    /// Add subgroup 1: the members at even ranks, all sending.
    pub two_subgroups: bool,
    /// A dynamic layout: subgroup 1 is the members the view's layout document names
    /// (all sending), added by [`Fault::Edit`]s: view changes with the same members
    /// and a new layout, also while members fail and join.
    pub dynamic: bool,
    /// Ring window.
    pub window: usize,
    /// Largest message in a slot (at least 16).
    pub max_msg: usize,
    /// Each sender's arena for messages larger than `max_msg` (0: none). Drawn apart
    /// from the rest of the seed's configuration (its own generator), so that seeds
    /// keep the faults they had before arenas existed.
    pub arena: usize,
    /// Large payloads relayed member to member (`SubgroupSpec::relay`), in half the
    /// seeds with an arena; drawn apart as `arena` is.
    pub relay: bool,
    /// Delivery mode of both subgroups.
    pub mode: Mode,
    /// Messages each node sends per subgroup it sends in.
    pub msgs_per_sender: u64,
    /// Percent chance a sender sends at its turn.
    pub send_chance: u64,
    /// The faults.
    pub faults: Vec<Fault>,
    /// The majority rule.
    pub majority: bool,
    /// Detection delay range in steps.
    pub detect: (u64, u64),
    /// Steps before the run is declared stalled.
    pub max_steps: u64,
    /// Steps a node waits at a view's setup for members that do not come (the
    /// runtime's setup timeout: 3× the failure timeout, at least 3 s; here at least
    /// 1,500 steps, far more than members of a sound group arrive apart).
    pub setup_steps: u64,
}

impl GroupSimConfig {
    /// A configuration drawn from `seed`.
    pub fn from_seed(seed: u64) -> GroupSimConfig {
        let mut rng = Rng::new(seed ^ 0x5ee0_6a11);
        let initial = 2 + rng.below(4) as usize; // 2..=5
        let senders = [Senders::All, Senders::Half, Senders::One][rng.below(3) as usize];
        let mut faults = Vec::new();
        let mut at = 50 + rng.below(400);
        for _ in 0..1 + rng.below(3) {
            faults.push(match rng.below(10) {
                0..=2 => Fault::Crash { at, torn: rng.chance(50) },
                3 if rng.chance(50) => Fault::CrashLeaderMidChange { after: at },
                3 => Fault::CrashTrimLeader { after: at },
                4 | 5 => Fault::Join { at },
                6 => Fault::Leave { at },
                7 => Fault::Partition { at },
                8 => Fault::CrashSetupLeader { after: at },
                _ => Fault::Join { at },
            });
            at += rng.below(1500);
        }
        let detect = (20, 20 + rng.below(400));
        let mut cfg = GroupSimConfig {
            seed,
            initial,
            senders,
            two_subgroups: rng.chance(40),
            dynamic: false,
            window: 1 + rng.below(4) as usize,
            max_msg: [16, 24, 40, 64][rng.below(4) as usize],
            arena: [0, 0, 96, 256][Rng::new(seed ^ 0xa7e4a).below(4) as usize],
            relay: Rng::new(seed ^ 0x4e1a7).chance(50),
            mode: if rng.chance(80) { Mode::Ordered } else { Mode::Unordered },
            msgs_per_sender: 3 + rng.below(25),
            send_chance: 10 + rng.below(80),
            faults,
            majority: true,
            detect,
            max_steps: 300_000,
            setup_steps: (3 * detect.1).max(1_500),
        };
        // Drawn last, so that the configurations above stay what they were.
        if !cfg.two_subgroups && rng.chance(40) {
            cfg.dynamic = true;
            let mut at = 20 + rng.below(300);
            for _ in 0..1 + rng.below(4) {
                cfg.faults.push(Fault::Edit { at });
                at += rng.below(800);
            }
        }
        cfg
    }

    /// Applies a simulated layout edit (a 4-byte node id) to a document (a list of
    /// 4-byte node ids): adds the node unless it is named already.
    pub fn edit(doc: &[u8], edit: &[u8]) -> Result<Option<Vec<u8>>, crate::layout::EditError> {
        let bad = || crate::layout::EditError::Invalid("not a 4-byte node id".into());
        let id: [u8; 4] = edit.try_into().map_err(|_| bad())?;
        if doc.len() % 4 != 0 {
            return Err(bad());
        }
        if doc.chunks_exact(4).any(|c| c == id) {
            return Ok(None);
        }
        Ok(Some([doc, &id[..]].concat()))
    }

    /// The subgroups of `view` (the simulated layout function).
    pub fn layout(&self, view: &View) -> Vec<SubgroupSpec> {
        let m = view.members();
        let n0 = match self.senders {
            Senders::All => m.len(),
            Senders::Half => m.len().div_ceil(2),
            Senders::One => 1,
        };
        let spec = |members: Vec<NodeId>, senders: Vec<NodeId>| SubgroupSpec {
            members,
            senders,
            window: self.window,
            max_msg: self.max_msg,
            arena: self.arena,
            mode: self.mode,
            relay: self.relay,
        };
        let mut out = vec![spec(m.to_vec(), m[..n0].to_vec())];
        if self.two_subgroups {
            let even: Vec<NodeId> = m.iter().step_by(2).copied().collect();
            out.push(spec(even.clone(), even));
        }
        if self.dynamic {
            let named: Vec<NodeId> = view
                .layout()
                .bytes()
                .chunks_exact(4)
                .map(|c| NodeId(u32::from_le_bytes(c.try_into().expect("4 bytes"))))
                .collect();
            let sub1: Vec<NodeId> = m.iter().copied().filter(|n| named.contains(n)).collect();
            if !sub1.is_empty() {
                out.push(spec(sub1.clone(), sub1));
            }
        }
        out
    }
}

/// The simulated layout as the engines see it (for edits).
#[derive(Debug)]
pub(super) struct SimLayout(pub(super) GroupSimConfig);

impl crate::layout::Layout for SimLayout {
    fn subgroups(&self, view: &View) -> Result<Vec<SubgroupSpec>, crate::layout::LayoutError> {
        Ok(self.0.layout(view))
    }
    fn edit(&self, doc: &[u8], edit: &[u8]) -> Result<Option<Vec<u8>>, crate::layout::EditError> {
        GroupSimConfig::edit(doc, edit)
    }
}
