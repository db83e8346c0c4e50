//! Progress: the delivery pipeline never stalls. Once senders stop, every message sent
//! is eventually delivered at every node, whatever the senders' rates, including
//! senders that never send (Spindle §3.3, property 3 "Correctness": the pipeline never
//! stalls; property 1 "Sender-invariance").

use crate::core::SmcCore;

/// Name in violation reports.
pub const NAME: &str = "progress: no stall (Spindle §3.3)";

/// Messages committed per sender.
#[derive(Debug)]
pub struct Progress {
    committed: Vec<u64>,
}

impl Progress {
    /// For `senders` senders.
    pub fn new(senders: usize) -> Progress {
        Progress { committed: vec![0; senders] }
    }

    /// A sender committed a message.
    pub fn on_commit(&mut self, sender: usize) {
        self.committed[sender] += 1;
    }

    /// After the group went quiet: every node delivered everything.
    pub fn complete<'a>(&self, nodes: impl Iterator<Item = &'a SmcCore>) -> Result<(), String> {
        let total: u64 = self.committed.iter().sum();
        for (i, core) in nodes.enumerate() {
            let got = core.stats().messages_delivered;
            if got != total {
                return Err(format!("node {i} delivered {got} of {total} messages and the group is quiet"));
            }
        }
        Ok(())
    }
}
