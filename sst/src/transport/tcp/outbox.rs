//! What a link has to send: frame bytes, and the data of large stable writes left
//! where they lie in their region (spans), each to be sent at its place among the
//! bytes. A span's data goes from the region to the socket in one copy, the kernel's
//! (see [`crate::transport::WriteOp::stable`]); everything else is copied into the
//! bytes when it is posted.

use crate::region::Region;
use crate::sync::Arc;
use crate::transport::frame::WRITE_PREFIX;

/// An iovec of nothing, to fill arrays of them with.
pub(super) const EMPTY: libc::iovec = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };

/// Most pieces (frame bytes, spans) one send takes.
const PIECES: usize = 16;

/// Stable writes with at least this much data are sent from their region (from 8
/// KiB up a run of ring slots of small messages goes this way too).
pub(super) const SPAN_MIN: usize = 8 << 10;
/// On a sealed link, stable writes with at least this much data are sealed from
/// their region.
pub(super) const SEALED_SPAN_MIN: usize = 4 << 10;

/// Data of a stable write, sent from its region at `pos` among the frame bytes.
#[derive(Debug)]
pub(super) struct Span {
    /// How many frame bytes go before it.
    pos: usize,
    region: Arc<Region>,
    offset: usize,
    len: usize,
}

/// Frames to send, in order: `bytes`, with each span's data sent at its `pos`.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    pub(super) bytes: Vec<u8>,
    spans: Vec<Span>,
}

impl Outbox {
    /// Appends `len` bytes of `region` from `offset` (checked to lie inside it) as
    /// data sent from the region, after the bytes appended so far, which end with
    /// the prefix of the span's Write frame (a sealed link seals the two together,
    /// [`Sent::sealed_next`]).
    pub(super) fn push_span(&mut self, region: &Arc<Region>, offset: usize, len: usize) {
        assert!(region.check_range(offset as u64, len as u64).is_ok(), "a span inside its region");
        debug_assert!(self.bytes.len() >= WRITE_PREFIX, "a span follows its frame's prefix");
        self.spans.push(Span { pos: self.bytes.len(), region: region.clone(), offset, len });
    }

    /// Whether it holds spans (only frame bytes otherwise).
    pub(super) fn has_spans(&self) -> bool {
        !self.spans.is_empty()
    }

    /// Whether nothing is in it.
    pub(super) fn is_empty(&self) -> bool {
        self.bytes.is_empty() && self.spans.is_empty()
    }

    /// Empties it, keeping the bytes' capacity.
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
    }
}

/// What a sealed link seals next of an [`Outbox`] ([`Sent::sealed_next`]).
#[derive(Debug)]
pub(super) enum Sealed<'a> {
    /// Frame bytes up to `bytes[..end]`: to the next span's frame, or all of them.
    Bytes(usize),
    /// The next span's frame: its prefix, `bytes[at..at + WRITE_PREFIX]`, and its data
    /// where it lies, to be sealed together as one record.
    Span(&'a [u8]),
    /// Everything is sealed.
    Done,
}

/// How far the sending of an [`Outbox`] has gone.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sent {
    /// Frame bytes sent.
    pub(super) at: usize,
    /// Spans sent whole.
    span: usize,
    /// Bytes sent of the next span.
    within: usize,
}

impl Sent {
    /// Whether all of `o` is sent.
    pub(super) fn done(&self, o: &Outbox) -> bool {
        self.at == o.bytes.len() && self.span == o.spans.len()
    }

