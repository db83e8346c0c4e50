//! The clients a member serves on a topic: their readers (which samples go to
//! them), their writers, and the filter that drops a client sample sent twice
//! (once by the member that died, once again after the client moved). Sessions
//! and frames are the driver's; this is who gets what.

use super::{Entry, Now, TopicEngine};
use crate::qos::Level;
use crate::sample::SampleInfo;
use std::collections::{BTreeSet, HashMap};

/// Client sample numbers an Unordered topic's member remembers above a hole, per
/// client writer.
const MAX_AHEAD: usize = 1024;

/// A client reader this member relays to.
#[derive(Debug)]
pub(crate) struct ClientReader {
    pub(crate) client: u64,
    pub(crate) reader: u32,
    pub(crate) level: Level,
    /// Samples before this `topic_seq` went to it already (it resumed here), or
    /// are the client's to fetch as history.
    pub(crate) from: u64,
}

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Clients {
    pub(crate) readers: Vec<ClientReader>,
    /// Client writers on this topic here, by client id: (number, offered level).
    writers: HashMap<u64, Vec<(u32, Level)>>,
    /// The highest sequence number delivered per client writer (client id, number);
    /// on an Unordered topic, the highest below which every number came.
    seen: HashMap<(u64, u32), u64>,
    /// An Unordered topic: samples of one client writer may come in any order
    /// (those it sent through a member it left can come after those it sent
    /// again through the next), so each number is noted, not only the highest.
    any_order: bool,
    /// An Unordered topic: the numbers that came above `seen`'s, per client writer.
    ahead: HashMap<(u64, u32), BTreeSet<u64>>,
    /// This member lists proxy endpoints on the topic: it stays in the topic while
    /// it has no endpoint of its own.
    pub(crate) proxied: bool,
}

impl Clients {
    /// `any_order`: the topic is Unordered.
    pub(crate) fn new(any_order: bool) -> Clients {
        Clients { any_order, ..Clients::default() }
    }

    /// Notes a delivered sample; false if it is a client sample delivered before
    /// (a resend), which every member drops alike.
    pub(crate) fn note(&mut self, info: &SampleInfo) -> bool {
        let Some(client) = info.writer.client else { return true };
        let key = (client, info.writer.id);
        let last = self.seen.entry(key).or_insert(0);
        if info.seq <= *last {
            return false;
        }
        if !self.any_order {
            *last = info.seq;
            return true;
        }
        let ahead = self.ahead.entry(key).or_default();
        if !ahead.insert(info.seq) {
            return false;
        }
        while ahead.remove(&(*last + 1)) {
            *last += 1;
        }
        // A number that never comes (lost at a view change) holds no more than
        // this many back: the oldest hole is given up.
        while ahead.len() > MAX_AHEAD {
            let Some(first) = ahead.pop_first() else { break };
            *last = first;
            while ahead.remove(&(*last + 1)) {
                *last += 1;
            }
        }
        true
    }

    /// The resend filter as it stands.
    pub(crate) fn seen(&self) -> super::Seen {
        let mut v: super::Seen = self.seen.iter().map(|((c, w), s)| (*c, *w, *s)).collect();
        v.sort_unstable();
        v
    }

    /// Takes in another member's resend filter (a late joiner's, at its seam).
    pub(crate) fn merge(&mut self, other: &[(u64, u32, u64)]) {
        for (c, w, s) in other {
            let last = self.seen.entry((*c, *w)).or_insert(0);
            *last = (*last).max(*s);
        }
    }
}

/// Where a client reader starts (see [`TopicEngine::add_client_reader`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientStart {
    /// Samples it asked for that this member no longer holds.
    pub(crate) lost: u64,
    /// The history it may fetch, `from..to`; live samples from `to` on are relayed.
    pub(crate) history: (u64, u64),
}

/// A page of history for a client reader (see [`TopicEngine::client_history`]).
#[derive(Debug)]
pub(crate) struct ClientPage {
    pub(crate) entries: Vec<Entry>,
    /// Where the next page starts (`to` when this one is the last).
    pub(crate) next: u64,
    pub(crate) lost: u64,
}

impl<R> TopicEngine<R> {
    /// This member lists proxy endpoints for clients on the topic.
    pub(crate) fn set_proxied(&mut self) {
        self.clients.proxied = true;
    }

