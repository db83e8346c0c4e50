//! A member's answers to the other members' requests: state, segment fetches for
//! re-seeding, stores, and the backup pool's open/close.

use super::*;

impl Shared {
    /// Answers another member's request (the service answers reads itself:
    /// [`crate::service::LogService::answer`]).
    pub fn handle(&self, m: Msg) -> Reply {
        match m {
            Msg::Append { records, tag, expect } => {
                let refs: Vec<&[u8]> = records.iter().map(|r| r.as_slice()).collect();
                let deadline = Instant::now() + self.cfg.append_timeout;
                let tag = tag.map(|(producer, seq)| crate::format::Tag { producer, seq });
                let opts = super::AppendOpts { tag, expect };
                lock(&self.others).busy += 1;
                let done = |r: Option<&[Lsn]>| {
                    let mut o = lock(&self.others);
                    o.busy = o.busy.saturating_sub(1);
                    o.last = o.last.max(r.and_then(|l| l.iter().max().copied()));
                };
                loop {
                    if let Some(r) = self.append_here(&refs, opts, deadline) {
                        done(r.as_deref().ok());
                        return match r {
                            Ok(l) => Reply::Appended(l.into_iter().map(|l| l.0).collect()),
                            Err(AppendError::Conflict { next }) => Reply::Conflict(next.0),
                            Err(AppendError::Sequence(why)) => Reply::Sequence(why),
                            Err(e) => Reply::Failed(e.to_string()),
                        };
                    }
                    let mut st = lock(&self.st);
                    if st.stopped.is_some() || Instant::now() >= deadline || st.members.first() != Some(&self.me) {
                        done(None);
                        return Reply::Failed("this member is not the primary".into());
                    }
                    st = self.cv.wait_timeout(st, Duration::from_millis(20)).unwrap_or_else(|p| p.into_inner()).0;
                    drop(st);
                }
            }
            Msg::Fetch { id, offset } => self.fetch(id, offset),
            Msg::Read { .. } => Reply::Failed("reads go to the log's service".into()),
            Msg::Committed => Reply::CommitPoint(self.committed().map(|(c, _)| c)),
            Msg::Trim { before } => match self.trim_here(before) {
                Ok(n) => Reply::Trimmed(n as u64),
                Err(why) => Reply::Failed(why),
            },
            Msg::Ready { view } => {
                let mut st = lock(&self.st);
                tracing::debug!(node = %self.me, view, check = ?st.check(view), "told the log is ready");
                if let Err(r) = st.check(view) {
                    return r;
                }
                st.ready = true;
                self.cv.notify_all();
                Reply::Done
            }
            Msg::Pool { view, req } => {
                if let Err(r) = lock(&self.st).check(view) {
                    return r;
                }
                let close = match &req {
                    Request::Close { id, records, .. } => Some((id.segment, *records)),
                    Request::Open { .. } => None,
                };
                let resp = self.pool.request(req);
                let mut st = lock(&self.st);
                match (&resp, close) {
                    (Response::Closed, Some((base, n))) => {
                        st.segments.insert(base, n);
                    }
                    (Response::Opened, None) if opened_makes_ready(st.check(view).is_ok(), &st.members, self.me) => {
                        st.ready = true;
                        self.cv.notify_all();
                    }
                    _ => {}
                }
                Reply::Pool(resp)
            }
            Msg::State { view } => {
                let st = lock(&self.st);
                if let Err(r) = st.check(view) {
                    return r;
                }
                Reply::State {
                    segments: st.segments.iter().map(|(b, c)| Held { base: *b, count: *c }).collect(),
                    pending: st.pending.as_ref().map(|p| Held { base: p.id.segment, count: p.count }),
                    pending_disk: st.pending.as_ref().is_some_and(|p| p.from_disk),
                    trimmed: st.trimmed,
                }
            }
            Msg::Commit { view, id, count } => {
                let mut st = lock(&self.st);
                if let Err(r) = st.check(view) {
                    return r;
                }
                if id.log != self.cfg.log {
                    return Reply::Failed(format!("segment {id:?} is not of log {}", self.cfg.log));
                }
                match st.pending.take() {
                    Some(p) if p.id == id && count <= p.count => {
                        if count < p.count || count == 0 {
                            // Ack::Disk: the synced file holds no record the log drops.
                            self.cut_open_file(id.segment, end_of(&p.bytes, count));
                        }
                        if count > 0 {
                            let end = end_of(&p.bytes, count);
                            self.pool.flush_recovered(id, &p.bytes[..end]);
                            st.segments.insert(id.segment, count);
                        }
                        Reply::Done
                    }
                    other => {
                        let why = match &other {
                            Some(p) if p.id == id => format!("segment {id:?}: {} records held, {count} asked", p.count),
                            _ if st.segments.get(&id.segment) == Some(&count) => String::new(), // a retry
                            _ => format!("segment {id:?} is not the one recovered here"),
                        };
                        st.pending = other;
                        match why.is_empty() {
                            true => Reply::Done,
                            false => Reply::Failed(why),
                        }
                    }
                }
            }
            Msg::Store { view, id, offset, total, count, bytes } => self.store(view, id, offset, total, count, bytes),
        }
    }

