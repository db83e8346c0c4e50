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
//! use spindle_dds::qos::{History, Level, Qos};
//! let topic = Qos::volatile(History::KeepLast(100));
//! assert_eq!(topic.level, Level::Volatile);
//! assert!(Level::Ordered.satisfies(Level::Unordered));
//! assert!(!Level::Ordered.satisfies(Level::Logged), "a Logged reader needs a Logged writer");
//! assert_eq!(Qos::default().level, Level::Ordered, "total order is the default");
//! ```

use serde::{Deserialize, Serialize};
use spindle_tailwind::service::Ack;
use std::time::Duration;
use thiserror::Error;

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
    type Err = ParseLevelError;
    fn from_str(s: &str) -> Result<Level, ParseLevelError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "unordered" => Level::Unordered,
            "ordered" => Level::Ordered,
            "volatile" => Level::Volatile,
            "logged" => Level::Logged,
            _ => return Err(ParseLevelError(s.into())),
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
    /// bytes for the slot size (`spindle_smc::spec::auto_window`: 2 MiB of slots, 256 to
    /// 16,384 of them: 16,384 for 16-byte slots, 2,048 for 1 KB ones). Each member
    /// of the topic maps each writing node's ring, so a topic takes up to members ×
    /// writing nodes × 2 MiB over its members; with many topics, set a smaller
    /// window where memory matters more than the rate (256 slots of 1 KB: 256 KiB).
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
        self.slot_sample_bytes.min(self.max_sample_bytes) as usize + CLIENT_HEADER
    }

    /// Each writer's arena in the topic's subgroup: room for the largest sample and
    /// its header, or none when every sample fits a slot.
    pub(crate) fn arena(&self) -> usize {
        if self.max_sample_bytes <= self.slot_sample_bytes {
            return 0;
        }
        let sample = self.max_sample_bytes as usize + CLIENT_HEADER;
        match self.arena_bytes {
            Some(a) => a as usize,
            None => (256 * sample).min(64 << 20).max(sample),
        }
    }

    /// Slots per writer ring: `window`, or the byte-sized default.
    pub fn ring_window(&self) -> usize {
        self.window.map_or_else(|| spindle_smc::spec::auto_window(self.max_msg()), |w| w as usize)
    }

    /// How many samples this policy keeps at most.
    pub fn keep(&self) -> usize {
        match self.history {
            History::KeepLast(n) => n.max(1) as usize,
            History::KeepAll => self.max_samples.max(1) as usize,
        }
    }

    /// Checks the fields a topic needs.
    pub(crate) fn validate_topic(&self) -> Result<(), QosError> {
        let most = spindle_smc::spec::MAX_ARENA - CLIENT_HEADER;
        let value = self.max_sample_bytes;
        if value == 0 || value as usize > most {
            return Err(QosError::MaxSampleBytes { value, max: most });
        }
        let max = spindle_smc::MAX_MSG - CLIENT_HEADER;
        let value = self.slot_sample_bytes;
        if value == 0 || value as usize > max {
            return Err(QosError::SlotSampleBytes { value, max });
        }
        let min = self.max_sample_bytes as usize + CLIENT_HEADER;
        let max = spindle_smc::spec::MAX_ARENA;
        if let Some(value) = self.arena_bytes.filter(|&a| (a as usize) < min || a as usize > max) {
            return Err(QosError::ArenaBytes { value, min, max });
        }
        if let Some(value) = self.window.filter(|&w| w == 0 || w as usize > spindle_smc::MAX_WINDOW) {
            return Err(QosError::Window { value, max: spindle_smc::MAX_WINDOW });
        }
        self.validate_reader()
    }

    /// Checks what a writer's QoS asks of the writer itself (its level is checked
    /// against the topic's).
    pub(crate) fn validate_writer(&self) -> Result<(), QosError> {
        self.validate_times()
    }

    /// Checks the durations: none zero but the blocking time.
    fn validate_times(&self) -> Result<(), QosError> {
        if self.lifespan.is_some_and(|d| d.is_zero()) {
            return Err(QosError::ZeroLifespan);
        }
        if self.deadline.is_some_and(|d| d.is_zero()) {
            return Err(QosError::ZeroDeadline);
        }
        Ok(())
    }

    /// Checks what a reader's QoS asks of the reader itself: a history that keeps
    /// at least one sample (its level is matched against the writers' offers
    /// instead: a mismatch is reported, not refused).
    pub(crate) fn validate_reader(&self) -> Result<(), QosError> {
        if matches!(self.history, History::KeepLast(0)) || self.max_samples == 0 {
            return Err(QosError::KeepsNothing);
        }
        self.validate_times()
    }
}

