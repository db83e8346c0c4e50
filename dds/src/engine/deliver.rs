//! Delivered samples: numbered, deduplicated (client resends), kept in the
//! history and the log, offered to local readers and relayed to client readers.

use super::{Ack, Effects, Entry, Now, Rejection, TopicEngine};
use crate::qos::Level;
use crate::sample::{header_len, info_of, pack_count, writer_seq, HEADER};
use crate::sink::{HeaderWords, Src};
use spindle_sst::transport::NodeId;
use spindle_views::view::ViewId;

impl<R> TopicEngine<R> {
    /// A message of the topic's subgroup, delivered in view `view` from `sender`
    /// (call [`TopicEngine::batch_end`] after the last of a batch).
    pub(crate) fn deliver(&mut self, view: ViewId, sender: NodeId, src: Src<'_>, now: Now, fx: &mut impl Effects<R>) {
        // The header is read once, here.
        let Some(h) = src.header() else { return self.short(sender, src.len(), fx) };
        match pack_count(h[0]) {
            Some(n) => self.deliver_pack(view, sender, src, n, now, fx),
            None => self.deliver_one(view, sender, src, &h, now, fx),
        }
    }

    /// The messages of a delivered batch, in order, each with its sender: what
    /// [`TopicEngine::deliver`] does with each (call [`TopicEngine::batch_end`]
    /// after). While the engine is [`TopicEngine::lean`], a member's sample reads
    /// only its first header word and goes straight to
    /// [`TopicEngine::count_unread`], with no dispatch as a pack or a sample.
    pub(crate) fn deliver_all<'s>(
        &mut self,
        view: ViewId,
        msgs: impl IntoIterator<Item = (NodeId, Src<'s>)>,
        now: Now,
        fx: &mut impl Effects<R>,
    ) {
        // Nothing a message does changes this (no reader, client reader or catch-up
        // comes from a delivery).
        let lean = self.lean();
        for (sender, src) in msgs {
            match (lean && src.len() >= HEADER).then(|| src.word(0)) {
                Some(w0) if header_len(w0) == HEADER => self.count_unread(sender, w0, fx),
                _ => self.deliver(view, sender, src, now, fx),
            }
        }
    }

    /// True if [`TopicEngine::deliver_all`] takes the lean path now: nothing here
    /// reads the topic, no catch-up is under way, no log is kept. A driver may
    /// deliver message by message with [`TopicEngine::deliver`] when it is false
    /// (the same effects, without the batch's iterator in between).
    pub(crate) fn lean(&self) -> bool {
        self.unread() && self.catching_up.is_none() && self.log_len.is_none()
    }

    /// One sample whose header `h` was read and checked.
    fn deliver_one(
        &mut self,
        view: ViewId,
        sender: NodeId,
        src: Src<'_>,
        h: &HeaderWords,
        now: Now,
        fx: &mut impl Effects<R>,
    ) {
        if let Some(c) = self.catching_up.as_mut() {
            c.buffered.push((view, sender, src.copy_all()));
            return;
        }
        self.apply_read(view, sender, src, h, false, now, fx);
    }

    /// A pack of `n` samples of one member writer (see [`crate::sample`]), each
    /// delivered as if it had come alone. A length past the message's end, or a
    /// client sample or a pack inside, is refused there: the samples before it
    /// stand, the rest of the pack is dropped (every member sees the same bytes,
    /// so every member does the same).
    fn deliver_pack(&mut self, view: ViewId, sender: NodeId, src: Src<'_>, n: u32, now: Now, fx: &mut impl Effects<R>) {
        #[cfg(test)]
        let n = if self.mutation == Some(super::Mutation::PackShort) { n.saturating_sub(1) } else { n };
        let mut at = 8;
        for _ in 0..n {
            let len = match (at + 8 <= src.len()).then(|| src.word(at / 8)) {
                Some(len) if len <= (src.len() - at - 8) as u64 => len as usize,
                _ => return self.bad_pack(sender, fx),
            };
            let part = src.part(at + 8, len);
            match part.header() {
                Some(h) if pack_count(h[0]).is_none() && header_len(h[0]) == HEADER => {
                    self.deliver_one(view, sender, part, &h, now, fx)
                }
                _ => return self.bad_pack(sender, fx),
            }
            at += 8 + len.div_ceil(8) * 8;
        }
    }

    /// A pack that does not hold what it says: every local reader hears of it.
    fn bad_pack(&self, sender: NodeId, fx: &mut impl Effects<R>) {
        let why = Rejection::BadPack { sender: sender.0 };
        for r in &self.readers {
            fx.reject(&r.handle, &why);
        }
    }

    /// Bytes too short for a sample's header: every local reader hears of them.
    fn short(&self, sender: NodeId, len: usize, fx: &mut impl Effects<R>) {
        let why = Rejection::ShortMessage { sender: sender.0, len };
        for r in &self.readers {
            fx.reject(&r.handle, &why);
        }
    }

    /// The end of a delivered batch: what it gathered for clients goes out.
    pub(crate) fn batch_end(&mut self, fx: &mut impl Effects<R>) {
        fx.flush();
    }

    /// The topic's log refused an append (the driver's report): the local
    /// readers are told.
    pub(crate) fn log_failed(&mut self, why: std::io::ErrorKind, fx: &mut impl Effects<R>) {
        let why = Rejection::LogAppend(why);
        for r in &self.readers {
            fx.reject(&r.handle, &why);
        }
    }

