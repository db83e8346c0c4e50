//! Quality of service: the four levels of Spindle §4.6, history and resource limits,
//! and the requested/offered match between readers and writers.
//!
//! A topic is created with a [`Qos`]; its level decides how its subgroup delivers
//! (Unordered: on receipt; every other level: atomic multicast, one total order over
//! all writers) and what every member keeps (Volatile: the history in memory; Logged:
//! the history in a log file on disk as well). A writer *offers* a level, a reader
//! *requests* one; they match when the offer is at least the request, as DDS's
//! "requested/offered" rule. A pair that does not match is never silent: both sides
//! get an [`crate::IncompatibleQos`] status, and the reader does not take that
//! writer's samples.
//!
//! ```
//! use dds::qos::{History, Level, Qos};
//! let topic = Qos::volatile(History::KeepLast(100));
//! assert_eq!(topic.level, Level::Volatile);
//! assert!(Level::Ordered.satisfies(Level::Unordered));
//! assert!(!Level::Ordered.satisfies(Level::Logged), "a Logged reader needs a Logged writer");
//! assert_eq!(Qos::default().level, Level::Ordered, "total order is the default");
//! ```

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The delivery and durability level, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub enum Level {
    /// Delivered on receipt, without waiting for stability; nothing kept. A sample
    /// in flight when its writer fails may reach only some readers.
    Unordered,
    /// Atomic multicast: every reader delivers the same samples in the same total
    /// order across all writers of the topic; nothing kept after delivery.
    #[default]
    Ordered,
    /// Ordered, and every member keeps the topic's history in memory; a reader that
    /// joins late receives it before the live samples, with no gap and no duplicate.
    Volatile,
    /// Volatile, and every member appends the samples to a log file on disk; a
    /// process that restarts recovers its log and catches up from the others.
    Logged,
}

impl Level {
    /// The level numbered `n` (0 Unordered .. 3 Logged), as client sample headers
    /// carry it; a number that is no level offers nothing a reader could request
    /// beyond the least: Unordered.
    pub(crate) fn from_wire(n: u8) -> Level {
        [Level::Unordered, Level::Ordered, Level::Volatile, Level::Logged]
            .get(n as usize)
            .copied()
            .unwrap_or(Level::Unordered)
    }

    /// True if an offer at this level meets a request at `requested`.
    pub fn satisfies(self, requested: Level) -> bool {
        self >= requested
    }

    /// The name used in configuration files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Level::Unordered => "unordered",
            Level::Ordered => "ordered",
            Level::Volatile => "volatile",
            Level::Logged => "logged",
        }
    }
}

impl std::str::FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Level, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "unordered" => Level::Unordered,
            "ordered" => Level::Ordered,
            "volatile" => Level::Volatile,
            "logged" => Level::Logged,
            _ => return Err(format!("unknown QoS level `{s}` (unordered, ordered, volatile, logged)")),
        })
    }
}

/// How many samples are kept: by a reader until taken, and by every member of a
/// Volatile or Logged topic for late joiners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum History {
    /// The last `n` (at least 1); older ones are dropped.
    KeepLast(u32),
    /// All, up to the resource limit ([`Qos::max_samples`]); past it the oldest are
    /// dropped and counted as lost.
    KeepAll,
}

impl Default for History {
    fn default() -> Self {
        History::KeepLast(1024)
    }
}

/// A topic's, writer's or reader's quality of service. For a topic every field
/// counts; a writer uses `level` (its offer); a reader uses `level` (its request),
/// `history` and `max_samples` (its queue of samples not yet taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Qos {
    /// The level.
    pub level: Level,
    /// How many samples are kept.
    pub history: History,
    /// The most samples kept under [`History::KeepAll`] (the resource limit).
    pub max_samples: u32,
    /// The largest serialized sample, in bytes (topic only; default 64 MiB, at most
    /// 1 GiB less a header). A sample up to [`Qos::slot_sample_bytes`] goes in a ring
    /// slot; a larger one is written once into its writer's arena, which holds
    /// `max_sample_bytes` (plus a header) per writer at every member, touched only
    /// as used (see the crate docs, "Samples of any size").
    pub max_sample_bytes: u32,
    /// The largest sample that goes in a ring slot, in bytes (topic only; default
    /// 1008, so that a sample with its 16-byte header fills a 1 KB slot). Slots are
    /// sized for it; it no longer bounds what a writer may write.
    pub slot_sample_bytes: u32,
    /// Bytes of each writer's arena (topic only); `None` (the default): room for 256
    /// of the largest samples, at most 64 MiB, at least one sample. Larger arenas
    /// keep more large samples in flight; every member maps every writer's arena,
    /// touched only as used.
    pub arena_bytes: Option<u32>,
    /// Slots per writer ring (topic only); `None` (the default) sizes the ring in
    /// bytes for the slot size (`smc::spec::auto_window`: 256 KiB of slots, 256 to
    /// 4096 of them: 4096 for 16-byte slots, 256 for 1 KB ones).
    pub window: Option<u32>,
    /// How long a sample stays valid after its writer wrote it (by its source
    /// timestamp): older ones leave the history (topic) and the queue (reader)
    /// unread. `None` (the default): forever. Clocks of the writer's and reader's
    /// hosts are compared.
    pub lifespan: Option<Duration>,
    /// The most time between two samples of an instance: a reader past it counts a
    /// requested deadline missed, a writer an offered one (per instance;
    /// [`crate::DeadlineMissed`]). A reader's request is met when the
    /// writers' offer is at most its period. `None` (the default): no deadline.
    pub deadline: Option<Duration>,
    /// How long a writer's `write` may wait for room in its ring, the readers being
    /// slow (DDS reliability's max_blocking_time): past it the write fails with
    /// [`crate::DdsError::NoRoom`]. `None` (the default): [`DEFAULT_MAX_BLOCKING`].
    /// A write during a view change waits for the next view as well, up to the
    /// group's send timeout (30 s by default); [`crate::DataWriter::try_write`]
    /// never waits for either.
    pub max_blocking_time: Option<Duration>,
}

