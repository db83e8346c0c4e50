//! Slot reuse: a sender writes entry `e` into the slot of entry `e - window` only after
//! every member has delivered every index of that older entry, because delivery reads
//! messages in place (docs/DESIGN.md smc, "Slot reuse"; Spindle §2.4: a free slot is one
//! whose message every member has delivered).

/// Name in violation reports.
pub const NAME: &str = "slot reuse only after delivery everywhere (docs/DESIGN.md smc)";

/// Each sender's entry ends, by entry number.
#[derive(Debug)]
pub struct SlotReuse {
    window: u64,
    ends: Vec<Vec<u64>>,
}

impl SlotReuse {
    /// For `senders` senders with rings of `window` slots.
    pub fn new(senders: usize, window: u64) -> SlotReuse {
        SlotReuse { window, ends: vec![Vec::new(); senders] }
    }

    /// Sender `r` wrote entry `e` ending at index `end`; `delivered[node]` is each
    /// node's delivered count for `r` at that moment.
    pub fn on_entry(&mut self, r: usize, e: u64, end: u64, delivered: &[u64]) -> Result<(), String> {
        if e != self.ends[r].len() as u64 {
            return Err(format!("sender {r} wrote entry {e}, expected entry {}", self.ends[r].len()));
        }
        if e >= self.window {
            let old_end = self.ends[r][(e - self.window) as usize];
            if let Some((node, d)) = delivered.iter().enumerate().find(|(_, d)| **d < old_end) {
                return Err(format!(
                    "sender {r} reused the slot of entry {} (indices up to {old_end}) but node {node} has delivered only {d}",
                    e - self.window
                ));
            }
        }
        self.ends[r].push(end);
        Ok(())
    }
}
