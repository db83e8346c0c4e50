//! A writer's source timestamps: the wall clock extrapolated by the CPU's counter.
//!
//! Reading the system's wall clock (`SystemTime::now`, the vDSO's `clock_gettime`)
//! took 34 ns a call on the project's test VM, about a third of a small sample's
//! time on the writer's thread. A [`Stamp`] reads the wall clock once per
//! [`ANCHOR_EVERY`] and in between adds the time the CPU's counter measured since
//! (`quanta`: the TSC where it is invariant, else the OS's monotonic clock). A stamp
//! is therefore off the wall clock by the counter's drift over at most
//! [`ANCHOR_EVERY`] (microseconds at worst), and a step of the wall clock (NTP)
//! shows in the stamps within [`ANCHOR_EVERY`]: the same promise a wall-clock read
//! makes, which is no promise of monotonicity.
//!
//! The first writer of a process waits for `quanta` to calibrate the counter
//! against the OS clock, once: at least 500 rounds of 1 µs, at most 200 ms (writer
//! creation measured 0.9-4.4 ms against 4.0-8.0 ms before, in `dds_perf`'s runs).

use std::time::{Duration, SystemTime};

/// How long a stamp extrapolates from one wall-clock read.
pub(crate) const ANCHOR_EVERY: Duration = Duration::from_millis(10);

/// One writer's clock (kept under the writer's send lock).
pub(crate) struct Stamp {
    clock: quanta::Clock,
    /// The counter's raw value and the wall clock (ns since the Unix epoch) at the
    /// last wall-clock read.
    at: u64,
    wall_ns: u64,
}

impl Stamp {
    pub(crate) fn new() -> Self {
        let clock = quanta::Clock::new();
        let at = clock.raw();
        Stamp { clock, at, wall_ns: crate::sample::wall_ns(SystemTime::now()) }
    }

    /// The wall-clock time now, in nanoseconds since the Unix epoch (a sample
    /// header's second word): the raw counter read and scaled, with no
    /// conversion through `SystemTime` on the way.
    pub(crate) fn now_ns(&mut self) -> u64 {
        let raw = self.clock.raw();
        let since = self.clock.delta_as_nanos(self.at, raw);
        if since >= ANCHOR_EVERY.as_nanos() as u64 {
            self.at = raw;
            self.wall_ns = crate::sample::wall_ns(SystemTime::now());
            return self.wall_ns;
        }
        self.wall_ns + since
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `a - b` in signed nanoseconds.
    fn diff_ns(a: u64, b: u64) -> i128 {
        a as i128 - b as i128
    }

    fn wall() -> u64 {
        crate::sample::wall_ns(SystemTime::now())
    }

    #[test]
    fn stamps_follow_the_wall_clock_across_anchors() {
        let mut s = Stamp::new();
        let start = SystemTime::now();
        let mut last = s.now_ns();
        let mut reads = 0u64;
        // Past several anchors: every stamp lies between two wall-clock reads taken
        // around it (with 1 ms of slack for the counter's drift and a descheduled
        // thread between the reads), and stamps between anchors never go back.
        while SystemTime::now().duration_since(start).unwrap_or_default() < 5 * ANCHOR_EVERY {
            let before = wall();
            let t = s.now_ns();
            let after = wall();
            assert!(diff_ns(t, before) > -1_000_000, "stamp {t} well before the wall clock {before}");
            assert!(diff_ns(after, t) > -1_000_000, "stamp {t} well after the wall clock {after}");
            if t < last {
                assert!(diff_ns(last, t) < 1_000_000, "a stamp went back {} ns", diff_ns(last, t));
            }
            last = t;
            reads += 1;
        }
        assert!(reads > 100, "the loop ran ({reads} stamps)");
    }
}
