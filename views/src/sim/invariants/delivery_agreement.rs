//! Same delivery sequence per subgroup per view at every member that installs the
//! next view, and nothing a survivor delivered is missing at another survivor
//! (virtual synchrony with the ragged trim; Derecho TOCS §4.2, Spindle §2.4): every
//! member that moves from view `v` to `v + 1` delivered exactly the same sequence in
//! each of its subgroups in `v`, and the members still in the last view agree too.
//!
//! A member that stops (a minority, a removed member) or crashes is not a survivor: it
//! may have delivered up to a cut that its side of a partition saw and the other did
//! not, as in Derecho. Unordered subgroups deliver on receipt and promise no common
//! sequence, so they are not compared.

use spindle_sst::transport::NodeId;
use std::collections::HashMap;

/// The invariant's name in reports.
pub const NAME: &str = "delivery agreement";

/// Per (node, view, subgroup): the digests delivered; per (view, subgroup): the
/// sequence the first member to move on had.
#[derive(Debug, Default)]
pub struct Deliveries {
    /// Unordered subgroups are not compared.
    pub unordered: bool,
    seqs: HashMap<(NodeId, u64, usize), Vec<u64>>,
    finals: HashMap<(u64, usize), (NodeId, Vec<u64>)>,
}

impl Deliveries {
    /// `node` delivers `m` in view `vid`, subgroup `k`.
    pub fn on_deliver(&mut self, node: NodeId, vid: u64, k: usize, m: &[u8]) -> Result<(), String> {
        self.seqs.entry((node, vid, k)).or_default().push(spindle_smc::sim::digest(m));
        Ok(())
    }

    /// `node` leaves view `vid`, where it was a member of subgroups `mine`.
    pub fn on_install(&mut self, node: NodeId, vid: u64, mine: &[usize]) -> Result<(), String> {
        if self.unordered {
            return Ok(());
        }
        for &k in mine {
            let have = self.seqs.get(&(node, vid, k)).cloned().unwrap_or_default();
            match self.finals.get(&(vid, k)) {
                Some((who, seq)) => compare(vid, k, (*who, seq), (node, &have))?,
                None => {
                    self.finals.insert((vid, k), (node, have));
                }
            }
        }
        Ok(())
    }

    /// The members still in view `vid` at the end, members of subgroup `k`.
    pub fn at_end(&self, vid: u64, k: usize, nodes: &[NodeId]) -> Result<(), String> {
        if self.unordered {
            return Ok(());
        }
        let empty = Vec::new();
        let seq = |n: NodeId| self.seqs.get(&(n, vid, k)).unwrap_or(&empty);
        for w in nodes.windows(2) {
            compare(vid, k, (w[0], seq(w[0])), (w[1], seq(w[1])))?;
        }
        Ok(())
    }

    /// Deliveries of `node` in view `vid`, subgroup `k`.
    pub fn count(&self, node: NodeId, vid: u64, k: usize) -> usize {
        self.seqs.get(&(node, vid, k)).map_or(0, |s| s.len())
    }
}

fn compare(vid: u64, k: usize, a: (NodeId, &[u64]), b: (NodeId, &[u64])) -> Result<(), String> {
    if a.1 == b.1 {
        return Ok(());
    }
    let at = a.1.iter().zip(b.1).position(|(x, y)| x != y).unwrap_or(a.1.len().min(b.1.len()));
    Err(format!(
        "view {vid} subgroup {k}: {} delivered {} messages and {} delivered {}; they differ from position {at}",
        a.0,
        a.1.len(),
        b.0,
        b.1.len()
    ))
}
