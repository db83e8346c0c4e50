//! Sending what is queued: the flush (see the module docs of `tcp`, "Sending") and
//! the receivers' sends of acks.

use super::{outbox::Outbox, tx::Tx, Shared, TcpPeer};
use crate::sync::atomic::Ordering;
use crate::sync::{lock, MutexGuard};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// The most a flush sends to one peer before it turns to the next.
const FLUSH_PIECE: usize = 256 << 10;

/// How long a driver's flush may go on before it returns to the driver's pass (its
/// predicates, its heartbeat, its receiving); what is left is carried to the next.
pub(super) const FLUSH_BUDGET: Duration = Duration::from_millis(2);

/// The longest wait for a full socket before its stall is looked at again (a flush
/// without a budget).
const STALL_CHECK: Duration = Duration::from_millis(100);

/// A peer a flush sends to, holding its socket.
struct Sending<'a> {
    p: &'a TcpPeer,
    tx: MutexGuard<'a, Tx>,
}

impl TcpPeer {
    /// What is queued to send, if anything (the caller holds `tx`).
    fn take_out(&self) -> Option<Outbox> {
        if !self.dirty.swap(false, Ordering::SeqCst) {
            return None;
        }
        Some(std::mem::take(&mut *lock(&self.out))).filter(|b| !b.is_empty())
    }

    /// Gives a sent buffer back so that the next posts reuse its capacity.
    fn give_back(&self, mut sent: Outbox) {
        let mut out = lock(&self.out);
        if out.is_empty() {
            sent.clear();
            *out = sent;
        }
    }

    /// Carries what is queued, if what was carried is drained.
    fn load_queued(&self, tx: &mut Tx) {
        if tx.drained() {
            if let Some(bytes) = self.take_out() {
                let old = tx.load(bytes);
                self.give_back(old);
            }
        }
    }
}

impl Shared {
    /// Sends what is queued for `p` if no flush is sending, nothing is carried and
    /// the socket takes it without blocking; the rest stays queued, in order, for
    /// the next flush.
    pub(super) fn send_now(&self, p: &TcpPeer) {
        let Ok(mut tx) = p.tx.try_lock() else { return }; // a flush is sending: it or the next one takes it
        if p.cut.load(Ordering::Acquire) || !tx.drained() {
            return;
        }
        let mut out = lock(&p.out);
        if out.is_empty() || out.has_spans() {
            return; // spans are the flush's to send
        }
        match tx.send_dontwait(&out.bytes) {
            Ok(n) => {
                out.bytes.drain(..n);
                // Sealed bytes the socket did not take are sent by the next flush.
                if out.is_empty() && tx.idle() {
                    p.dirty.store(false, Ordering::Release);
                }
            }
            Err(e) => {
                drop(out);
                drop(tx);
                self.broken(p, format!("send: {e}"));
            }
        }
    }

    /// Sends what is queued for every peer, round robin a piece at a time, never
    /// blocking on one socket while another takes bytes. With a driver attached it
    /// stops after [`FLUSH_BUDGET`] and carries the rest; without one (the transport
    /// used on its own) nobody else would send it, so it goes on until all is sent.
    /// A peer whose socket takes nothing for the write timeout is cut.
    pub(super) fn flush(&self) {
        self.flush_within(self.driving.driven().then_some(FLUSH_BUDGET));
    }

    /// Like `flush`, with the budget given: `None` goes on until all is sent.
    pub(super) fn flush_within(&self, budget: Option<Duration>) {
        let mut dirty = self.peers.iter().filter(|p| p.dirty.load(Ordering::Acquire) && !p.cut.load(Ordering::Relaxed));
        if let (Some(p), None) = (dirty.next(), dirty.next()) {
            // One peer to send to (two members; a pass's acks): what is queued
            // usually fits its socket at once, with no list of sockets built.
            let mut tx = lock(&p.tx);
            p.load_queued(&mut tx);
            if !tx.idle() {
                match tx.send_some(usize::MAX) {
                    Ok(true) => tx.moved(),
                    Ok(false) => {}
                    Err(e) => {
                        drop(tx);
                        return self.broken(p, format!("send: {e}"));
                    }
                }
            }
            // Done, unless the socket was full or a receiver queued an ack meanwhile.
            if tx.idle() && !p.dirty.load(Ordering::Acquire) {
                return;
            }
            drop(tx);
            p.dirty.store(true, Ordering::Release);
        }
        // Take the sockets in peer order (the only place that takes more than one
        // send lock, so two flushes cannot deadlock).
        let mut live: Vec<Sending<'_>> = Vec::new();
        for p in &self.peers {
            if !p.dirty.load(Ordering::Acquire) || p.cut.load(Ordering::Relaxed) {
                continue;
            }
            let mut tx = lock(&p.tx);
            p.load_queued(&mut tx);
            if !tx.idle() {
                live.push(Sending { p, tx });
            }
        }
        let mut end: Option<Instant> = None;
        while !live.is_empty() {
            let mut moved = false;
            let mut now = None;
            let mut k = 0;
            while k < live.len() {
                let s = &mut live[k];
                let cut = match s.tx.send_some(FLUSH_PIECE) {
                    Ok(true) => {
                        s.tx.moved();
                        moved = true;
                        None
                    }
                    Ok(false) => {
                        let d = s.tx.stalled_for(*now.get_or_insert_with(Instant::now));
                        (d >= self.write_timeout).then(|| format!("send: the socket took nothing for {d:?}"))
                    }
                    Err(e) => Some(format!("send: {e}")),
                };
                if let Some(reason) = cut {
                    let p = live.swap_remove(k).p;
                    self.broken(p, reason);
                    continue;
                }
                s.p.load_queued(&mut s.tx);
                if s.tx.idle() {
                    live.swap_remove(k);
                    continue;
                }
                k += 1;
            }
            if live.is_empty() {
                break;
            }
            let now = now.unwrap_or_else(Instant::now);
            let end = budget.map(|b| *end.get_or_insert(now + b));
            if end.is_some_and(|e| now >= e) {
                break;
            }
            if !moved {
                // Every socket is full: wait until one takes bytes (or the budget ends).
                let fds: Vec<_> = live.iter().map(|s| s.p.sock.as_raw_fd()).collect();
                let wait = end.map_or(STALL_CHECK, |e| e.saturating_duration_since(now).min(STALL_CHECK));
                crate::sys::wait_for(&[], &fds, Some(wait));
            }
        }
        // What is left stays carried, its peer marked for the next flush.
        for s in live {
            s.p.dirty.store(true, Ordering::Release);
        }
    }
}
