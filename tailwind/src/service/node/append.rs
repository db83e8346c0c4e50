//! The primary's append path: records into the open segment and its backups,
//! rotation to the next segment, and taking over as primary after recovery.

use super::dedupe::Check;
use super::*;
use crate::format::Tag;

/// How an append is made: tagged for a safe retry, or only if the log's next
/// record number is the expected one.
#[derive(Debug, Clone, Copy, Default)]
pub struct AppendOpts {
    pub tag: Option<Tag>,
    pub expect: Option<u64>,
}

impl Shared {
    /// Appends at this member if it is the primary; `None` if it is not (or not yet).
    pub fn append_local(
        &self,
        records: &[&[u8]],
        opts: AppendOpts,
        deadline: Instant,
    ) -> Option<Result<Vec<Lsn>, AppendError>> {
        let mut p = lock(&self.prim);
        let pr = p.as_mut()?;
        if self.fence.load(Ordering::SeqCst) {
            // The view is ending: this primary takes no more appends; the caller
            // waits for the next view's (and gives `view_ends` the lock it waits for).
            return None;
        }
        if opts.expect.is_some_and(|e| e != pr.rep.next_lsn().0) {
            return Some(Err(AppendError::Conflict { next: pr.rep.next_lsn() }));
        }
        if let Some(t) = opts.tag {
            match lock(&self.dedupe).check(t, records.len()) {
                Check::New => {}
                Check::Done(lsns) => return Some(Ok(lsns)),
                Check::Bad(why) => return Some(Err(AppendError::Sequence(why))),
            }
        }
        loop {
            match pr.rep.append_batch_tagged(records, opts.tag) {
                Err(AppendError::Format(FormatError::Full { .. })) => {
                    if let Err(e) = self.rotate(pr, deadline) {
                        return Some(Err(e));
                    }
                }
                r => {
                    if let Ok(lsns) = &r {
                        self.counts[0].fetch_add(lsns.len() as u64, Ordering::Relaxed);
                        self.counts[1].fetch_add(1, Ordering::Relaxed);
                        let bytes: usize = records.iter().map(|r| r.len()).sum();
                        self.counts[2].fetch_add(bytes as u64, Ordering::Relaxed);
                        let mut d = lock(&self.dedupe);
                        if let Some(t) = opts.tag {
                            for (i, l) in lsns.iter().enumerate() {
                                d.note(Tag { producer: t.producer, seq: t.seq + i as u64 }, l.0);
                            }
                        }
                        // Noted up to here: a failed append after this may be in the
                        // log, and the next recovery reads the log from here.
                        d.covered = pr.rep.next_lsn().0;
                    }
                    if r.is_ok() && self.tail_waiters.load(Ordering::Relaxed) > 0 {
                        drop(p);
                        self.cv.notify_all();
                    }
                    return Some(r);
                }
            }
        }
    }

    /// The open buffer is full: close it everywhere and open the next.
    fn rotate(&self, pr: &mut Primary, deadline: Instant) -> Result<(), AppendError> {
        let next = pr.rep.next_lsn().0;
        let count = next - pr.base;
        let close = Request::Close { id: self.seg(pr.base), end: pr.rep.end().0 as u64, records: count };
        self.pool_all(pr.view, &pr.backups, close, deadline)?;
        lock(&self.st).segments.insert(pr.base, count);
        let slot = (pr.slot + 1) % self.cfg.buffers;
        self.pool_all(pr.view, &pr.backups, Request::Open { id: self.seg(next), slot: slot as u32 }, deadline)?;
        pr.rep = self.replicator(&pr.t, slot, &pr.backups, next)?;
        pr.base = next;
        pr.slot = slot;
        Ok(())
    }

    pub fn replicator(
        &self,
        t: &Arc<dyn Transport>,
        slot: usize,
        backups: &[NodeId],
        first: u64,
    ) -> Result<Replicator, AppendError> {
        let rep = Replicator::new(t.clone(), self.region(slot), backups.to_vec(), self.cfg.append_timeout)?
            .starting_at(Lsn(first))
            .with_fence(self.fence.clone());
        // With Ack::Disk the commit point goes up once appends are synced.
        Ok(if self.disk() { rep } else { rep.with_commit_word(self.commit_region()) })
    }

    /// Appends here if this member is the primary (`None` if not), waiting for
    /// the disk with `Ack::Disk` (outside the primary's lock: appends meanwhile
    /// share the next sync).
    pub fn append_here(
        &self,
        records: &[&[u8]],
        opts: AppendOpts,
        deadline: Instant,
    ) -> Option<Result<Vec<Lsn>, AppendError>> {
        let r = self.append_local(records, opts, deadline)?;
        if !self.disk() {
            return Some(r);
        }
        Some(r.and_then(|lsns| {
            let end = lsns.iter().map(|l| l.0 + 1).max().unwrap_or(0);
            self.wait_durable(end, deadline).map(|_| lsns)
        }))
    }

    /// Sends a buffer request to every backup, then to this member's own pool;
    /// retries refusals (a buffer still flushing) until `deadline`.
    pub fn pool_all(&self, view: u64, backups: &[NodeId], req: Request, deadline: Instant) -> Result<(), AppendError> {
        let group = self.group().ok_or_else(|| AppendError::Stopped("the group is gone".into()))?;
        for &b in backups.iter().chain(std::iter::once(&self.me)) {
            let mut pause = Duration::from_micros(200);
            loop {
                if self.fence.load(Ordering::SeqCst) {
                    return Err(AppendError::ViewChanged);
                }
                let reply = if b == self.me {
                    self.handle(Msg::Pool { view, req: req.clone() })
                } else {
                    let frame = wire::encode(self.cfg.log, &Msg::Pool { view, req: req.clone() });
                    match group.request_service(crate::service::wire::SERVICE, b, &frame, self.cfg.request_timeout) {
                        Ok(body) => wire::decode::<Reply>(self.cfg.log, &body).unwrap_or_else(Reply::Failed),
                        Err(e) => Reply::Failed(e.to_string()),
                    }
                };
                let why = match reply {
                    Reply::Pool(Response::Opened) | Reply::Pool(Response::Closed) => break,
                    Reply::Stale => return Err(AppendError::ViewChanged),
                    Reply::Pool(Response::Refused(why)) => why,
                    Reply::NotYet => "not in this view yet".into(),
                    Reply::Pool(Response::Error(why)) | Reply::Failed(why) => {
                        return Err(AppendError::Backup { node: b, why })
                    }
                    other => return Err(AppendError::Backup { node: b, why: format!("unexpected answer {other:?}") }),
                };
                if Instant::now() >= deadline {
                    return Err(AppendError::Unavailable(format!("{b}: {why}")));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Makes this member the primary of `view` with a recovered log, if that view
    /// still runs; then tells the application.
    pub fn become_primary(&self, pr: Primary, rec: Recovery) -> bool {
        {
            let mut p = lock(&self.prim);
            let mut st = lock(&self.st);
            if !(st.running() && st.view_id() == Some(pr.view)) || st.stopped.is_some() {
                return false;
            }
            *p = Some(pr);
            st.ready = true;
        }
        self.cv.notify_all();
        if let Some(f) = lock(&self.on_recovered).as_mut() {
            f(&rec);
        }
        true
    }
}
