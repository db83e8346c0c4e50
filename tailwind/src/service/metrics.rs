//! A log member's figures: what it appended as the primary, what it holds, and
//! (at the primary) how far each replica's commit point is behind its own.

use super::node::lock;
use super::{wire, LogService, Lsn};
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::transport::NodeId;
use std::time::Duration;

/// What one member of a log has done and holds ([`LogService::metrics`]). Rates
/// come from two readings: appends/s is the change of `appended` over the time
/// between them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogMetrics {
    /// Records this member acknowledged as the primary (all its views).
    pub appended: u64,
    /// Append batches (one write per backup each) among them.
    pub batches: u64,
    /// Data bytes among them.
    pub bytes: u64,
    /// Its commit point (`None`: it does not hold the log).
    pub committed: Option<Lsn>,
    /// Committed segments it holds.
    pub segments: usize,
    /// Their records.
    pub segment_records: u64,
    /// Bytes of its segment files on disk.
    pub segment_bytes: u64,
    /// Its trim floor.
    pub trimmed: Lsn,
    /// Whether it is the primary now.
    pub primary: bool,
}

impl LogService {
    /// This member's figures now.
    pub fn metrics(&self) -> LogMetrics {
        let s = &self.shared;
        let committed = s.committed().map(|(c, _)| Lsn(c));
        let primary = lock(&s.prim).is_some();
        let st = lock(&s.st);
        let segment_bytes = st
            .segments
            .keys()
            .filter_map(|b| std::fs::metadata(crate::backup::segment_path(&s.cfg.dir, s.seg(*b))).ok())
            .map(|m| m.len())
            .sum();
        LogMetrics {
            appended: s.counts[0].load(Ordering::Relaxed),
            batches: s.counts[1].load(Ordering::Relaxed),
            bytes: s.counts[2].load(Ordering::Relaxed),
            committed,
            segments: st.segments.len(),
            segment_records: st.segments.values().sum(),
            segment_bytes,
            trimmed: Lsn(st.trimmed),
            primary,
        }
    }

    /// At any member: how many records each of the log's members' commit point is
    /// behind this member's (asked over the control plane, each within `within`;
    /// a member that does not answer is left out). At the primary, a backup's lag
    /// is what a reader there does not see yet.
    pub fn replica_lag(&self, within: Duration) -> Vec<(NodeId, u64)> {
        let s = &self.shared;
        let mine = s.committed().map_or(0, |(c, _)| c);
        let members = lock(&s.st).members.clone();
        let Some(group) = s.group() else { return Vec::new() };
        let mut out = Vec::new();
        for m in members {
            let theirs = if m == s.me {
                Some(mine)
            } else {
                let frame = wire::encode(s.cfg.log, &wire::Msg::Committed);
                match group
                    .request_service(super::wire::SERVICE, m, &frame, within)
                    .ok()
                    .map(|b| wire::decode::<wire::Reply>(s.cfg.log, &b))
                {
                    Some(Ok(wire::Reply::CommitPoint(c))) => c,
                    _ => None,
                }
            };
            if let Some(c) = theirs {
                out.push((m, mine.saturating_sub(c)));
            }
        }
        out
    }
}
