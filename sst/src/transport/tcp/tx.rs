//! The sending side of a link: its socket, the frames a flush took from the link's
//! queue and has not sent yet, and (on a sealed link) the cipher. Every send here
//! is non-blocking: what the socket does not take stays carried, in order, for the
//! next send.

use super::outbox::{Outbox, Sealed, Sent};
use super::seal::{Sealing, LEN, TAG};
use super::LinkCipher;
use crate::transport::frame::WRITE_PREFIX;
use std::io::{ErrorKind, IoSlice};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Sends never block and never raise SIGPIPE.
const FLAGS: libc::c_int = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;

#[derive(Debug)]
pub(super) struct Tx {
    stream: TcpStream,
    seal: Option<Sealing>,
    /// Frames taken from the queue; what is past `sent` is neither sent nor sealed
    /// yet (a sealed link's carry holds bytes alone).
    carry: Outbox,
    sent: Sent,
    /// Since when the socket has taken nothing while bytes waited for it.
    stalled: Option<Instant>,
}

/// Bytes a send moved: `Ok(0)` where the socket is full.
fn taken(res: std::io::Result<usize>) -> std::io::Result<usize> {
    match res {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Ok(0),
        other => other,
    }
}

impl Tx {
    pub(super) fn new(stream: TcpStream, cipher: Option<Box<dyn LinkCipher>>) -> Tx {
        Tx { stream, seal: cipher.map(Sealing::new), carry: Outbox::default(), sent: Sent::default(), stalled: None }
    }

    /// Whether every carried frame is sent or sealed (the next can be loaded).
    pub(super) fn drained(&self) -> bool {
        self.sent.done(&self.carry)
    }

    /// Whether nothing waits to be sent: no carried frame, no sealed byte.
    pub(super) fn idle(&self) -> bool {
        self.drained() && !self.seal.as_ref().is_some_and(Sealing::pending)
    }

    /// Carries `frames` (the carried frames must be drained); returns the old outbox,
    /// for reuse.
    pub(super) fn load(&mut self, frames: Outbox) -> Outbox {
        debug_assert!(self.drained());
        self.sent = Sent::default();
        std::mem::replace(&mut self.carry, frames)
    }

    /// Sends about `piece` carried bytes, as many as the socket takes without
    /// blocking (on a sealed link, sealed bytes an earlier send left go first, and
    /// records are sealed in place as they go). Returns whether any byte went out.
    pub(super) fn send_some(&mut self, piece: usize) -> std::io::Result<bool> {
        let Tx { stream, seal, carry, sent, .. } = self;
        let sock = socket2::SockRef::from(&*stream);
        let Some(s) = seal else {
            let n = taken(sent.send(carry, stream.as_fd(), piece))?;
            return Ok(n > 0);
        };
        let mut moved = false;
        if s.pending() {
            let n = taken(sock.send_with_flags(s.unsent(), FLAGS))?;
            s.sent(n);
            moved = n > 0;
            if s.pending() {
                return Ok(moved);
            }
        }
        let mut budget = piece;
        while budget > 0 {
            // Sealed: a record counts as taken whether or not the socket takes it now
            // (sealed twice it would be sent twice); what it does not take is kept.
            let (wire, sent_now) = match sent.sealed_next(carry) {
                Sealed::Done => break,
                Sealed::Bytes(end) => {
                    let (n, head, tag) = s.seal_in_place(&mut carry.bytes[sent.at..end]);
                    let record = &carry.bytes[sent.at..sent.at + n];
                    sent.at += n;
                    budget = budget.saturating_sub(n);
                    let parts = [&head[..], record, &tag[..]];
                    let got = taken(sock.send_vectored_with_flags(&parts.map(IoSlice::new), FLAGS))?;
                    if got < LEN + n + TAG {
                        s.keep(&parts, got);
                    }
                    (LEN + n + TAG, got)
                }
                Sealed::Span(_) => {
                    // This span and the ones right after it (a large write's frames),
                    // sealed from where they lie, go in one send.
                    while let Sealed::Span(data) = sent.sealed_next(carry) {
                        let prefix = &carry.bytes[sent.at..sent.at + WRITE_PREFIX];
                        if budget == 0 || !s.seal_split(prefix, data) {
                            break;
                        }
                        budget = budget.saturating_sub(data.len());
                        sent.sealed_span(carry);
                    }
                    let n = s.split().len();
                    let got = taken(sock.send_with_flags(s.split(), FLAGS))?;
                    s.take_split(got);
                    (n, got)
                }
            };
            moved |= sent_now > 0;
            if sent_now < wire {
                break;
            }
        }
        Ok(moved)
    }

    /// Sends what the socket takes of `bytes` without blocking, where nothing is
    /// carried; returns how many of `bytes` are taken: sent, or (on a sealed link)
    /// sealed and left for the next send.
    pub(super) fn send_dontwait(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        debug_assert!(self.drained());
        let sock = socket2::SockRef::from(&self.stream);
        let Some(s) = &mut self.seal else { return taken(sock.send_with_flags(bytes, FLAGS)) };
        let taken_here = if s.pending() {
            0 // sealed bytes are still waiting: these wait behind them, unsealed
        } else {
            let mut at = 0;
            while at < bytes.len() {
                at += s.append_record(&bytes[at..]);
            }
            bytes.len()
        };
        // What the socket does not take now stays sealed for the next send: `bytes`
        // count as taken either way (sealed twice, they would arrive twice).
        let n = taken(sock.send_with_flags(s.unsent(), FLAGS))?;
        s.sent(n);
        Ok(taken_here)
    }

    /// Notes that the socket took bytes.
    pub(super) fn moved(&mut self) {
        self.stalled = None;
    }

    /// Notes that the socket took nothing at `now`; returns for how long it has not.
    pub(super) fn stalled_for(&mut self, now: Instant) -> Duration {
        now.saturating_duration_since(*self.stalled.get_or_insert(now))
    }
}
