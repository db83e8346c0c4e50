//! Shared helpers for the benchmark and demo programs: latency summaries. Process
//! orchestration, bounded polling and CPU clocks live in `sst::cluster`.
#![forbid(unsafe_code)]

pub mod mcast;

use std::time::Duration;

/// A latency histogram in nanoseconds, reported in microseconds.
#[derive(Debug, Clone)]
pub struct Latency {
    h: hdrhistogram::Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Latency { h: hdrhistogram::Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds") }
    }
}

impl Latency {
    /// Records one sample.
    pub fn record(&mut self, d: Duration) {
        let _ = self.h.record((d.as_nanos() as u64).max(1));
    }
    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.h.len()
    }
    /// True without samples.
    pub fn is_empty(&self) -> bool {
        self.h.is_empty()
    }
    /// The `q` quantile (0..=1) in microseconds.
    pub fn quantile_us(&self, q: f64) -> f64 {
        self.h.value_at_quantile(q) as f64 / 1000.0
    }
}

/// Rounds to `digits` decimals (for JSON output).
pub fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// Writes a line to stdout; a closed stdout (a reader that went away) is not an error
/// worth a panic, unlike `println!`.
pub fn out(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// Writes a line to stderr, ignoring a closed stderr (see [`out`]).
pub fn err(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// `n` distinct loopback ports, each free together with the next one (a member's
/// control port and the data port after it), for member processes to bind.
pub use sst::cluster::free_ports;
