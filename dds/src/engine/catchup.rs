//! Late joins: serving the history before a seam to a joiner, and applying the
//! history a joiner got, then the live samples that waited for it.

#[cfg(test)]
use super::Mutation;
use super::{Effects, Entry, Now, Rejection, Seam, Seen, TopicEngine};
use crate::error::CatchUpError;
use spindle_sst::transport::NodeId;
use spindle_views::view::ViewId;
use std::time::SystemTime;

/// What this node can serve a late joiner of `view` (see [`TopicEngine::serve`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Served {
    /// The view has not begun here yet, or this node is still catching up on an
    /// earlier view and will know this one's seam when done (the driver may wait
    /// for either and ask again).
    NotBegun,
    /// The view began before this node's first view in the topic: nothing to serve.
    TooOld,
    /// New in that view too; its count then.
    New { seam: u64 },
    /// What is asked for is older than the memory holds: read the log up to
    /// `seam`; `seen` is the resend filter at the seam.
    FromLog { seam: u64, seen: Seen },
    /// History from the asked point on, up to the seam (`more`: a further page),
    /// and the resend filter at the seam.
    Entries { seam: u64, entries: Vec<Entry>, more: bool, seen: Seen },
}

impl<R> TopicEngine<R> {
    /// The seam of `view` here, if it began here and is still remembered.
    pub(crate) fn seam_of(&self, view: ViewId) -> Option<&Seam> {
        self.seams.iter().find(|s| s.view == view)
    }

    /// Seam `i` is here now: complete. A view that brought another member while
    /// this one caught up pinned the history where this node stood then, before
    /// the samples it held: pin it again here, with the resend filter as it is.
    fn seal(&mut self, i: usize, now: Now) {
        let seq = self.next_seq;
        let s = &mut self.seams[i];
        (s.seq, s.complete) = (seq, true);
        if s.joined {
            s.seen = self.clients.seen();
            self.pin(seq, now);
        }
    }

    /// The history before the start of `view`, from `from` on, at most `budget`
    /// bytes (at least one entry); `any` serves it even if this node was not
    /// complete at the seam (a source among new members). `has_log`: the driver
    /// can read the topic's log.
    pub(crate) fn serve(&self, view: ViewId, from: u64, any: bool, budget: usize, has_log: bool, now: Now) -> Served {
        let Some(seam) = self.seam_of(view) else {
            return if self.last_view.is_some_and(|v| v >= view) { Served::TooOld } else { Served::NotBegun };
        };
        if !seam.complete && !any {
            // Still catching up since an earlier view: the seam of this one moves
            // by the samples held meanwhile; it is known once the history is in.
            if self.catching_up.as_ref().is_some_and(|c| c.view < view) {
                return Served::NotBegun;
            }
            return Served::New { seam: seam.seq };
        }
        // A keyed history has holes (per-instance limits) that a log must not have.
        if has_log && (from < self.oldest().min(seam.seq) || (self.keyed && from < seam.seq)) {
            return Served::FromLog { seam: seam.seq, seen: seam.seen.clone() };
        }
        // A log must not have holes either: a joiner that fills its log from these
        // pages gets every entry, also those past the topic's lifespan (its
        // readers' queues drop those at the take).
        let wall = (!has_log).then_some(now.wall);
        let (page, _) = self.page((from, seam.seq), budget, wall);
        let entries: Vec<Entry> = page.into_iter().cloned().collect();
        let more = entries.last().is_some_and(|e| e.seq + 1 < seam.seq);
        Served::Entries { seam: seam.seq, entries, more, seen: seam.seen.clone() }
    }

    /// The history `from..to` as it stood when sample `to` came, up to `budget`
    /// bytes (at least one entry), and where the rest starts (`to` if none is left);
    /// with `wall`, without the entries past the topic's lifespan then.
    pub(super) fn page(&self, (from, to): (u64, u64), budget: usize, wall: Option<SystemTime>) -> (Vec<&Entry>, u64) {
        let mut page = Vec::new();
        let mut used = 0;
        for e in self.store.range(from, to, wall) {
            if used > 0 && used + e.bytes.len() > budget {
                return (page, e.seq);
            }
            used += e.bytes.len();
            page.push(e);
        }
        (page, to)
    }

    /// Ends a late join: `entries` (the history before the seam at `seam`, and
    /// the resend filter `seen` there) first, then the live samples that waited.
    /// `failed`: why there is no history.
    pub(crate) fn caught_up(
        &mut self,
        entries: Vec<Entry>,
        seam: Option<u64>,
        seen: &[(u64, u32, u64)],
        failed: Option<CatchUpError>,
        now: Now,
        fx: &mut impl Effects<R>,
    ) {
        let mut got = 0u64;
        for e in entries {
            if e.seq < self.next_seq {
                continue; // held already (this node's own log)
            }
            got += 1;
            if self.log_len.is_some_and(|n| n != e.seq) {
                // A Logged member serves its whole log, so this is a gap in its answer.
                tracing::error!(seq = e.seq, "catch-up left a gap in the log");
                break;
            }
            self.next_seq = e.seq;
            self.apply(e.view, NodeId(e.node), crate::sink::Src::Bytes(&e.bytes), true, now, fx);
        }
        self.clients.merge(seen);
        if let Some(s) = seam {
            self.next_seq = self.next_seq.max(s);
            #[cfg(test)]
            if self.mutation == Some(Mutation::SeamOffByOne) {
                self.next_seq += 1;
            }
        }
        if got > 0 {
            // The history may name writers that left before this member came.
            for r in &self.readers {
                fx.writers_now(&r.handle, &self.alive, 0, false);
            }
        }
        let Some(c) = self.catching_up.take() else {
            fx.flush();
            return;
        };
        fx.entered();
        if let (Some(from), Some(seam)) = (c.rejoined_at, seam) {
            let missed = seam.saturating_sub(from).saturating_sub(got);
            #[cfg(test)]
            let missed = if self.mutation == Some(Mutation::RejoinUntold) { 0 } else { missed };
            if missed > 0 {
                tracing::warn!(missed, "samples delivered while this participant was out are gone");
                for r in &self.readers {
                    fx.missed(&r.handle, missed);
                }
            }
        }
        if let Some(why) = failed {
            let r = Rejection::NoHistory(why);
            for reader in &self.readers {
                fx.reject(&reader.handle, &r);
            }
            fx.catch_up_failed(why);
        }
        // The seams of the view joined in and of every view begun while catching up
        // are known as the held samples go in: each is where the count stands when
        // the first sample of its view comes (a client's resend among the held
        // ones takes no number, so counting them would not do).
        let open: Vec<usize> = (0..self.seams.len()).filter(|i| self.seams[*i].view >= c.view).collect();
        let mut k = 0;
        for (view, sender, bytes) in c.buffered {
            while k < open.len() && self.seams[open[k]].view <= view {
                self.seal(open[k], now);
                k += 1;
            }
            self.apply(view, sender, crate::sink::Src::Bytes(&bytes), false, now, fx);
        }
        for i in &open[k..] {
            self.seal(*i, now);
        }
        fx.flush();
    }
}