/// The default [`Qos::max_blocking_time`]: 1 s (DDS's is 100 ms; a loaded 2-core
/// host stalls a ring for longer than that without anything being wrong).
pub const DEFAULT_MAX_BLOCKING: Duration = Duration::from_secs(1);

/// The default [`Qos::max_sample_bytes`]: 64 MiB.
pub const DEFAULT_MAX_SAMPLE: u32 = 64 << 20;

impl Default for Qos {
    fn default() -> Self {
        Qos {
            level: Level::Ordered,
            history: History::default(),
            max_samples: 100_000,
            max_sample_bytes: DEFAULT_MAX_SAMPLE,
            slot_sample_bytes: 1008,
            arena_bytes: None,
            window: None,
            lifespan: None,
            deadline: None,
            max_blocking_time: None,
        }
    }
}

impl Qos {
    /// Level [`Level::Unordered`], other fields default.
    pub fn unordered() -> Qos {
        Qos { level: Level::Unordered, ..Qos::default() }
    }
    /// Level [`Level::Ordered`] (the default).
    pub fn ordered() -> Qos {
        Qos::default()
    }
    /// Level [`Level::Volatile`] keeping `history`.
    pub fn volatile(history: History) -> Qos {
        Qos { level: Level::Volatile, history, ..Qos::default() }
    }
    /// Level [`Level::Logged`] keeping `history` in memory (the log keeps all).
    pub fn logged(history: History) -> Qos {
        Qos { level: Level::Logged, history, ..Qos::default() }
    }
    /// The same with samples up to `bytes` long.
    pub fn max_sample_bytes(mut self, bytes: u32) -> Qos {
        self.max_sample_bytes = bytes;
        self
    }
    /// The same with samples up to `bytes` long in ring slots (larger ones go through
    /// the writer's arena).
    pub fn slot_sample_bytes(mut self, bytes: u32) -> Qos {
        self.slot_sample_bytes = bytes;
        self
    }
    /// The same with an arena of `bytes` per writer (at least the largest sample and
    /// its header).
    pub fn arena_bytes(mut self, bytes: u32) -> Qos {
        self.arena_bytes = Some(bytes);
        self
    }
    /// The same with `window` slots per writer (the default sizes the ring in bytes).
    pub fn window(mut self, window: u32) -> Qos {
        self.window = Some(window);
        self
    }
    /// The same with this history.
    pub fn history(mut self, history: History) -> Qos {
        self.history = history;
        self
    }
    /// The same with samples valid for `life` after they were written.
    pub fn lifespan(mut self, life: Duration) -> Qos {
        self.lifespan = Some(life);
        self
    }
    /// The same with a deadline `period` per instance.
    pub fn deadline(mut self, period: Duration) -> Qos {
        self.deadline = Some(period);
        self
    }
    /// The same with writes waiting at most `d` for room.
    pub fn max_blocking_time(mut self, d: Duration) -> Qos {
        self.max_blocking_time = Some(d);
        self
    }

    /// The largest message in a slot of the topic's subgroup: a slot-sized sample and
    /// its largest header.
    pub(crate) fn max_msg(&self) -> usize {
        self.slot_sample_bytes.min(self.max_sample_bytes) as usize + crate::sample::CLIENT_HEADER
    }

    /// Each writer's arena in the topic's subgroup: room for the largest sample and
    /// its header, or none when every sample fits a slot.
    pub(crate) fn arena(&self) -> usize {
        if self.max_sample_bytes <= self.slot_sample_bytes {
            return 0;
        }
        let sample = self.max_sample_bytes as usize + crate::sample::CLIENT_HEADER;
        match self.arena_bytes {
            Some(a) => a as usize,
            None => (256 * sample).min(64 << 20).max(sample),
        }
    }