/// Header bytes in front of a member's sample (the sample layer's; the sizes
/// here count it).
pub(crate) const HEADER: usize = 16;
/// Header bytes in front of a client's sample (see the sample layer's docs).
pub(crate) const CLIENT_HEADER: usize = 32;

/// Region ids each log may take (its buffers).
pub(crate) const REGIONS_PER_LOG: u16 = 64;

/// A log's settings, fixed when it is created (the same for every participant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogQos {
    /// Members holding the log: the primary and `replicas - 1` backups (fewer
    /// while the domain has fewer members). Default 3.
    pub replicas: u32,
    /// Bytes per buffer: a segment's size, and the most one append batch takes.
    /// Default 4 MiB.
    pub buffer_bytes: u32,
    /// Buffers per view (one open, the others closed and flushing), 2 to 63.
    /// Default 2.
    pub buffers: u32,
    /// When an append is acknowledged: in every replica's memory (default), or
    /// also on a majority of the replicas' disks ([`Ack::Disk`]: a restart of the
    /// whole domain loses no acknowledged append; at most 7 replicas).
    pub ack: Ack,
}

impl Default for LogQos {
    fn default() -> LogQos {
        LogQos { replicas: 3, buffer_bytes: 4 << 20, buffers: 2, ack: Ack::Memory }
    }
}

impl LogQos {
    /// Checks the ranges: 1 to 16 replicas, buffers of 4 KiB to 256 MiB (a
    /// multiple of 8), 2 to 63 of them.
    pub(crate) fn validate(&self) -> Result<(), QosError> {
        let max = if self.ack == Ack::Disk { spindle_tailwind::service::MAX_DISK_REPLICAS } else { 16 };
        if self.replicas == 0 || self.replicas as usize > max {
            return Err(QosError::Replicas { value: self.replicas, max });
        }
        if !(4096..=256 << 20).contains(&self.buffer_bytes) || self.buffer_bytes % 8 != 0 {
            return Err(QosError::BufferBytes { value: self.buffer_bytes });
        }
        // One region more than its buffers: the commit word's.
        if !(2..REGIONS_PER_LOG as u32).contains(&self.buffers) {
            return Err(QosError::Buffers { value: self.buffers, max: REGIONS_PER_LOG as usize - 1 });
        }
        Ok(())
    }
}

