//! A log's entry in the domain's table: its name, number and settings, and which
//! members hold it (rendezvous hashing of its name).

use serde::{Deserialize, Serialize};
use sst::transport::NodeId;
use tailwind::service::Ack;
use views::view::View;

/// The most logs a domain holds.
pub const MAX_LOGS: usize = 256;
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
    pub(crate) fn validate(&self) -> Result<(), String> {
        if !(1..=16).contains(&self.replicas) {
            return Err(format!("replicas {} is not between 1 and 16", self.replicas));
        }
        if self.ack == Ack::Disk && self.replicas as usize > tailwind::service::MAX_DISK_REPLICAS {
            return Err(format!("Ack::Disk takes at most {} replicas", tailwind::service::MAX_DISK_REPLICAS));
        }
        if !(4096..=256 << 20).contains(&self.buffer_bytes) || self.buffer_bytes % 8 != 0 {
            return Err(format!("buffer_bytes {} is not a multiple of 8 from 4 KiB to 256 MiB", self.buffer_bytes));
        }
        // One region more than its buffers: the commit word's.
        if !(2..REGIONS_PER_LOG as u32).contains(&self.buffers) {
            return Err(format!("buffers {} is not between 2 and {}", self.buffers, REGIONS_PER_LOG - 1));
        }
        Ok(())
    }
}

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

/// FNV-1a, 64 bits: the same in every process and build.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// A well-mixed score of (log, node) (the SplitMix64 finalizer).
fn score(name_hash: u64, node: NodeId) -> u64 {
    let mut z = name_hash ^ (node.0 as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The replicas of log `name` in `view`: the `replicas` members that score
/// highest for it, highest (the primary) first (see the module docs).
pub fn members_of(name: &str, replicas: usize, view: &View) -> Vec<NodeId> {
    let h = fnv(name.as_bytes());
    let mut m: Vec<(u64, NodeId)> = view.members().iter().map(|n| (score(h, *n), *n)).collect();
    m.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    m.into_iter().take(replicas.max(1)).map(|(_, n)| n).collect()
}

/// The table's entry for a new log, `None` if the table has it already with
/// this QoS (`max_name`: the longest name, the table's).
pub(crate) fn create(logs: &[LogEntry], name: &str, qos: &LogQos, max_name: usize) -> Result<Option<LogEntry>, String> {
    if name.is_empty() || name.len() > max_name {
        return Err(format!("a log name of {} bytes (1 to {max_name})", name.len()));
    }
    qos.validate().map_err(|why| format!("log `{name}`: {why}"))?;
    if let Some(old) = logs.iter().find(|l| l.name == name) {
        return match old.qos == *qos {
            true => Ok(None),
            false => Err(format!("log `{name}` exists with {:?}, not {qos:?}", old.qos)),
        };
    }
    if logs.len() >= MAX_LOGS {
        return Err(format!("the domain has {MAX_LOGS} logs already"));
    }
    let number = fnv(name.as_bytes()) >> 1; // postcard-friendly and never all ones
    if let Some(other) = logs.iter().find(|l| l.number == number) {
        return Err(format!("log `{name}` hashes like log `{}`: pick another name", other.name));
    }
    Ok(Some(LogEntry { name: name.into(), number, qos: *qos }))
}
