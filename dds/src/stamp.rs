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
    /// The counter and the wall clock at the last wall-clock read.
    at: quanta::Instant,
    wall: SystemTime,
}

impl Stamp {
    pub(crate) fn new() -> Self {
        let clock = quanta::Clock::new();
        let at = clock.now();
        Stamp { clock, at, wall: SystemTime::now() }
    }

    /// The wall-clock time now.
    pub(crate) fn now(&mut self) -> SystemTime {
        let now = self.clock.now();
        let since = now.saturating_duration_since(self.at);
        if since >= ANCHOR_EVERY {
            self.at = now;
            self.wall = SystemTime::now();
            return self.wall;
        }
        self.wall + since
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `a - b` in signed nanoseconds.
    fn diff_ns(a: SystemTime, b: SystemTime) -> i128 {
        match a.duration_since(b) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        }
    }

    #[test]
    fn stamps_follow_the_wall_clock_across_anchors() {
        let mut s = Stamp::new();
        let start = SystemTime::now();
        let mut last = s.now();
        let mut reads = 0u64;
        // Past several anchors: every stamp lies between two wall-clock reads taken
        // around it (with 1 ms of slack for the counter's drift and a descheduled
        // thread between the reads), and stamps between anchors never go back.
        while SystemTime::now().duration_since(start).unwrap_or_default() < 5 * ANCHOR_EVERY {
            let before = SystemTime::now();
            let t = s.now();
            let after = SystemTime::now();
            assert!(diff_ns(t, before) > -1_000_000, "stamp {t:?} well before the wall clock {before:?}");
            assert!(diff_ns(after, t) > -1_000_000, "stamp {t:?} well after the wall clock {after:?}");
            if t < last {
                assert!(diff_ns(last, t) < 1_000_000, "a stamp went back {} ns", diff_ns(last, t));
            }
            last = t;
            reads += 1;
        }
        assert!(reads > 100, "the loop ran ({reads} stamps)");
    }
}
