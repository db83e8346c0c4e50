//! A log's entry in the domain's table: its name, number and settings, and which
//! members hold it (rendezvous hashing of its name).

use crate::error::TopicError;
use crate::qos::LogQos;
use serde::{Deserialize, Serialize};
use spindle_sst::transport::NodeId;
use spindle_views::view::View;

/// The most logs a domain holds.
pub const MAX_LOGS: usize = 256;
pub(crate) use crate::qos::REGIONS_PER_LOG;

/// A log as the domain's table lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Its name.
    pub name: String,
    /// Its number (in its members' file names and request frames): a hash of the
    /// name, distinct among the domain's logs.
    pub number: u64,
    /// Its settings.
    pub qos: LogQos,
}

impl LogEntry {
    /// Its replicas in `view`, the primary first.
    pub fn members(&self, view: &View) -> Vec<NodeId> {
        members_of(&self.name, self.qos.replicas as usize, view)
    }
}

/// The replicas of log `name` in `view`: the `replicas` members that score
/// highest for it, highest (the primary) first (see the module docs).
pub fn members_of(name: &str, replicas: usize, view: &View) -> Vec<NodeId> {
    spindle_views::layout::rendezvous(spindle_views::layout::stable_hash(name.as_bytes()), replicas, view)
}

/// The table's entry for a new log, `None` if the table has it already with
/// this QoS (`max_name`: the longest name, the table's).
pub(crate) fn create(
    logs: &[LogEntry],
    name: &str,
    qos: &LogQos,
    max_name: usize,
) -> Result<Option<LogEntry>, TopicError> {
    if name.is_empty() || name.len() > max_name {
        return Err(TopicError::NameLength { len: name.len(), max: max_name });
    }
    qos.validate().map_err(TopicError::Qos)?;
    if let Some(old) = logs.iter().find(|l| l.name == name) {
        return match old.qos == *qos {
            true => Ok(None),
            false => Err(TopicError::LogQosMismatch { domain: old.qos, here: *qos }),
        };
    }
    if logs.len() >= MAX_LOGS {
        return Err(TopicError::TooManyLogs { max: MAX_LOGS });
    }
    let number = spindle_views::layout::stable_hash(name.as_bytes()) >> 1; // postcard-friendly and never all ones
    if let Some(other) = logs.iter().find(|l| l.number == number) {
        return Err(TopicError::LogNameClash { other: other.name.clone() });
    }
    Ok(Some(LogEntry { name: name.into(), number, qos: *qos }))
}
