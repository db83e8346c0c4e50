//! No gaps, no duplicates, no corruption: each node delivers each sender's messages
//! exactly once, in the order sent, with the bytes that were sent (Spindle §3.3: nulls
//! are discarded and never replace or reorder a message; Derecho issues #78, #187, #190
//! were nulls that took or garbled user buffers). The payload is read in place at
//! delivery, so a slot overwritten too early shows up here as a wrong digest.

/// Name in violation reports.
pub const NAME: &str = "no gaps, duplicates or corrupt payloads (Spindle §3.3)";

/// Senders' committed messages and each node's progress through them.
#[derive(Debug)]
pub struct NoGaps {
    /// Per sender: (index, digest) of each message, in commit order.
    committed: Vec<Vec<(u64, u64)>>,
    /// Per node, per sender: messages delivered so far.
    at: Vec<Vec<usize>>,
}

impl NoGaps {
    /// For `nodes` nodes and `senders` senders.
    pub fn new(nodes: usize, senders: usize) -> NoGaps {
        NoGaps { committed: vec![Vec::new(); senders], at: vec![vec![0; senders]; nodes] }
    }

    /// A sender committed a message.
    ///
    /// Sender threads may publish out of claim order; the list is kept in index
    /// order, which is final up to any index delivered (an index is delivered only
    /// after every index before it was published or given back).
    pub fn on_commit(&mut self, sender: usize, index: u64, digest: u64) {
        let list = &mut self.committed[sender];
        let at = list.partition_point(|(i, _)| *i < index);
        list.insert(at, (index, digest));
    }

    /// Checks one delivery.
    pub fn on_deliver(&mut self, d: &super::Delivery) -> Result<(), String> {
        let j = self.at[d.node][d.sender];
        let Some(&(index, digest)) = self.committed[d.sender].get(j) else {
            return Err(format!(
                "node {} delivered sender {} index {} which was never sent",
                d.node, d.sender, d.index
            ));
        };
        if index != d.index {
            return Err(format!("node {} expected sender {} index {index}, got index {}", d.node, d.sender, d.index));
        }
        if digest != d.digest {
            return Err(format!("node {} read a corrupt payload for sender {} index {index}", d.node, d.sender));
        }
        self.at[d.node][d.sender] += 1;
        Ok(())
    }

    /// Messages of `sender` delivered by `node`.
    pub fn delivered(&self, node: usize, sender: usize) -> usize {
        self.at[node][sender]
    }
}
