//! Counters of one subgroup at one node: messages, nulls, and batch sizes per stage.
//! Counted, never logged, on the hot path.

/// Sizes of the batches one stage took, with a power-of-two histogram.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BatchSizes {
    /// Batches.
    pub batches: u64,
    /// Items over all batches.
    pub items: u64,
    /// Largest batch.
    pub max: u64,
    /// `histogram[i]`: batches of `2^i ..= 2^(i+1) - 1` items.
    pub histogram: [u64; 32],
}

impl BatchSizes {
    /// Records one batch of `n` (> 0) items.
    pub fn record(&mut self, n: u64) {
        self.batches += 1;
        self.items += n;
        self.max = self.max.max(n);
        self.histogram[(63 - n.max(1).leading_zeros()).min(31) as usize] += 1;
    }
    /// Mean batch size (0 without batches).
    pub fn mean(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            self.items as f64 / self.batches as f64
        }
    }
    /// Adds another node's or subgroup's counts.
    pub fn merge(&mut self, o: &BatchSizes) {
        self.batches += o.batches;
        self.items += o.items;
        self.max = self.max.max(o.max);
        for (a, b) in self.histogram.iter_mut().zip(o.histogram) {
            *a += b;
        }
    }
}

/// Counters of one subgroup at one node.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Application messages committed by this node.
    pub messages_sent: u64,
    /// Application messages delivered at this node.
    pub messages_delivered: u64,
    /// Null indices this node sent.
    pub nulls: u64,
    /// Null runs (entries) this node sent.
    pub null_runs: u64,
    /// Entries refused because their header lied (each refuses its sender).
    pub refused: u64,
    /// Entries per send-stage push.
    pub send_batches: BatchSizes,
    /// Entries per receive stage.
    pub recv_batches: BatchSizes,
    /// Messages per delivery batch.
    pub deliver_batches: BatchSizes,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_sizes_bucket_by_power_of_two() {
        let mut b = BatchSizes::default();
        for n in [1, 2, 3, 4, 1000] {
            b.record(n);
        }
        assert_eq!((b.batches, b.items, b.max), (5, 1010, 1000));
        assert_eq!(b.histogram[0], 1);
        assert_eq!(b.histogram[1], 2);
        assert_eq!(b.histogram[2], 1);
        assert_eq!(b.histogram[9], 1);
        assert!((b.mean() - 202.0).abs() < 1e-9);
    }
}
