//! Total order: every member delivers the same sequence of messages (Spindle §2.1:
//! "delivered by every member in the same order"; Derecho TOCS §3, atomic multicast).
//! The first node to deliver the j-th message fixes it; every other node's j-th
//! delivery must be the same message, and sequence numbers follow the round robin
//! (`seq = index * senders + sender`). Unordered subgroups promise no such order.

/// Name in violation reports.
pub const NAME: &str = "total order (Spindle §2.1)";

/// The canonical sequence and each node's position in it.
#[derive(Debug)]
pub struct TotalOrder {
    ordered: bool,
    senders: u64,
    canonical: Vec<(u64, usize, u64, u64)>,
    at: Vec<usize>,
}

impl TotalOrder {
    /// For `nodes` nodes and `senders` senders.
    pub fn new(ordered: bool, nodes: usize, senders: usize) -> TotalOrder {
        TotalOrder { ordered, senders: senders as u64, canonical: Vec::new(), at: vec![0; nodes] }
    }

    /// Checks one delivery.
    pub fn on_deliver(&mut self, d: &super::Delivery) -> Result<(), String> {
        if !self.ordered {
            return Ok(());
        }
        let this = (d.seq, d.sender, d.index, d.digest);
        if d.seq != d.index * self.senders + d.sender as u64 {
            return Err(format!(
                "node {} delivered sender {}'s message {} as seq {}, not its round-robin position",
                d.node, d.sender, d.index, d.seq
            ));
        }
        let j = self.at[d.node];
        self.at[d.node] += 1;
        match self.canonical.get(j) {
            None => {
                if let Some(prev) = self.canonical.last() {
                    if prev.0 >= d.seq {
                        return Err(format!("node {} delivered seq {} after seq {}", d.node, d.seq, prev.0));
                    }
                }
                self.canonical.push(this);
                Ok(())
            }
            Some(c) if *c == this => Ok(()),
            Some(c) => Err(format!("node {} delivery #{j} is {this:?}, others delivered {c:?}", d.node)),
        }
    }
}
