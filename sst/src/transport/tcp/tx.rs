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
    /// records are sealed as they go: frame bytes in place, a stable write's frames
    /// from their region). Returns whether any byte went out.
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
                    let got = taken(sock.send_with_flags(s.split(), FLAGS));
                    s.take_split(*got.as_ref().unwrap_or(&0));
                    (n, got?)
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::outbox::Outbox;
    use super::super::seal::{FRAME_DATA, LEN, TAG};
    use super::*;
    use crate::region::Region;
    use crate::sync::atomic::Ordering;
    use crate::sync::Arc;
    use crate::transport::frame::{encode_write_header, WriteFlags};
    use crate::transport::RegionId;
    use std::io::Read;

    /// A cipher that flips bits and tags each record with its number: enough to see
    /// records out of order, twice, or cut wrong.
    #[derive(Debug, Default)]
    struct Numbered(u8);
    impl LinkCipher for Numbered {
        fn seal(&mut self, _: &[u8], body: &mut [u8]) -> [u8; TAG] {
            body.iter_mut().for_each(|b| *b ^= 0x5a);
            self.0 = self.0.wrapping_add(1);
            [self.0; TAG]
        }
        fn open(&mut self, _: &[u8], body: &mut [u8], tag: &[u8; TAG]) -> bool {
            self.0 = self.0.wrapping_add(1);
            body.iter_mut().for_each(|b| *b ^= 0x5a);
            *tag == [self.0; TAG]
        }
    }

    /// Frame bytes and stable spans (a large write's frames between small frames), and
    /// the plaintext stream they stand for.
    fn outbox(region: &Arc<Region>) -> (Outbox, Vec<u8>) {
        let (mut o, mut want) = (Outbox::default(), Vec::new());
        let small = |o: &mut Outbox, want: &mut Vec<u8>, v: u8| {
            let frame = [&12u32.to_le_bytes()[..], &[v; 12]].concat();
            o.bytes.extend_from_slice(&frame);
            want.extend_from_slice(&frame);
        };
        let span = |o: &mut Outbox, want: &mut Vec<u8>, at: usize, n: usize| {
            let start = o.bytes.len();
            encode_write_header(&mut o.bytes, RegionId(0), at as u64, n, WriteFlags { signaled: false, quiet: false });
            want.extend_from_slice(&o.bytes[start..]);
            o.push_span(region, at, n);
            let mut data = vec![0u8; n];
            region.read_bytes(at, &mut data);
            want.extend(data);
        };
        small(&mut o, &mut want, 1);
        for i in 0..9 {
            span(&mut o, &mut want, i * FRAME_DATA, FRAME_DATA);
        }
        small(&mut o, &mut want, 2);
        span(&mut o, &mut want, 8, 60 << 10);
        span(&mut o, &mut want, 4096, 24);
        small(&mut o, &mut want, 3);
        (o, want)
    }

    #[test]
    fn a_sealed_link_sends_spans_sealed_from_their_region_through_a_small_socket() {
        let region = Arc::new(Region::new(1 << 20));
        for i in 0..(1 << 17) {
            region.store(i * 8, (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15), Ordering::Relaxed);
        }
        let (o, want) = outbox(&region);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        // Small buffers: the sends take part of what is offered, so records are kept
        // and finished by later sends.
        socket2::SockRef::from(&stream).set_send_buffer_size(64 << 10).unwrap();
        socket2::SockRef::from(&peer).set_recv_buffer_size(64 << 10).unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            peer.read_to_end(&mut got).unwrap();
            got
        });
        let mut tx = Tx::new(stream, Some(Box::new(Numbered::default())));
        tx.load(o);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut partial = 0;
        while !tx.idle() {
            assert!(Instant::now() < deadline, "the outbox was not sent");
            if !tx.send_some(256 << 10).unwrap() || !tx.idle() {
                partial += 1;
                std::thread::yield_now();
            }
        }
        drop(tx);
        let wire = reader.join().unwrap();
        assert!(partial > 0, "the socket never took only part");
        // Open the records in order: their plaintexts joined are the stream.
        let (mut open, mut plain, mut at) = (Numbered::default(), Vec::new(), 0);
        while at < wire.len() {
            let len = u32::from_le_bytes(wire[at..at + LEN].try_into().unwrap()) as usize;
            let mut body = wire[at + LEN..at + LEN + len].to_vec();
            let tag: [u8; TAG] = wire[at + LEN + len..at + LEN + len + TAG].try_into().unwrap();
            assert!(open.open(&wire[at..at + LEN], &mut body, &tag), "record at {at} opens in order");
            plain.extend(body);
            at += LEN + len + TAG;
        }
        assert_eq!(plain.len(), want.len());
        assert!(plain == want, "the opened records are the frames and the spans' data, in order");
    }
}
