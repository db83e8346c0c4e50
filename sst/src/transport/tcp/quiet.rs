//! How often the driver reads a link that has been quiet. A read that finds
//! nothing is still a system call (about a third of a microsecond on the 2-core VM
//! of docs/benchmarks.md), and a spinning predicate thread made one on every link at
//! every pass: in a tcp throughput run nine reads in ten found nothing. After a read
//! finds nothing the driver now passes over the link for as many passes as reads in
//! a row found nothing, up to [`MAX_SKIP`]; a read that gets bytes reads at every
//! pass again, and so does every link after the driver parks (its sleep watches the
//! sockets themselves, so bytes that came while it skipped wake it at once).
//!
//! Only the driver's passes skip: the fallback receiver, which stands in for a
//! driver that is held up, reads every time it runs.

use crate::sync::atomic::{AtomicU32, Ordering};

/// The most passes a quiet link is passed over between two reads. A skipped pass
/// costs a few loads, so data that lands on a quiet link waits this many short
/// passes at most (well under a microsecond on that VM), against tens of
/// microseconds for a round trip over loopback tcp.
pub(super) const MAX_SKIP: u32 = 8;

/// One link's quiet streak. Only the driver thread changes it (plain loads and
/// stores; atomics only because the link is shared with the fallback receiver).
#[derive(Debug, Default)]
pub(super) struct Quiet {
    /// Reads in a row that found nothing (up to [`MAX_SKIP`]).
    empty: AtomicU32,
    /// Passes still to skip before the next read.
    skip: AtomicU32,
}

impl Quiet {
    /// At a driver's pass: false if this pass skips the link; else `read` runs and
    /// reports whether it got bytes, which sets the next skips.
    #[inline]
    pub(super) fn poll(&self, read: impl FnOnce() -> bool) -> bool {
        let skip = self.skip.load(Ordering::Relaxed);
        if skip > 0 {
            self.skip.store(skip - 1, Ordering::Relaxed);
            return false;
        }
        let got = read();
        let empty = match got {
            true => 0,
            false => (self.empty.load(Ordering::Relaxed) + 1).min(MAX_SKIP),
        };
        self.empty.store(empty, Ordering::Relaxed);
        self.skip.store(empty, Ordering::Relaxed);
        got
    }

    /// The driver parks: the next pass reads the link.
    pub(super) fn reset(&self) {
        self.empty.store(0, Ordering::Relaxed);
        self.skip.store(0, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Runs `passes` passes against a link whose reads get bytes when `data(pass)`;
    /// returns the passes that read.
    fn reads(q: &Quiet, passes: u32, data: impl Fn(u32) -> bool) -> Vec<u32> {
        let mut read = Vec::new();
        for pass in 0..passes {
            q.poll(|| {
                read.push(pass);
                data(pass)
            });
        }
        read
    }

    #[test]
    fn a_quiet_link_is_read_less_and_less_often_up_to_the_bound() {
        let q = Quiet::default();
        let got = reads(&q, 60, |_| false);
        // Gaps of 1, 2, 3, ... skipped passes, then MAX_SKIP each.
        let gaps: Vec<u32> = got.windows(2).map(|w| w[1] - w[0] - 1).collect();
        assert_eq!(&gaps[..MAX_SKIP as usize], &(1..=MAX_SKIP).collect::<Vec<_>>()[..]);
        assert!(gaps.iter().all(|g| *g <= MAX_SKIP), "{gaps:?}");
        assert!(got.len() < 20, "{} reads in 60 passes", got.len());
    }

    #[test]
    fn a_busy_link_is_read_at_every_pass() {
        let q = Quiet::default();
        assert_eq!(reads(&q, 20, |_| true), (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn bytes_after_a_quiet_spell_make_the_next_pass_read_again() {
        let q = Quiet::default();
        reads(&q, 40, |_| false);
        // The next read gets bytes: every pass after it reads.
        let got = reads(&q, 30, |_| true);
        let from = got[0];
        assert!(from <= MAX_SKIP, "the next read comes within {MAX_SKIP} passes: {from}");
        assert_eq!(got, (from..30).collect::<Vec<_>>());
    }

    #[test]
    fn a_reset_reads_at_the_next_pass() {
        let q = Quiet::default();
        reads(&q, 40, |_| false);
        q.reset();
        assert_eq!(reads(&q, 1, |_| false), [0]);
    }
}
