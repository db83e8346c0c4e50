//! What a writer's send lock keeps, shared with its topic (which empties the
//! cache when a view starts): its numbers, clock and cached subgroup, and what
//! writer batching holds (the pack and how it is sent; see `super::pending`).

use crate::sample::{pack_word, HEADER};
use spindle_views::group::{Group, SendError};
use spindle_views::view::View;
use std::time::{Duration, Instant};

/// A pack's first word, and each sample's length word.
pub(super) const WORD: usize = 8;

/// A writer's last number sent, the clock for its source timestamps, the subgroup
/// its last send went to (a send into it takes no lock of the group's; see
/// `spindle_views::group::Group::send_cached`), and its batching.
pub(crate) struct Sending {
    /// The number of the writer's last sample sent (a pack's samples count once
    /// their pack is sent).
    pub(super) sent: u64,
    pub(super) clock: crate::stamp::Stamp,
    pub(super) cache: spindle_views::group::SendCache,
    /// Writer batching, and the samples it holds (see `super::pending`).
    pub(super) batching: Batching,
    pub(super) pending: Pending,
    /// With a batching delay: the flusher holds a reminder for this writer.
    pub(super) reminded: bool,
}

impl Sending {
    pub(super) fn new() -> Sending {
        Sending {
            sent: 0,
            clock: crate::stamp::Stamp::new(),
            cache: Default::default(),
            batching: Batching::Off,
            pending: Default::default(),
            reminded: false,
        }
    }

    /// Lets go of the cached subgroup, and with it the view it belongs to (its
    /// memory, its links, its file in /dev/shm), which an idle writer would
    /// otherwise hold until its next write.
    pub(crate) fn let_go(&mut self) {
        self.cache = Default::default();
    }

    /// Sends the open pack, if any, into the subgroup `pick` names: its samples
    /// become the writer's last sent.
    pub(super) fn send_pack(
        &mut self,
        group: &Group,
        pick: impl Fn(&View) -> Option<usize>,
        room: Option<Duration>,
        view: Option<Duration>,
    ) -> Result<(), SendError> {
        let n = self.pending.n;
        if n == 0 {
            return Ok(());
        }
        // Out of the send state while it sends (kept, with its buffer, either way).
        let bytes = std::mem::take(&mut self.pending.bytes);
        let sent = self.send_parts(group, pick, n, &bytes, room, view);
        self.pending.bytes = bytes;
        sent?;
        self.pending.bytes.clear();
        self.pending.n = 0;
        self.pending.opened_at = None;
        Ok(())
    }

    /// Sends `n` samples laid out as a pack holds them (`parts`: each one's length
    /// word, header and body, padded), behind the pack's first word, into the
    /// subgroup `pick` names: they become the writer's last sent. The one send of
    /// a pack, whether batching or `write_batch` laid it out.
    pub(super) fn send_parts(
        &mut self,
        group: &Group,
        pick: impl Fn(&View) -> Option<usize>,
        n: u32,
        parts: &[u8],
        room: Option<Duration>,
        view: Option<Duration>,
    ) -> Result<(), SendError> {
        group.send_cached(
            &mut self.cache,
            pick,
            WORD + parts.len(),
            |slot| {
                slot.write_word(0, pack_word(n));
                slot.write(WORD, parts);
            },
            room,
            view,
        )?;
        self.sent += n as u64;
        Ok(())
    }
}

/// How a writer batches its writes (see [`crate::DataWriter::set_batching`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Batching {
    /// Every write is sent at once (the default).
    #[default]
    Off,
    /// Writes join the open pack, which is sent at the latest about this long
    /// after its first sample joined (by a thread of the process's, if nothing
    /// sent it sooner).
    Within(Duration),
    /// Writes join the open pack, which is sent only when full, flushed, before
    /// another send of the writer, or when the writer waits for delivery or is
    /// dropped: nothing sends it on a timer.
    UntilFlushed,
}

/// The samples written since the last send, laid out as their pack holds them:
/// each one's length word, its header and its body, padded to a whole word.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub(super) bytes: Vec<u8>,
    pub(super) n: u32,
    /// When the open pack was opened (batching with a delay only).
    pub(super) opened_at: Option<Instant>,
}

impl Pending {
    pub(super) fn push(&mut self, header: [u64; 2], prefix: Option<[u64; 2]>, body: &[u8]) {
        let [h0, h1] = header;
        let words = match prefix {
            Some([p0, p1]) => [HEADER as u64 + 2 * WORD as u64 + body.len() as u64, h0, h1, p0, p1],
            None => [(HEADER + body.len()) as u64, h0, h1, 0, 0],
        };
        let words = &words[..if prefix.is_some() { 5 } else { 3 }];
        let at = self.bytes.len();
        let head = at + words.len() * WORD;
        // Sized once (the padding zeroed with it), then filled.
        self.bytes.resize((head + body.len()).div_ceil(WORD) * WORD, 0);
        for (i, w) in words.iter().enumerate() {
            self.bytes[at + i * WORD..at + (i + 1) * WORD].copy_from_slice(&w.to_le_bytes());
        }
        self.bytes[head..head + body.len()].copy_from_slice(body);
        self.n += 1;
    }

    /// When the open pack was opened, if one is open (with a delay).
    pub(super) fn opened_at(&self) -> Option<Instant> {
        self.opened_at.filter(|_| self.n > 0)
    }
}