    /// The next pieces of `o` to send, at most `budget` bytes in at most `out.len()`
    /// pieces, as `iovec`s over the bytes and the spans' regions; returns how many it
    /// filled in. They point into `o`'s bytes and regions: valid while `o` is neither
    /// changed nor dropped.
    pub(super) fn pieces(&self, o: &Outbox, mut budget: usize, out: &mut [libc::iovec]) -> usize {
        let (mut at, mut span, mut within, mut k) = (self.at, self.span, self.within, 0);
        while budget > 0 && k < out.len() {
            let stop = o.spans.get(span).map_or(o.bytes.len(), |s| s.pos);
            if at < stop {
                let n = (stop - at).min(budget);
                let b = &o.bytes[at..at + n];
                out[k] = libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: n };
                (at, budget, k) = (at + n, budget - n, k + 1);
                continue;
            }
            let Some(s) = o.spans.get(span) else { break };
            let n = (s.len - within).min(budget);
            out[k] = s.region.iovec(s.offset + within, n);
            (budget, k) = (budget - n, k + 1);
            (span, within) = (span + 1, 0);
        }
        k
    }

    /// Sends the next pieces of `o`, at most `budget` bytes, as far as the socket `fd`
    /// takes them without blocking; counts and returns what it took (`WouldBlock`
    /// where it took nothing).
    pub(super) fn send(
        &mut self,
        o: &Outbox,
        fd: std::os::fd::BorrowedFd<'_>,
        budget: usize,
    ) -> std::io::Result<usize> {
        let mut iov = [EMPTY; PIECES];
        let k = self.pieces(o, budget, &mut iov);
        // SAFETY: the iovecs point into `o`'s bytes and into its spans' regions (kept
        // alive by the spans' `Arc`s, their ranges checked when pushed), and `o` is
        // borrowed, so neither changed nor dropped, for the call.
        let n = unsafe { crate::sys::send_iovecs(fd, &iov[..k]) }?;
        self.advance(o, n);
        Ok(n)
    }

    /// On a sealed link, what is to be sealed next of `o` (spans are sealed whole,
    /// each with its frame's prefix, so a sealed walk is never within a span).
    pub(super) fn sealed_next<'a>(&self, o: &'a Outbox) -> Sealed<'a> {
        debug_assert_eq!(self.within, 0, "a sealed link takes spans whole");
        let Some(s) = o.spans.get(self.span) else {
            return if self.at < o.bytes.len() { Sealed::Bytes(o.bytes.len()) } else { Sealed::Done };
        };
        let frame = s.pos - WRITE_PREFIX;
        if self.at < frame {
            return Sealed::Bytes(frame);
        }
        debug_assert_eq!(self.at, frame, "sealed bytes stop at a span's frame");
        // SAFETY: a span is a stable write's data (`WriteOp::stable`): its range is
        // not written again before the peer has applied the write, which it cannot
        // have before this record reaches it; the writes before it were ordered
        // before its posting, which the flush's taking of the outbox (under the
        // queue's lock) follows. The slice lives while `o` is borrowed, for the
        // sealing of this record.
        Sealed::Span(unsafe { s.region.stable_bytes(s.offset, s.len) })
    }

    /// Counts the span [`Sent::sealed_next`] gave, and its frame's prefix, as sealed.
    pub(super) fn sealed_span(&mut self, o: &Outbox) {
        self.at = o.spans[self.span].pos;
        self.span += 1;
    }

    /// Counts `n` more bytes of `o` as sent.
    pub(super) fn advance(&mut self, o: &Outbox, mut n: usize) {
        while n > 0 {
            let stop = o.spans.get(self.span).map_or(o.bytes.len(), |s| s.pos);
            if self.at < stop {
                let k = (stop - self.at).min(n);
                (self.at, n) = (self.at + k, n - k);
                continue;
            }
            let s = o.spans.get(self.span).expect("no more sent than there was");
            let k = (s.len - self.within).min(n);
            (self.within, n) = (self.within + k, n - k);
            if self.within == s.len {
                (self.span, self.within) = (self.span + 1, 0);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::atomic::Ordering;

    /// The bytes an iovec points at (test only: the regions here are written before
    /// and not during).
    fn read(v: &libc::iovec) -> Vec<u8> {
        // SAFETY: every iovec here points into an outbox the test keeps alive and does
        // not change while it reads.
        unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len).to_vec() }
    }

    /// An outbox of frame bytes and spans, and the stream it stands for.
    fn outbox() -> (Outbox, Vec<u8>) {
        let r = Arc::new(Region::new(1024));
        for i in 0..128 {
            r.store(i * 8, 0x0101_0101_0101_0101 * (i as u64 % 250 + 1), Ordering::Relaxed);
        }
        let mut o = Outbox::default();
        let mut want = Vec::new();
        let bytes = |o: &mut Outbox, want: &mut Vec<u8>, n: usize, v: u8| {
            o.bytes.extend(std::iter::repeat(v).take(n));
            want.extend(std::iter::repeat(v).take(n));
        };
        let span = |o: &mut Outbox, want: &mut Vec<u8>, off: usize, len: usize| {
            o.push_span(&r, off, len);
            let mut b = vec![0u8; len];
            r.read_bytes(off, &mut b);
            want.extend(b);
        };
        bytes(&mut o, &mut want, 20, 0xAA);
        span(&mut o, &mut want, 64, 256);
        bytes(&mut o, &mut want, 20, 0xBB);
        span(&mut o, &mut want, 0, 64);
        span(&mut o, &mut want, 512, 8); // two spans in a row: no bytes between
        bytes(&mut o, &mut want, 7, 0xCC);
        span(&mut o, &mut want, 1016, 8); // a span last
        (o, want)
    }

    #[test]
    fn pieces_of_any_size_give_the_stream_in_order() {
        let (o, want) = outbox();
        for budget in [1, 3, 8, 19, 20, 21, 100, 256, 300, 10_000] {
            for most in [1, 2, 5, 64] {
                let (mut s, mut got) = (Sent::default(), Vec::new());
                while !s.done(&o) {
                    let mut v = [EMPTY; 64];
                    let k = s.pieces(&o, budget, &mut v[..most]);
                    let v = &v[..k];
                    assert!(k > 0, "budget {budget}, most {most}");
                    // Take only part of what was offered now and then, as a full socket does.
                    let offered: usize = v.iter().map(|x| x.iov_len).sum();
                    assert!(offered <= budget);
                    let take = if got.len() % 3 == 0 { offered.div_ceil(2) } else { offered };
                    let mut left = take;
                    for x in v {
                        let b = read(x);
                        let k = b.len().min(left);
                        got.extend_from_slice(&b[..k]);
                        left -= k;
                    }
                    s.advance(&o, take);
                }
                assert_eq!(got, want, "budget {budget}, most {most}");
            }
        }
    }

    #[test]
    fn an_outbox_of_bytes_alone_is_sent_as_they_are() {
        let mut o = Outbox::default();
        o.bytes.extend_from_slice(b"frames");
        assert!(!o.has_spans());
        let (mut s, mut v) = (Sent::default(), [EMPTY; 8]);
        assert_eq!(s.pieces(&o, 100, &mut v), 1);
        assert_eq!(read(&v[0]), b"frames");
        s.advance(&o, 6);
        assert!(s.done(&o));
        o.clear();
        assert!(o.is_empty() && Sent::default().done(&o));
    }
}