    /// Sample number `next_seq` of the topic (live, or `history` from a catch-up);
    /// its bytes hold a whole header.
    pub(super) fn apply(
        &mut self,
        view: ViewId,
        sender: NodeId,
        src: Src<'_>,
        history: bool,
        now: Now,
        fx: &mut impl Effects<R>,
    ) {
        match src.header() {
            Some(h) => self.apply_read(view, sender, src, &h, history, now, fx),
            None => self.short(sender, src.len(), fx),
        }
    }

    /// [`TopicEngine::apply`] with the header read already.
    #[allow(clippy::too_many_arguments)]
    fn apply_read(
        &mut self,
        view: ViewId,
        sender: NodeId,
        src: Src<'_>,
        h: &HeaderWords,
        history: bool,
        now: Now,
        fx: &mut impl Effects<R>,
    ) {
        if self.unread() && header_len(h[0]) == HEADER {
            return self.count_unread(sender, h[0], fx);
        }
        let seq = self.next_seq;
        let (info, client_level) = info_of(|i| h[i], sender, view, seq, history);
        let client_level = client_level.map(Level::from_wire);
        // A client's sample sent again after it moved to another member, which
        // every member drops alike (they all deliver the same order).
        if !self.clients.note(&info) {
            if let (true, Some(c)) = (sender == self.me, info.writer.client) {
                // Its first copy may not be durable yet: acknowledged with what is
                // in the log now.
                self.ack(Ack::Client { client: c, writer: info.writer.id, seq: info.seq }, fx);
            }
            return;
        }
        self.next_seq += 1;
        if self.keeps_history() {
            // The oldest entry's buffer takes the new one once the history is full:
            // one copy per sample and no allocation in the steady state.
            let mut bytes = self.store.spare();
            bytes.resize(src.len(), 0);
            src.read_all(&mut bytes);
            let e = Entry { seq, view, node: sender.0, bytes };
            if let Some(n) = self.log_len.as_mut() {
                fx.append(&e);
                *n += 1;
            }
            self.store.push(e, now.at);
        }
        let level = self.offered(&info, client_level);
        for r in &self.readers {
            match level {
                Some(l) if !l.satisfies(r.level) => {
                    if info.writer.client.is_some() {
                        fx.incompatible(&r.handle, info.writer, l); // members' writers: from the table
                    }
                }
                _ => fx.offer(&r.handle, &info, src),
            }
        }
        if !self.clients.readers.is_empty() {
            self.picks.clear();
            for r in &self.clients.readers {
                if info.topic_seq >= r.from && level.map_or(true, |l| l.satisfies(r.level)) {
                    self.picks.push((r.client, r.reader));
                }
            }
            if !self.picks.is_empty() {
                fx.relay(&info, src, &self.picks);
            }
        }
        if sender != self.me {
            return;
        }
        match info.writer.client {
            Some(c) => self.ack(Ack::Client { client: c, writer: info.writer.id, seq: info.seq }, fx),
            None => self.ack(Ack::Own { writer: info.writer.id, seq: info.seq }, fx),
        }
    }

    /// True if nothing here reads the topic's samples: no local reader, no client
    /// reader, no history kept.
    fn unread(&self) -> bool {
        self.readers.is_empty() && self.clients.readers.is_empty() && !self.keeps_history()
    }

    /// A member writer's sample (header word `w0`) that nothing here reads (see
    /// [`TopicEngine::unread`]): it takes its number in the topic's order, and if
    /// this member sent it, its writer hears it is delivered. What the full path
    /// would do besides (the sample's info, its level, the resend filter, which
    /// only client samples enter) has no one here to go to.
    fn count_unread(&mut self, sender: NodeId, w0: u64, fx: &mut impl Effects<R>) {
        self.next_seq += 1;
        if sender == self.me {
            let (writer, seq) = writer_seq(w0);
            #[cfg(test)]
            if self.mutation == Some(super::Mutation::UnreadWriterBehind) {
                return fx.delivered_own(writer, seq);
            }
            self.ack(Ack::Own { writer, seq }, fx);
        }
    }

    /// A write of this member's (its own writer's or a client's) is delivered: on
    /// a Logged topic it is acknowledged once every record appended so far is
    /// durable ([`TopicEngine::durable`]), else now.
    fn ack(&mut self, a: Ack, fx: &mut impl Effects<R>) {
        #[cfg(test)]
        if self.mutation == Some(super::Mutation::AckEarly) {
            return self.emit(a, fx);
        }
        match self.log_len {
            Some(n) if n > self.durable => self.unacked.push_back((n, a)),
            _ => self.emit(a, fx),
        }
    }

    fn emit(&mut self, a: Ack, fx: &mut impl Effects<R>) {
        match a {
            Ack::Client { client, writer, seq } => fx.acked(client, writer, seq),
            Ack::Own { writer, seq } => {
                if let Some(w) = self.writers.get_mut(&writer) {
                    w.delivered = w.delivered.max(seq);
                    fx.delivered_own(writer, seq);
                }
            }
        }
    }

    /// The log's driver reports the first `n` records durable: the writes they
    /// hold are acknowledged.
    pub(crate) fn durable(&mut self, n: u64, fx: &mut impl Effects<R>) {
        self.durable = self.durable.max(n);
        let mut any = false;
        while let Some(&(upto, a)) = self.unacked.front() {
            if upto > self.durable {
                break;
            }
            self.unacked.pop_front();
            self.emit(a, fx);
            any = true;
        }
        if any {
            fx.flush();
        }
    }
}
