//! Pages of the committed log for readers at any member, replicas or not: a
//! member that holds the log reads them with a tailing reader it keeps between
//! pages (so following the log costs each record once, not a scan of the open
//! buffer per page); one that does not asks the log's replicas
//! ([`wire::Msg::Read`]), the primary first. DDS clients follow a log this way.

use super::member::LogService;
use super::node::{lock, ReadError};
use super::wire::{self, Msg, Reply, MAX_PAGE};
use crate::replicate::Lsn;
use std::time::{Duration, Instant};

/// Tailing readers a member keeps for pages (the oldest goes first).
const KEPT: usize = 16;

impl LogService {
    /// The committed records from `from` on, about `max_bytes` of them (at least
    /// one if any is committed; at most 1 MiB unless one record is larger), in
    /// order: at a replica from its own copy, elsewhere from a replica (each asked
    /// within `within`). Empty if no record from `from` is committed yet. A record
    /// the log no longer holds is [`ReadError::Gap`]; no replica answering,
    /// [`ReadError::Unreachable`]. A member without a copy cannot read a record
    /// larger than a control frame (64 MiB) this way. A replica keeps up to 16
    /// such readers between pages (each with what it read ahead: up to a segment).
    pub fn read_page(&self, from: Lsn, max_bytes: usize, within: Duration) -> Result<Vec<(Lsn, Vec<u8>)>, ReadError> {
        let max = max_bytes.clamp(1, MAX_PAGE);
        if self.committed().is_some() {
            return self.local_page(from.0, max);
        }
        let group = self.shared.group().ok_or_else(|| ReadError::Unreachable("the member stopped".into()))?;
        let deadline = Instant::now() + within;
        let msg = wire::encode(self.shared.cfg.log, &Msg::Read { from: from.0, max: max as u32 });
        let mut why = String::from("the log has no members in this view");
        for m in self.members() {
            if m == self.shared.me {
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            let reply = group.request_service(super::wire::SERVICE, m, &msg, left).map_err(|e| e.to_string());
            match reply.and_then(|b| wire::decode::<Reply>(self.shared.cfg.log, &b)) {
                Ok(Reply::Records(r)) => return checked(from.0, r),
                Ok(Reply::Gap(n)) => return Err(ReadError::Gap(Lsn(n))),
                Ok(Reply::Failed(w)) => why = format!("{m}: {w}"),
                Ok(other) => why = format!("{m}: unexpected answer {other:?}"),
                Err(w) => why = format!("{m}: {w}"),
            }
        }
        Err(ReadError::Unreachable(why))
    }

    /// A replica's answer to [`Msg::Read`].
    pub(super) fn answer_read(&self, from: u64, max: u32) -> Reply {
        match self.committed() {
            None => Reply::Failed("this member does not hold the log".into()),
            Some(_) => match self.local_page(from, (max as usize).clamp(1, MAX_PAGE)) {
                Ok(r) => Reply::Records(r.into_iter().map(|(l, b)| (l.0, b)).collect()),
                Err(ReadError::Gap(l)) => Reply::Gap(l.0),
                Err(e) => Reply::Failed(e.to_string()),
            },
        }
    }

    fn local_page(&self, from: u64, max: usize) -> Result<Vec<(Lsn, Vec<u8>)>, ReadError> {
        let kept = {
            let mut pages = lock(&self.pages);
            pages.iter().position(|t| t.next_lsn().0 == from).map(|i| pages.remove(i))
        };
        let mut tail = kept.unwrap_or_else(|| self.subscribe(Lsn(from)));
        let (mut out, mut bytes) = (Vec::new(), 0);
        while bytes < max {
            match tail.next_within(Duration::ZERO) {
                Some(Ok((l, r))) => {
                    bytes += r.len() + 16;
                    out.push((l, r));
                }
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        let mut pages = lock(&self.pages);
        if pages.len() >= KEPT {
            pages.remove(0);
        }
        pages.push(tail);
        Ok(out)
    }
}

/// A replica's page as this member takes it: numbered on from `from`, one by one.
fn checked(from: u64, records: Vec<(u64, Vec<u8>)>) -> Result<Vec<(Lsn, Vec<u8>)>, ReadError> {
    let mut out = Vec::with_capacity(records.len());
    for (i, (lsn, bytes)) in records.into_iter().enumerate() {
        if lsn != from + i as u64 {
            return Err(ReadError::Unreachable(format!(
                "a replica sent record {lsn} where {} was due",
                from + i as u64
            )));
        }
        out.push((Lsn(lsn), bytes));
    }
    Ok(out)
}
