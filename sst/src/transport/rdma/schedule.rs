//! The parts of the RDMA transport that need no device: which writes ask for a
//! completion, and what a failed completion means.
//!
//! **Signalling.** A reliable-connection queue pair retires its send queue's work
//! requests only through completions, and only signaled requests produce one; a
//! completion of a signaled request retires every request posted before it on that
//! queue pair (RC executes them in order). So a node that never signals fills the
//! send queue and then cannot post at all. [`Signaler`] signals every `every`-th
//! post (and every post the caller asked a completion for), and refuses a post
//! while `depth` requests are unretired; the transport then polls the completion
//! queue and posts again. With `every <= depth / 2` a signaled request is always
//! in flight before the queue is full.

/// The signalling schedule of one queue pair (see the module docs).
#[derive(Debug, Clone)]
pub struct Signaler {
    every: u64,
    depth: u64,
    since_signal: u64,
    posted: u64,
    retired: u64,
}

/// The send queue has `depth` unretired requests: poll completions first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull;

impl Signaler {
    /// A schedule for a send queue of `depth` requests, signalling at least every
    /// `every` posts (clamped to `1..=depth / 2`).
    pub fn new(depth: u32, every: u32) -> Signaler {
        let depth = u64::from(depth.max(2));
        Signaler { every: u64::from(every).clamp(1, depth / 2), depth, since_signal: 0, posted: 0, retired: 0 }
    }

    /// Numbers the next post (1, 2, ...) and says whether it must be signaled;
    /// `asked` is the caller's own request for a completion.
    pub fn post(&mut self, asked: bool) -> Result<(u64, bool), QueueFull> {
        if self.posted - self.retired >= self.depth {
            return Err(QueueFull);
        }
        self.posted += 1;
        self.since_signal += 1;
        let signal = asked || self.since_signal >= self.every;
        if signal {
            self.since_signal = 0;
        }
        Ok((self.posted, signal))
    }

    /// A signaled request completed: it and everything before it are retired.
    pub fn complete(&mut self, seq: u64) {
        self.retired = self.retired.max(seq.min(self.posted));
    }

    /// The last post known to be applied at the peer (0 if none).
    pub fn retired(&self) -> u64 {
        self.retired
    }

    /// Posts not yet retired.
    pub fn in_flight(&self) -> u64 {
        self.posted - self.retired
    }
}

/// What a work completion's status (`ibv_wc_status`) means, for the report when a
/// link breaks. Every status but success moves a reliable-connection queue pair
/// to the error state, so any of them breaks the link.
pub fn status_text(status: u32) -> &'static str {
    match status {
        0 => "success",
        1 => "local length error",
        2 => "local queue pair operation error",
        4 => "local protection error (a buffer outside its registration)",
        5 => "flushed: the queue pair is in the error state (cut off, or an earlier error)",
        7 => "bad response from the peer",
        8 => "local access error",
        9 => "the peer found the request invalid",
        10 => "remote access error (an address or key the peer did not register)",
        11 => "remote operation error",
        12 => "transport retries exceeded: the peer does not answer",
        13 => "receiver-not-ready retries exceeded",
        _ => "work completion error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_never_overflows_and_signals_come_every_k_posts() {
        let mut s = Signaler::new(8, 4);
        let mut signaled = Vec::new();
        for _ in 0..8 {
            let (seq, sig) = s.post(false).unwrap();
            if sig {
                signaled.push(seq);
            }
        }
        assert_eq!(signaled, vec![4, 8]);
        assert_eq!(s.post(false), Err(QueueFull), "8 unretired requests fill a queue of 8");
        s.complete(4);
        assert_eq!(s.in_flight(), 4);
        assert_eq!(s.retired(), 4);
        assert_eq!(s.post(false), Ok((9, false)));
        s.complete(2); // an older completion changes nothing
        assert_eq!(s.retired(), 4);
    }

    #[test]
    fn a_requested_completion_is_signaled_and_restarts_the_count() {
        let mut s = Signaler::new(16, 8);
        assert_eq!(s.post(false), Ok((1, false)));
        assert_eq!(s.post(true), Ok((2, true)));
        for i in 3..10 {
            assert_eq!(s.post(false), Ok((i, false)), "seven posts after the asked one");
        }
        assert_eq!(s.post(false), Ok((10, true)));
    }

    #[test]
    fn signalling_is_clamped_to_half_the_queue() {
        let mut s = Signaler::new(4, 100);
        assert_eq!(s.post(false), Ok((1, false)));
        assert_eq!(s.post(false), Ok((2, true)), "every <= depth / 2");
        let mut one = Signaler::new(0, 0);
        assert_eq!(one.post(false), Ok((1, true)), "a degenerate queue signals every post");
    }

    #[test]
    fn every_failure_status_has_a_reason() {
        assert_eq!(status_text(0), "success");
        assert!(status_text(12).contains("does not answer"));
        assert!(status_text(10).contains("remote access"));
        assert_eq!(status_text(999), "work completion error");
    }
}