    /// Slots per writer ring: `window`, or the byte-sized default.
    pub fn ring_window(&self) -> usize {
        self.window.map_or_else(|| smc::spec::auto_window(self.max_msg()), |w| w as usize)
    }

    /// How many samples this policy keeps at most.
    pub fn keep(&self) -> usize {
        match self.history {
            History::KeepLast(n) => n.max(1) as usize,
            History::KeepAll => self.max_samples.max(1) as usize,
        }
    }

    /// Checks the fields a topic needs.
    pub(crate) fn validate_topic(&self) -> Result<(), String> {
        let most = smc::spec::MAX_ARENA - crate::sample::CLIENT_HEADER;
        if self.max_sample_bytes == 0 || self.max_sample_bytes as usize > most {
            return Err(format!("max_sample_bytes {} must be 1..={most}", self.max_sample_bytes));
        }
        if self.slot_sample_bytes == 0 || self.slot_sample_bytes as usize + crate::sample::CLIENT_HEADER > smc::MAX_MSG
        {
            return Err(format!(
                "slot_sample_bytes {} must be 1..={}",
                self.slot_sample_bytes,
                smc::MAX_MSG - crate::sample::CLIENT_HEADER
            ));
        }
        let sample = self.max_sample_bytes as usize + crate::sample::CLIENT_HEADER;
        if let Some(a) = self.arena_bytes.filter(|&a| (a as usize) < sample || a as usize > smc::spec::MAX_ARENA) {
            return Err(format!(
                "arena_bytes {a} must hold the largest sample and its header: {sample}..={}",
                smc::spec::MAX_ARENA
            ));
        }
        if let Some(w) = self.window.filter(|&w| w == 0 || w as usize > smc::MAX_WINDOW) {
            return Err(format!("window {w} must be 1..={}", smc::MAX_WINDOW));
        }
        if matches!(self.history, History::KeepLast(0)) || self.max_samples == 0 {
            return Err("history must keep at least one sample".into());
        }
        self.validate_times()
    }

    /// Checks what a writer's QoS asks of the writer itself (its level is checked
    /// against the topic's).
    pub(crate) fn validate_writer(&self) -> Result<(), String> {
        self.validate_times()
    }

    /// Checks the durations: none zero but the blocking time.
    fn validate_times(&self) -> Result<(), String> {
        if self.lifespan.is_some_and(|d| d.is_zero()) {
            return Err("a lifespan of zero keeps no sample (None keeps them forever)".into());
        }
        if self.deadline.is_some_and(|d| d.is_zero()) {
            return Err("a deadline period of zero is always missed (None sets none)".into());
        }
        Ok(())
    }

    /// Checks what a reader's QoS asks of the reader itself: a history that keeps
    /// at least one sample (its level is matched against the writers' offers
    /// instead: a mismatch is reported, not refused).
    pub(crate) fn validate_reader(&self) -> Result<(), String> {
        if matches!(self.history, History::KeepLast(0)) || self.max_samples == 0 {
            return Err(format!(
                "a reader's history must keep at least one sample ({:?}, max_samples {})",
                self.history, self.max_samples
            ));
        }
        self.validate_times()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_past_a_slot_go_through_an_arena_sized_by_default_or_by_hand() {
        let q = Qos::default();
        assert_eq!(q.max_msg(), 1008 + crate::sample::CLIENT_HEADER, "slots stay 1 KB");
        assert_eq!(
            q.arena(),
            (64 << 20) + crate::sample::CLIENT_HEADER,
            "one largest sample (and its header) at least"
        );
        assert_eq!(q.max_sample_bytes(1024).arena(), 256 * (1024 + crate::sample::CLIENT_HEADER), "256 samples");
        assert_eq!(q.max_sample_bytes(512).arena(), 0, "every sample fits a slot: no arena");
        assert!(q.validate_topic().is_ok());
        assert!(q.max_sample_bytes(1 << 20).arena_bytes(1 << 20).validate_topic().is_err(), "no room for the header");
        assert!(q.arena_bytes(u32::MAX).validate_topic().is_err(), "past 1 GiB");
        assert!(q.max_sample_bytes(1 << 30).validate_topic().is_err(), "a sample and its header past 1 GiB");
        assert!(q.slot_sample_bytes(0).validate_topic().is_err());
    }

    #[test]
    fn levels_round_trip_through_their_wire_numbers_and_unknown_ones_are_the_least() {
        for l in [Level::Unordered, Level::Ordered, Level::Volatile, Level::Logged] {
            assert_eq!(Level::from_wire(l as u8), l);
        }
        assert_eq!(Level::from_wire(9), Level::Unordered);
    }
}
