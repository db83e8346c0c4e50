//! The statuses of readers and writers: counters a caller reads
//! ([`ReaderStatus`]), and what DDS calls communication statuses (incompatible
//! QoS, deadlines missed, liveliness changed).

use crate::codec::CodecError;
use crate::error::CatchUpError;
use crate::instance::InstanceHandle;
use crate::qos::Level;
use crate::sample::WriterId;
use std::collections::HashSet;
use thiserror::Error;

/// A reader's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReaderStatus {
    /// Samples that reached this reader (live and history).
    pub received: u64,
    /// Samples dropped because the queue held its history's limit untaken (the
    /// oldest go first; per instance for a keyed topic under `KeepLast`), and
    /// samples of the topic's order this reader never got: those delivered while
    /// its participant was out of the domain (removed, then rejoined; see
    /// `spindle_views::config::Config::rejoin`) that the other members' history no longer
    /// held (an Ordered topic keeps none).
    pub lost: u64,
    /// Samples that could not be decoded or stored, and other failures (history
    /// not received, log write failed).
    pub rejected: u64,
    /// Why the last one was rejected.
    pub last_rejected: Option<Rejection>,
    /// Samples its content filter did not pass (see
    /// [`crate::DomainParticipant::create_reader_filtered`]).
    pub filtered: u64,
    /// Samples that outlived their lifespan ([`crate::Qos::lifespan`]) untaken.
    pub expired: u64,
    /// Writers whose offer does not meet this reader's request.
    pub incompatible: IncompatibleQos,
    /// Instances that went longer than the reader's deadline without a sample.
    pub deadline_missed: DeadlineMissed,
    /// The topic's writers, alive or not, as membership tells.
    pub liveliness: Liveliness,
    /// Instances this reader knows (alive or not).
    pub instances: usize,
}

/// What one reader counted of one instance (see
/// [`crate::DataReader::instance_counts`]). A late joiner's reader gets the history
/// and the live samples as one sequence in the topic's order, and its `KeepLast(n)`
/// keeps the last n of the instance across that seam: a live sample that arrives
/// before the history was taken replaces the oldest history sample, which then
/// counts in `lost` and `history_lost`. So `from_history - history_lost` history
/// samples are handed out, and never more than n.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstanceCounts {
    /// Samples of the instance that reached this reader (live and history,
    /// disposals and unregistrations included).
    pub received: u64,
    /// Of those, samples of the history it got as a late joiner
    /// ([`crate::SampleInfo::from_history`]).
    pub from_history: u64,
    /// Samples of the instance dropped from the queue untaken: replaced under
    /// its history's limit, or the oldest of all past `max_samples`.
    pub lost: u64,
    /// Of those, samples from the history.
    pub history_lost: u64,
}

/// Deadlines missed (requested by a reader, or offered by a writer): each whole
/// period an alive instance went without a sample counts one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeadlineMissed {
    /// Periods missed so far, over every instance.
    pub total_count: u64,
    /// The instance that missed last.
    pub last_instance: InstanceHandle,
}

/// The liveliness of a topic's writers at a reader. A writer is alive while its
/// participant is a member of the domain's view and the writer is listed in the
/// domain's table; one whose participant left or was removed becomes not alive
/// (a dropped writer just leaves).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Liveliness {
    /// Writers of members alive now (clients' writers not counted).
    pub alive_count: u64,
    /// Writers that stopped being alive because their participant left the view.
    pub not_alive_count: u64,
    /// How many times these counts changed.
    pub changes: u64,
}

/// Writers (for a reader) or readers (for a writer) whose QoS does not match: the
/// requested level is above the offered one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IncompatibleQos {
    /// Distinct incompatible peers seen so far.
    pub total_count: u64,
    /// The incompatible peers of the current view, with their level.
    pub current: Vec<(WriterId, Level)>,
    seen: HashSet<WriterId>,
}

impl IncompatibleQos {
    /// Notes one incompatible peer (a client writer seen by its sample).
    pub(crate) fn add(&mut self, id: WriterId, level: Level) {
        if self.seen.insert(id) {
            self.total_count += 1;
        }
        if !self.current.iter().any(|(w, _)| *w == id) {
            self.current.push((id, level));
        }
    }

    pub(crate) fn update(&mut self, bad: Vec<(WriterId, Level)>) {
        for (id, _) in &bad {
            if self.seen.insert(*id) {
                self.total_count += 1;
            }
        }
        self.current = bad;
    }
}

/// The endpoints a topic has: the current members' and their clients'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Matched {
    /// Writers (clients' included).
    pub writers: usize,
    /// Readers (clients' included).
    pub readers: usize,
    /// Of the writers, those of clients.
    pub client_writers: usize,
    /// Of the readers, those of clients.
    pub client_readers: usize,
}

/// Why a reader was refused a sample or its history (see
/// [`crate::ReaderStatus::last_rejected`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Rejection {
    /// A message of the topic too short to hold a sample header.
    #[error("a {len}-byte message from node {sender}: too short for a sample")]
    ShortMessage {
        /// Its sender.
        sender: u32,
        /// Its length.
        len: usize,
    },
    /// A message of the topic packing several samples that does not hold what
    /// it says (a length past its end, or a client sample or a pack inside); the
    /// samples before the fault were delivered.
    #[error("a pack of samples from node {sender} that does not hold what it says")]
    BadPack {
        /// Its sender.
        sender: u32,
    },
    /// A keyed topic's sample without a valid instance prefix.
    #[error("sample {seq} of writer {writer:?}: no valid instance")]
    NoInstance {
        /// Its number in its writer's sequence.
        seq: u64,
        /// Its writer.
        writer: WriterId,
    },
    /// A sample that does not decode as the reader's type.
    #[error("sample {seq} of writer {writer:?}: {why}")]
    Undecodable {
        /// Its number in its writer's sequence.
        seq: u64,
        /// Its writer.
        writer: crate::WriterId,
        /// Why.
        why: CodecError,
    },
    /// The topic's log refused an append (its disk): the sample was delivered but
    /// is not durable here.
    #[error("the log refused an append ({0:?})")]
    LogAppend(std::io::ErrorKind),
    /// A late join ended without the history.
    #[error("history not received: {0}")]
    NoHistory(CatchUpError),
}
