//! The pass: what one sweep over the predicates does, on whichever thread holds
//! the node's working set (the predicate thread, or a waiting application thread
//! that borrowed it; see `lend`).

use super::{AtomicStats, Entry, Inner, Kind, OnEvent, Stats};
use crate::sync::atomic::Ordering;
use crate::sync::lock;
use crate::table::Pushes;
use crate::transport::{PeerEvent, WriteOp};
use std::time::Instant;

/// The node's working set: one holder at a time runs the passes with it (the
/// predicate thread, or a borrower; see `lend`).
pub(super) struct Worker<S> {
    entries: Vec<Entry<S>>,
    handlers: Vec<OnEvent<S>>,
    pushes: Pushes,
    events: Vec<PeerEvent>,
    pub(super) local: Stats,
    /// When the transport's liveness probe is next due.
    next_probe: Instant,
}

impl<S> Worker<S> {
    /// An empty working set whose first liveness probe is due at `first_probe`.
    pub(super) fn new(first_probe: Instant) -> Self {
        Worker {
            entries: Vec::new(),
            handlers: Vec::new(),
            pushes: Pushes::default(),
            events: Vec::new(),
            local: Stats::default(),
            next_probe: first_probe,
        }
    }

    /// Runs the transport's liveness probe if it is due at `now`.
    pub(super) fn probe(&mut self, inner: &Inner<S>, now: Instant, every: std::time::Duration) {
        if now >= self.next_probe {
            inner.transport.check_peers();
            self.next_probe = now + every;
        }
    }

    /// When the probe is next due.
    pub(super) fn next_probe(&self) -> Instant {
        self.next_probe
    }

    fn take_incoming(&mut self, inner: &Inner<S>) {
        let mut inc = lock(&inner.incoming);
        self.entries.append(&mut inc.add);
        self.handlers.append(&mut inc.handlers);
        let removed = std::mem::take(&mut inc.remove);
        drop(inc);
        if !removed.is_empty() {
            self.entries.retain(|e| !removed.contains(&e.id));
        }
    }

    /// One pass; returns true if any trigger ran. `force`: look at paced
    /// conditions whether due or not (the pass before parking).
    pub(super) fn pass(&mut self, inner: &Inner<S>, now: Instant, force: bool) -> bool {
        if inner.has_incoming.load(Ordering::Acquire) {
            inner.has_incoming.store(false, Ordering::Relaxed);
            self.take_incoming(inner);
        }
        // Peers' writes that arrived as bytes (`tcp`) are applied here, on this
        // thread, before the predicates look: no hand-off to another thread.
        inner.transport.poll_receive();
        inner.transport.drain_events(&mut self.events);
        let mut fired = 0u64;
        let mut done_once = false;
        {
            let mut st = lock(&inner.state);
            for ev in self.events.drain(..) {
                for h in &mut self.handlers {
                    h(&mut st, &ev, &mut self.pushes);
                    fired += 1;
                }
            }
            for e in &mut self.entries {
                // A paced condition that is not due counts as not holding.
                if let (Some((period, due)), Some(_)) = (&mut e.timer, &e.cond) {
                    let d = due.get_or_insert(now);
                    if !force && now < *d {
                        continue;
                    }
                    *d = now + *period;
                }
                let run = match (&mut e.timer, &mut e.cond) {
                    (_, Some(cond)) => {
                        let v = cond(&st);
                        let run = match e.kind {
                            Kind::Recurrent => v,
                            Kind::OneTime => v && !e.last,
                            Kind::Transition => v && !e.last,
                        };
                        if e.kind == Kind::OneTime {
                            e.last |= v;
                            done_once |= v;
                        } else {
                            e.last = v;
                        }
                        run
                    }
                    (Some((period, due)), None) => {
                        let d = due.get_or_insert(now);
                        if now >= *d {
                            *d = now + *period;
                            true
                        } else {
                            false
                        }
                    }
                    (None, None) => false,
                };
                if run {
                    (e.action)(&mut st, &mut self.pushes);
                    fired += 1;
                }
            }
        }
        if done_once {
            self.entries.retain(|e| !(e.kind == Kind::OneTime && e.last && e.cond.is_some()));
        }
        // The state lock is released: now post.
        let t = &inner.transport;
        for p in self.pushes.drain() {
            let op = WriteOp { wake: p.wake, stable: p.stable, ..WriteOp::same(p.region, p.offset, p.len) };
            if let Some(at) = p.publish_at {
                let (ok, err) = t.publish(WriteOp { dst_offset: at, ..op }, &mut p.targets());
                self.local.writes += ok;
                self.local.write_errors += err;
                self.local.bytes_written += p.len as u64;
                continue;
            }
            for peer in p.targets() {
                match t.post_write(peer, op) {
                    Ok(_) => {
                        self.local.writes += 1;
                        self.local.bytes_written += p.len as u64;
                    }
                    Err(_) => self.local.write_errors += 1,
                }
            }
        }
        t.flush();
        self.local.passes += 1;
        self.local.fired += fired;
        fired > 0
    }

    pub(super) fn next_due(&self) -> Option<Instant> {
        // Timers only: a paced condition is looked at before parking instead.
        self.entries.iter().filter(|e| e.cond.is_none()).filter_map(|e| e.timer.and_then(|(_, d)| d)).min()
    }

    pub(super) fn publish(&mut self, s: &AtomicStats) {
        s.passes.fetch_add(std::mem::take(&mut self.local.passes), Ordering::Relaxed);
        s.fired.fetch_add(std::mem::take(&mut self.local.fired), Ordering::Relaxed);
        s.parks.fetch_add(std::mem::take(&mut self.local.parks), Ordering::Relaxed);
        s.writes.fetch_add(std::mem::take(&mut self.local.writes), Ordering::Relaxed);
        s.write_errors.fetch_add(std::mem::take(&mut self.local.write_errors), Ordering::Relaxed);
        s.bytes_written.fetch_add(std::mem::take(&mut self.local.bytes_written), Ordering::Relaxed);
        s.yields.fetch_add(std::mem::take(&mut self.local.yields), Ordering::Relaxed);
        s.busy_yields.fetch_add(std::mem::take(&mut self.local.busy_yields), Ordering::Relaxed);
    }
}
