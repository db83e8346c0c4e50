//! Reading a link and applying its frames, on whichever thread receives (the driver
//! or the fallback thread; one at a time per link, under the link's `rx` lock).

use super::seal::{self, Opening};
use super::{Shared, TcpPeer};
use crate::region::Region;
use crate::sync::atomic::Ordering;
use crate::sync::{lock, Arc};
use crate::transport::frame::{self, Frame};
use std::os::fd::AsFd;

/// What has been read from a link and not yet applied: `buf[start..end]` (on a
/// sealed link, the plaintext of the records opened so far).
#[derive(Debug)]
pub(super) struct Rx {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Writes applied so far on this link (what an Ack reports).
    applied: u64,
    /// A sealed link's records read and not yet opened.
    sealed: Option<Opening>,
    /// A large write whose data is being received straight into its region.
    direct: Option<Direct>,
}

/// A Write frame taken in place (plain links): its head was checked and the data
/// read with it applied; the rest of its data goes from the socket straight into the
/// region, with no frame buffer between.
#[derive(Debug)]
struct Direct {
    region: Arc<Region>,
    /// Where the next byte of data goes.
    at: usize,
    /// Data bytes still to come.
    left: usize,
    signaled: bool,
    wake: bool,
}

/// A Write frame with at least this much data still to come is taken in place.
const DIRECT_MIN: usize = 64 << 10;

/// The receive buffer's starting size; it grows to fit one frame larger than this.
const INITIAL_BUF: usize = 256 << 10;

/// Reads per link per call: enough to drain a busy socket, few enough that one link
/// cannot hold the driver away from its predicates.
const MAX_READS: usize = 4;

impl Rx {
    pub(super) fn new(sealed: Option<Opening>) -> Rx {
        Rx { buf: vec![0; INITIAL_BUF], start: 0, end: 0, applied: 0, sealed, direct: None }
    }

    /// Makes room at the end of the buffer: moves the unapplied bytes to the front,
    /// or grows the buffer for one frame larger than it (bounded by `MAX_BODY`).
    fn make_room(&mut self) -> Result<(), String> {
        if self.end < self.buf.len() {
            return Ok(());
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            return Ok(());
        }
        let need = match frame::body_len(&self.buf[..self.end]) {
            Ok(Some(n)) => n + 4,
            Ok(None) => self.buf.len() * 2,
            Err(e) => return Err(format!("bad frame: {e}")),
        };
        let len = need.max(self.buf.len() * 2).min(frame::MAX_BODY + 4);
        self.buf.resize(len, 0);
        Ok(())
    }
}

/// Appends a record's plaintext to the frames not yet applied (`buf[*start..*end]`),
/// growing the buffer if those are one frame and part of the next (at most a
/// largest frame and a record).
fn push_plain(buf: &mut Vec<u8>, start: &mut usize, end: &mut usize, plain: &[u8]) -> Result<(), String> {
    if buf.len() - *end < plain.len() {
        buf.copy_within(*start..*end, 0);
        *end -= *start;
        *start = 0;
        let need = *end + plain.len();
        let most = frame::MAX_BODY + 4 + seal::RECORD;
        if need > most {
            return Err(format!("bad frame: {need} bytes that make no whole frame"));
        }
        if need > buf.len() {
            buf.resize(need.max(buf.len() * 2).min(most), 0);
        }
    }
    buf[*end..*end + plain.len()].copy_from_slice(plain);
    *end += plain.len();
    Ok(())
}

/// Takes one opened record of a sealed link: `apply` applies the whole frames at
/// the front of the bytes it is given and returns how many bytes they took. With no
/// frame pending (`buf[*start..*end]` empty) the record's frames are applied where
/// it was opened and only a frame it cuts off is kept; otherwise the record
/// completes the pending frame in `buf` first.
fn take_record(
    buf: &mut Vec<u8>,
    start: &mut usize,
    end: &mut usize,
    plain: &[u8],
    mut apply: impl FnMut(&[u8]) -> Result<usize, String>,
) -> Result<(), String> {
    if *start == *end {
        let used = apply(plain)?;
        return push_plain(buf, start, end, &plain[used..]);
    }
    push_plain(buf, start, end, plain)?;
    *start += apply(&buf[*start..*end])?;
    if *start == *end {
        (*start, *end) = (0, 0);
    }
    Ok(())
}

