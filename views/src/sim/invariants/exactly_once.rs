//! Each message once, in sender order: at every member a sender's messages in a
//! subgroup arrive in the order sent, none twice and none skipped, across views;
//! messages the trim discarded are sent again in the next view (Derecho TOCS §4.2,
//! "undelivered messages are resent"). The only messages a sender may lose are the
//! ones it still had to resend when it stopped being a sender of the subgroup; the
//! simulator reports those.

use super::super::parse_payload;
use spindle_sst::transport::NodeId;
use std::collections::{BTreeSet, HashMap};

/// The invariant's name in reports.
pub const NAME: &str = "exactly once";

/// Last sequence number seen per (receiver, subgroup, sender), and dropped ones.
#[derive(Debug, Default)]
pub struct ExactlyOnce {
    /// Unordered subgroups may lose a message in flight at a view change: only
    /// order and uniqueness are checked there.
    pub unordered: bool,
    last: HashMap<(NodeId, usize, NodeId), u64>,
    dropped: HashMap<(NodeId, usize), BTreeSet<u64>>,
}

impl ExactlyOnce {
    /// A delivery of `m` at `node` in subgroup `k`.
    pub fn on_deliver(&mut self, node: NodeId, k: usize, m: &[u8]) -> Result<(), String> {
        let Some((sender, sk, seq)) = parse_payload(m) else { return Err(format!("{node} got a short message")) };
        if sk != k {
            return Err(format!("{node} delivered a message of subgroup {sk} in subgroup {k}"));
        }
        if let Some(&last) = self.last.get(&(node, k, sender)) {
            if seq <= last {
                return Err(format!("{node} delivered {sender}'s message {seq} after {last} (subgroup {k})"));
            }
            let dropped = self.dropped.get(&(sender, k));
            if self.unordered {
                // no gap check
            } else if let Some(gap) = (last + 1..seq).find(|s| !dropped.is_some_and(|d| d.contains(s))) {
                return Err(format!("{node} skipped {sender}'s message {gap} (got {seq} after {last}, subgroup {k})"));
            }
        }
        self.last.insert((node, k, sender), seq);
        Ok(())
    }

    /// `node` is no longer a member of subgroup `k` (a layout change): if it comes
    /// back it starts afresh, as it gets no state for that subgroup.
    pub fn on_left_subgroup(&mut self, node: NodeId, k: usize) {
        self.last.retain(|(n, sk, _), _| !(*n == node && *sk == k));
    }

    /// `sender` gave up message `m` of subgroup `k` (it is no longer a sender there).
    pub fn on_dropped(&mut self, sender: NodeId, k: usize, m: &[u8]) {
        if let Some((_, _, seq)) = parse_payload(m) {
            self.dropped.entry((sender, k)).or_default().insert(seq);
        }
    }
}