    /// A page of a committed segment's file.
    fn fetch(&self, id: SegmentId, offset: u64) -> Reply {
        if id.log != self.cfg.log || !lock(&self.st).segments.contains_key(&id.segment) {
            return Reply::Failed(format!("segment {id:?} is not held here"));
        }
        let path = self.path(id.segment);
        if !path.exists() && !self.pool.wait_flushed(self.cfg.request_timeout) {
            return Reply::Failed(format!("segment {id:?} is not on disk yet"));
        }
        match std::fs::read(&path) {
            Err(e) => Reply::Failed(format!("{}: {e}", path.display())),
            Ok(b) => {
                let from = (offset as usize).min(b.len());
                let to = (from + MAX_PAGE).min(b.len());
                Reply::Page { total: b.len() as u64, bytes: b[from..to].to_vec() }
            }
        }
    }

    /// Takes a page of a segment this member lacks; the last page is verified
    /// (it must scan to its end with `count` records) and the segment flushed.
    fn store(&self, view: u64, id: SegmentId, offset: u64, total: u64, count: u64, bytes: Vec<u8>) -> Reply {
        let mut st = lock(&self.st);
        if let Err(r) = st.check(view) {
            return r;
        }
        if id.log != self.cfg.log || total as usize > self.cfg.buffer || bytes.len() > MAX_PAGE {
            return Reply::Failed(format!("segment {id:?}: {total} bytes do not fit a buffer here"));
        }
        if st.segments.get(&id.segment) == Some(&count) {
            return Reply::Done; // held already (a retry)
        }
        if !st.seeding.contains_key(&id.segment) && st.seeding.len() >= MAX_SEEDING {
            return Reply::Failed(format!("{MAX_SEEDING} segments are being re-seeded here already"));
        }
        let buf = st.seeding.entry(id.segment).or_default();
        if offset as usize != buf.len() || buf.len() + bytes.len() > total as usize {
            let have = buf.len();
            st.seeding.remove(&id.segment);
            return Reply::Failed(format!("segment {id:?}: page at {offset}, expected {have} (of {total})"));
        }
        buf.extend_from_slice(&bytes);
        if buf.len() < total as usize {
            return Reply::Done;
        }
        let all = st.seeding.remove(&id.segment).unwrap_or_default();
        let r = scan(&all);
        if r.end.0 != all.len() || r.records.len() as u64 != count {
            return Reply::Failed(format!(
                "segment {id:?} verifies to byte {} ({} records), not {total} ({count})",
                r.end.0,
                r.records.len()
            ));
        }
        self.pool.flush_recovered(id, &all);
        st.segments.insert(id.segment, count);
        Reply::Done
    }
}

/// Whether a buffer opened by the primary's pool request in the running view
/// (`in_view`) tells this member that the log takes appends: at a backup, yes. Not
/// at the primary itself (the first of `members`), which opens its own buffer while
/// it recovers: it is ready once it took over (`become_primary`), or `primary()`
/// and `wait_for_primary` there would name it before it takes appends.
fn opened_makes_ready(in_view: bool, members: &[NodeId], me: NodeId) -> bool {
    in_view && members.first() != Some(&me)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_backup_is_made_ready_by_an_opened_buffer() {
        let members = [NodeId(4), NodeId(1), NodeId(2)];
        assert!(opened_makes_ready(true, &members, NodeId(1)));
        assert!(!opened_makes_ready(true, &members, NodeId(4)), "the primary waits for its takeover");
        assert!(!opened_makes_ready(false, &members, NodeId(1)), "not for another view");
    }
}