/// What one call of `apply` found.
#[derive(Default)]
struct Applied {
    /// The last signaled write's number, to acknowledge.
    ack: Option<u64>,
    /// A write asked for the doorbell.
    ring: bool,
    /// Any write was applied.
    any: bool,
}

impl Shared {
    /// Reads what `p` sent without blocking and applies every complete frame; true if
    /// any write was applied. Returns at once if another thread is receiving from `p`
    /// or the link is cut. A bad frame, an end of stream or a socket error breaks the
    /// link ([`Shared::broken`]). `driver`: the caller flushes after this (its acks
    /// wait for that flush); otherwise acks are sent at once where the socket takes
    /// them.
    pub(super) fn receive(&self, p: &TcpPeer, driver: bool) -> bool {
        let Ok(mut rx) = p.rx.try_lock() else { return false };
        let mut done = Applied::default();
        let mut failed = None;
        for _ in 0..MAX_READS {
            if p.cut.load(Ordering::Acquire) {
                break;
            }
            let rx = &mut *rx;
            if rx.direct.is_some() {
                match self.receive_direct(p, rx, &mut done) {
                    Ok(true) => continue,
                    Ok(false) => break, // the socket had no more
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if let Some(o) = &mut rx.sealed {
                o.make_room();
            } else if let Err(e) = rx.make_room() {
                failed = Some(e);
                break;
            }
            let (buf, start, end) = match &mut rx.sealed {
                Some(o) => (&mut o.buf, &mut o.start, &mut o.end),
                None => (&mut rx.buf, &mut rx.start, &mut rx.end),
            };
            let room = buf.len() - *end;
            let n = match crate::sys::recv_dontwait(p.sock.as_fd(), &mut buf[*end..]) {
                Ok(0) if *end > *start => {
                    failed = Some(format!("connection closed inside a frame ({} bytes buffered)", *end - *start));
                    break;
                }
                Ok(0) => {
                    failed = Some("connection closed by peer".into());
                    break;
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    failed = Some(format!("read: {e}"));
                    break;
                }
            };
            *end += n;
            p.heard.fetch_add(1, Ordering::Relaxed);
            let applied = match rx.sealed.is_some() {
                true => self.open_and_apply(p, rx, &mut done),
                false => self.apply(p, rx, &mut done),
            };
            if let Err(e) = applied {
                failed = Some(e);
                break;
            }
            if n < room {
                break; // the socket had no more than this
            }
        }
        drop(rx);
        if let Some(seq) = done.ack {
            frame::encode_ack(&mut lock(&p.out).bytes, seq);
            p.dirty.store(true, Ordering::SeqCst);
            if !driver {
                self.send_now(p);
            }
        }
        if done.ring {
            self.doorbell.ring();
        }
        if let Some(reason) = failed {
            if p.cut.load(Ordering::Acquire) {
                tracing::debug!(node = %self.me, peer = %p.id, %reason, "receive stopped after cut-off");
            } else {
                self.broken(p, reason);
            }
        }
        done.any
    }

    /// Opens every complete record of a sealed link and applies the frames they
    /// complete, a record at a time. A record that starts with a frame (the sender
    /// cuts records at frames) is applied where it was opened; only a frame it cuts
    /// off is copied, to be completed by the next.
    fn open_and_apply(&self, p: &TcpPeer, rx: &mut Rx, done: &mut Applied) -> Result<(), String> {
        loop {
            let Rx { buf, start, end, sealed, applied, .. } = &mut *rx;
            let plain = match sealed.as_mut().expect("a sealed link").next() {
                Ok(Some(plain)) => plain,
                Ok(None) => return Ok(()),
                Err(e) => return Err(format!("bad record: {e}")),
            };
            take_record(buf, start, end, plain, |b| self.apply_frames(p, b, applied, done))?;
        }
    }

    /// Applies every complete frame in `rx`, in order, then takes a large Write frame
    /// left incomplete in place ([`Direct`]).
    fn apply(&self, p: &TcpPeer, rx: &mut Rx, done: &mut Applied) -> Result<(), String> {
        rx.start += self.apply_frames(p, &rx.buf[rx.start..rx.end], &mut rx.applied, done)?;
        if rx.start == rx.end {
            rx.start = 0;
            rx.end = 0;
            return Ok(());
        }
        self.go_direct(rx)
    }

    /// Takes the incomplete Write frame at the front of `rx`'s bytes in place if at
    /// least [`DIRECT_MIN`] of its data is still to come: its head is checked as a
    /// whole frame's would be, the data read so far is applied (a `Release` fence
    /// first, as for any landed write), and the rest will be received into the region.
    fn go_direct(&self, rx: &mut Rx) -> Result<(), String> {
        let pending = &rx.buf[rx.start..rx.end];
        let Some(h) = frame::write_head(pending).map_err(|e| format!("bad frame: {e}"))? else { return Ok(()) };
        let data = &pending[frame::WRITE_PREFIX..];
        if h.len - data.len() < DIRECT_MIN {
            return Ok(());
        }
        let Some(r) = self.region(h.region) else {
            return Err(format!("bad frame: write to unknown region {:?}", h.region));
        };
        r.check_range(h.offset, h.len as u64).map_err(|e| format!("bad frame: {e}"))?;
        let at = h.offset as usize;
        let whole = data.len() / 8 * 8;
        r.apply_write_bytes(at, &data[..whole]);
        if whole < data.len() {
            // The word's other bytes come from the socket, into the region itself.
            r.write_bytes(at + whole, &data[whole..]);
        }
        let (at, left) = (at + data.len(), h.len - data.len());
        rx.direct = Some(Direct { region: r.clone(), at, left, signaled: h.signaled, wake: h.wake });
        (rx.start, rx.end) = (0, 0);
        Ok(())
    }

    /// Receives more of the write taken in place; when its last byte is in, it counts
    /// as applied. Returns whether the socket may hold more.
    fn receive_direct(&self, p: &TcpPeer, rx: &mut Rx, done: &mut Applied) -> Result<bool, String> {
        let d = rx.direct.as_mut().expect("a write taken in place");
        let n = match d.region.recv_into(p.sock.as_fd(), d.at, d.left) {
            Ok(0) => return Err(format!("connection closed inside a frame ({} data bytes to come)", d.left)),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(true),
            Err(e) => return Err(format!("read: {e}")),
        };
        p.heard.fetch_add(1, Ordering::Relaxed);
        let more = n == d.left;
        d.at += n;
        d.left -= n;
        if d.left == 0 {
            rx.applied += 1;
            if d.signaled {
                done.ack = Some(rx.applied);
            }
            done.ring |= d.wake;
            done.any = true;
            rx.direct = None;
        }
        Ok(more)
    }

    /// Applies every complete frame at the front of `bytes`, in order; returns the
    /// bytes they took. `applied` counts the link's writes (what an Ack reports).
    fn apply_frames(&self, p: &TcpPeer, bytes: &[u8], applied: &mut u64, done: &mut Applied) -> Result<usize, String> {
        let mut at = 0;
        loop {
            let (f, used) = match frame::decode(&bytes[at..]) {
                Ok(None) => break,
                Err(e) => return Err(format!("bad frame: {e}")),
                Ok(Some(x)) => x,
            };
            match f {
                Frame::Write { region, offset, signaled, wake, data } => {
                    let Some(r) = self.region(region) else {
                        return Err(format!("bad frame: write to unknown region {region:?}"));
                    };
                    r.check_range(offset, data.len() as u64).map_err(|e| format!("bad frame: {e}"))?;
                    r.apply_write_bytes(offset as usize, data);
                    *applied += 1;
                    if signaled {
                        done.ack = Some(*applied);
                    }
                    done.ring |= wake;
                    done.any = true;
                }
                Frame::Ack { seq } => {
                    if seq > p.posted.load(Ordering::Acquire) {
                        return Err(format!("bad frame: ack of write {seq}, never posted"));
                    }
                    p.acked.fetch_max(seq, Ordering::SeqCst);
                    // Completions wake `wait_completed`'s waiters, not the doorbell:
                    // no predicate-thread work depends on them.
                    if p.ack_waiters.load(Ordering::SeqCst) > 0 {
                        // Under the lock, so a waiter between its check and its wait
                        // cannot miss this.
                        drop(lock(&p.ack_lock));
                        p.ack_cv.notify_all();
                    }
                }
                Frame::Hello(_) => return Err("bad frame: hello after setup".into()),
            }
            at += used;
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of 4-byte length prefixes and bodies, as `frame` lays them out.
    fn frames(sizes: &[usize]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut wire = Vec::new();
        let mut each = Vec::new();
        for (i, n) in sizes.iter().enumerate() {
            let body: Vec<u8> = (0..*n).map(|j| (i * 31 + j) as u8).collect();
            wire.extend_from_slice(&(*n as u32).to_le_bytes());
            wire.extend_from_slice(&body);
            each.push(body);
        }
        (wire, each)
    }

    /// Applies whole frames at the front of `b` into `got`; returns the bytes taken.
    fn apply_into(got: &mut Vec<Vec<u8>>, b: &[u8]) -> Result<usize, String> {
        let mut at = 0;
        while let Some(head) = b.get(at..at + 4) {
            let n = u32::from_le_bytes(head.try_into().unwrap()) as usize;
            let Some(body) = b.get(at + 4..at + 4 + n) else { break };
            got.push(body.to_vec());
            at += 4 + n;
        }
        Ok(at)
    }

    #[test]
    fn records_cut_anywhere_give_every_frame_once_in_order() {
        let (wire, want) = frames(&[1, 40, 0, 300, 7, 1000, 12, 3]);
        for cut in [1, 2, 3, 4, 5, 9, 44, 100, 333, 1000, wire.len()] {
            let (mut buf, mut start, mut end) = (vec![0u8; 16], 0, 0);
            let mut got = Vec::new();
            for record in wire.chunks(cut) {
                take_record(&mut buf, &mut start, &mut end, record, |b| apply_into(&mut got, b)).unwrap();
            }
            assert_eq!(got, want, "records of {cut} bytes");
            assert_eq!(start, end, "nothing left pending");
        }
    }

    proptest::proptest! {
        /// Frames of any sizes, cut into records anywhere: every frame once, in order.
        #[test]
        fn any_cuts_give_every_frame_once(
            sizes in proptest::collection::vec(0usize..200, 0..12),
            cuts in proptest::collection::vec(1usize..300, 1..40),
        ) {
            let (wire, want) = frames(&sizes);
            let (mut buf, mut start, mut end) = (Vec::new(), 0, 0);
            let mut got = Vec::new();
            let (mut at, mut k) = (0, 0);
            while at < wire.len() {
                let n = cuts[k % cuts.len()].min(wire.len() - at);
                take_record(&mut buf, &mut start, &mut end, &wire[at..at + n], |b| apply_into(&mut got, b)).unwrap();
                at += n;
                k += 1;
            }
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(start, end);
        }
    }

    #[test]
    fn records_that_hold_whole_frames_are_applied_in_place() {
        let (wire, want) = frames(&[10, 20, 30]);
        let (mut buf, mut start, mut end) = (Vec::new(), 0, 0);
        let mut got = Vec::new();
        take_record(&mut buf, &mut start, &mut end, &wire, |b| apply_into(&mut got, b)).unwrap();
        assert_eq!(got, want);
        assert!(buf.is_empty(), "no byte was copied");
    }
}