    /// Client `client`'s reader `reader` requesting `level` starts here, at
    /// `from` if it resumes (else at the oldest sample held).
    pub(crate) fn add_client_reader(
        &mut self,
        client: u64,
        reader: u32,
        level: Level,
        from: Option<u64>,
    ) -> ClientStart {
        let keeps = self.keeps_history();
        let live = self.next_seq;
        let oldest = self.oldest();
        // A new reader starts at the oldest sample held (as a member's does); a resuming
        // one where it stopped, and what is no longer held is lost to it.
        let from = if keeps { from.unwrap_or(oldest).min(live) } else { live };
        let lost = oldest.min(live).saturating_sub(from);
        self.clients.readers.retain(|r| !(r.client == client && r.reader == reader));
        self.clients.readers.push(ClientReader { client, reader, level, from: live });
        ClientStart { lost, history: (from.max(oldest), live) }
    }

    /// A page of at most `budget` bytes (at least one entry) of the history
    /// `from..to` for client `client`'s reader `reader`; `None` if it has no
    /// such reader here.
    pub(crate) fn client_history(
        &self,
        client: u64,
        reader: u32,
        (from, to): (u64, u64),
        budget: usize,
        now: Now,
    ) -> Option<ClientPage> {
        let level = self.clients.readers.iter().find(|r| r.client == client && r.reader == reader)?.level;
        let lost = self.oldest().min(to).saturating_sub(from);
        let (page, next) = self.page((from, to), budget, Some(now.wall));
        let meets = |e: &&Entry| {
            let (info, client_level) = e.info(true);
            self.offered(&info, client_level).map_or(true, |l| l.satisfies(level))
        };
        let entries = page.into_iter().filter(meets).cloned().collect();
        Some(ClientPage { entries, next, lost })
    }

    /// Client `client`'s reader `reader` closed here.
    pub(crate) fn remove_client_reader(&mut self, client: u64, reader: u32) {
        self.clients.readers.retain(|r| !(r.client == client && r.reader == reader));
    }

    /// Client `client`'s writer `id` offering `level` writes here.
    pub(crate) fn add_client_writer(&mut self, client: u64, id: u32, level: Level) {
        let e = self.clients.writers.entry(client).or_default();
        e.retain(|(w, _)| *w != id);
        e.push((id, level));
    }

    /// Client `client`'s writer `id` closed here.
    pub(crate) fn remove_client_writer(&mut self, client: u64, id: u32) {
        if let Some(e) = self.clients.writers.get_mut(&client) {
            e.retain(|(w, _)| *w != id);
        }
    }

    /// Forgets a client's readers and writers here (its session ended).
    pub(crate) fn forget_client(&mut self, client: u64) {
        self.clients.readers.retain(|r| r.client != client);
        self.clients.writers.remove(&client);
    }

    /// The client writers and readers this member serves on the topic.
    pub(crate) fn client_counts(&self) -> (usize, usize) {
        (self.clients.writers.values().map(Vec::len).sum(), self.clients.readers.len())
    }

    /// The client readers here whose request `offered` does not meet, as
    /// (client id, reader number, requested level).
    pub(crate) fn client_readers_above(&self, offered: Level) -> Vec<(u64, u32, Level)> {
        self.clients
            .readers
            .iter()
            .filter(|r| !offered.satisfies(r.level))
            .map(|r| (r.client, r.reader, r.level))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::WriterId;
    use spindle_sst::transport::NodeId;
    use spindle_views::view::ViewId;

    fn info(client: Option<u64>, id: u32, seq: u64) -> SampleInfo {
        let (mut i, _) = crate::sample::info_of(|_| 0, NodeId(1), ViewId(1), 0, false);
        (i.writer, i.seq) = (WriterId { node: NodeId(1), id, client }, seq);
        i
    }

    #[test]
    fn a_client_sample_sent_again_is_dropped_and_members_samples_never_are() {
        let mut r = Clients::default();
        assert!(r.note(&info(Some(7), 0, 1)));
        assert!(r.note(&info(Some(7), 0, 2)));
        assert!(!r.note(&info(Some(7), 0, 2)), "a resend of 2");
        assert!(!r.note(&info(Some(7), 0, 1)), "a resend of 1");
        assert!(r.note(&info(Some(7), 1, 1)), "another writer of the same client");
        assert!(r.note(&info(Some(8), 0, 1)), "another client");
        assert!(r.note(&info(Some(7), 0, 5)), "a gap is no duplicate");
        assert!(
            r.note(&info(None, 0, 1)) && r.note(&info(None, 0, 1)),
            "members' samples pass (a restarted writer starts again at 1)"
        );
    }
}