/// A QoS (or log settings) value out of range, or a request a QoS does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum QosError {
    /// `max_sample_bytes` out of range.
    #[error("max_sample_bytes {value} must be 1..={max}")]
    MaxSampleBytes {
        /// The value.
        value: u32,
        /// The largest.
        max: usize,
    },
    /// `slot_sample_bytes` out of range.
    #[error("slot_sample_bytes {value} must be 1..={max}")]
    SlotSampleBytes {
        /// The value.
        value: u32,
        /// The largest.
        max: usize,
    },
    /// An arena that cannot hold the largest sample with its header, or is past
    /// the largest arena.
    #[error("arena_bytes {value} must be {min}..={max}")]
    ArenaBytes {
        /// The value.
        value: u32,
        /// The smallest.
        min: usize,
        /// The largest.
        max: usize,
    },
    /// A window out of range.
    #[error("window {value} must be 1..={max}")]
    Window {
        /// The value.
        value: u32,
        /// The largest.
        max: usize,
    },
    /// A history that keeps no sample (`KeepLast(0)` or `max_samples` 0).
    #[error("the history must keep at least one sample")]
    KeepsNothing,
    /// A lifespan of zero keeps no sample (`None` keeps them forever).
    #[error("a lifespan of zero keeps no sample (None keeps them forever)")]
    ZeroLifespan,
    /// A deadline of zero is always missed (`None` sets none).
    #[error("a deadline period of zero is always missed (None sets none)")]
    ZeroDeadline,
    /// A log's replica count out of range.
    #[error("replicas {value} must be 1..={max}")]
    Replicas {
        /// The value.
        value: u32,
        /// The most (fewer with [`crate::LogAck::Disk`]).
        max: usize,
    },
    /// A log's buffer size out of range or not a multiple of 8.
    #[error("buffer_bytes {value} must be a multiple of 8 from 4 KiB to 256 MiB")]
    BufferBytes {
        /// The value.
        value: u32,
    },
    /// A log's buffer count out of range.
    #[error("buffers {value} must be 2..={max}")]
    Buffers {
        /// The value.
        value: u32,
        /// The most.
        max: usize,
    },
    /// This participant (or client) has as many writers and readers as it takes:
    /// drop one first.
    #[error("at most {max} writers and readers")]
    TooManyEndpoints {
        /// The limit.
        max: u32,
    },
    /// A writer offering a level above its topic's: offer the topic's level or
    /// less.
    #[error("a writer cannot offer {offered:?} on a topic of level {topic:?}")]
    AboveTopic {
        /// What the writer offered.
        offered: Level,
        /// The topic's level.
        topic: Level,
    },
}

/// A QoS level's name that is none of `unordered`, `ordered`, `volatile`, `logged`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown QoS level `{0}` (unordered, ordered, volatile, logged)")]
pub struct ParseLevelError(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_past_a_slot_go_through_an_arena_sized_by_default_or_by_hand() {
        let q = Qos::default();
        assert_eq!(q.max_msg(), 1008 + CLIENT_HEADER, "slots stay 1 KB");
        assert_eq!(q.arena(), (64 << 20) + CLIENT_HEADER, "one largest sample (and its header) at least");
        assert_eq!(q.max_sample_bytes(1024).arena(), 256 * (1024 + CLIENT_HEADER), "256 samples");
        assert_eq!(q.max_sample_bytes(512).arena(), 0, "every sample fits a slot: no arena");
        assert!(q.validate_topic().is_ok());
        let no_header = q.max_sample_bytes(1 << 20).arena_bytes(1 << 20).validate_topic();
        assert!(matches!(no_header, Err(QosError::ArenaBytes { value: 1048576, .. })), "no room for the header");
        assert!(matches!(q.arena_bytes(u32::MAX).validate_topic(), Err(QosError::ArenaBytes { .. })), "past 1 GiB");
        let past = q.max_sample_bytes(1 << 30).validate_topic();
        assert!(matches!(past, Err(QosError::MaxSampleBytes { .. })), "a sample and its header past 1 GiB");
        assert_eq!(
            q.slot_sample_bytes(0).validate_topic(),
            Err(QosError::SlotSampleBytes { value: 0, max: spindle_smc::MAX_MSG - CLIENT_HEADER })
        );
        assert_eq!(q.history(History::KeepLast(0)).validate_reader(), Err(QosError::KeepsNothing));
        assert_eq!(q.lifespan(Duration::ZERO).validate_writer(), Err(QosError::ZeroLifespan));
        assert_eq!("fast".parse::<Level>(), Err(ParseLevelError("fast".into())));
    }

    #[test]
    fn levels_round_trip_through_their_wire_numbers_and_unknown_ones_are_the_least() {
        for l in [Level::Unordered, Level::Ordered, Level::Volatile, Level::Logged] {
            assert_eq!(Level::from_wire(l as u8), l);
        }
        assert_eq!(Level::from_wire(9), Level::Unordered);
    }
}
