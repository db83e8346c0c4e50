//! State transfer: a joiner starts with the state the members have at the start of
//! the view that adds it (docs/DESIGN.md "views", joins; Derecho TOCS §4.5). The state of
//! subgroup 0 (all members) is the count and a running digest of everything delivered
//! in it; every member that installs a view must have the same state, and a joiner
//! gets the state of the member that starts it.

use spindle_sst::transport::NodeId;
use std::collections::HashMap;

/// The invariant's name in reports.
pub const NAME: &str = "state transfer";

/// Per node: (count, digest) of subgroup 0; per view: the state it starts with.
#[derive(Debug, Default)]
pub struct State {
    /// Unordered subgroups have no common state to compare.
    pub unordered: bool,
    state: HashMap<NodeId, (u64, u64)>,
    start: HashMap<u64, (NodeId, (u64, u64))>,
}

impl State {
    /// A delivery at `node`.
    pub fn on_deliver(&mut self, node: NodeId, k: usize, m: &[u8]) {
        if k == 0 {
            let s = self.state.entry(node).or_default();
            s.0 += 1;
            s.1 = (s.1 ^ spindle_smc::sim::digest(m)).wrapping_mul(0x100_0000_01b3);
        }
    }

    /// `node` starts view `vid` with its state.
    pub fn on_install(&mut self, node: NodeId, vid: u64) -> Result<(), String> {
        let mine = self.state.get(&node).copied().unwrap_or_default();
        match self.start.get(&vid).filter(|_| !self.unordered) {
            Some((who, s)) if *s != mine => {
                Err(format!("{node} starts view {vid} with state {mine:?}, {who} with {s:?}"))
            }
            Some(_) => Ok(()),
            None => {
                self.start.insert(vid, (node, mine));
                Ok(())
            }
        }
    }

    /// `joiner` receives `from`'s state for view `vid`.
    pub fn on_transfer(&mut self, from: NodeId, joiner: NodeId, vid: u64) -> Result<(), String> {
        let s = self.state.get(&from).copied().unwrap_or_default();
        self.state.insert(joiner, s);
        self.on_install(joiner, vid)
    }
}
