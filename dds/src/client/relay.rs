//! A member's per-topic state for the clients it serves, kept under the topic's
//! lock with the rest of the topic: the client readers it relays samples to, the
//! client writers it acknowledges, and the filter that drops a client sample sent
//! twice (once by the member that died, once again after the client moved).

use super::wire::Push;
use crate::qos::Level;
use crate::sample::SampleInfo;
use crate::sink::Src;
use std::collections::HashMap;
use views::group::ClientSession;

/// A client reader this member relays to.
#[derive(Debug)]
pub(crate) struct ClientReader {
    pub(crate) session: ClientSession,
    pub(crate) reader: u32,
    pub(crate) level: Level,
    /// Samples before this `topic_seq` went to it already (it resumed here).
    pub(crate) from: u64,
}

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Relay {
    pub(crate) readers: Vec<ClientReader>,
    /// Sessions of clients with a writer on this topic here, by client id.
    pub(crate) writers: HashMap<u64, ClientSession>,
    /// The highest sequence number delivered per client writer (client id, number).
    seen: HashMap<(u64, u32), u64>,
    /// This member lists proxy endpoints on the topic: it stays in the topic while
    /// it has no endpoint of its own.
    pub(crate) proxied: bool,
}

impl Relay {
    /// Notes a delivered sample; false if it is a client sample delivered before
    /// (a resend), which every member drops alike.
    pub(crate) fn note(&mut self, info: &SampleInfo) -> bool {
        let Some(client) = info.writer.client else { return true };
        let last = self.seen.entry((client, info.writer.id)).or_insert(0);
        if info.seq <= *last {
            return false;
        }
        *last = info.seq;
        true
    }

    /// Tells the client that wrote a sample this member sent that it is delivered.
    pub(crate) fn ack(&mut self, info: &SampleInfo) {
        let Some(client) = info.writer.client else { return };
        if let Some(s) = self.writers.get(&client) {
            let push = Push::Acked { writer: info.writer.id, seq: info.seq };
            if !s.push(&push.encode()) {
                self.writers.remove(&client);
            }
        }
    }

    /// Relays a delivered sample to the client readers whose request its writer's
    /// offer (`offered`; `None` meets any) meets.
    pub(crate) fn relay(&mut self, info: &SampleInfo, offered: Option<Level>, src: &Src<'_>) {
        if self.readers.is_empty() {
            return;
        }
        let mut bytes = None;
        self.readers.retain(|r| {
            if info.topic_seq < r.from || !offered.map_or(true, |l| l.satisfies(r.level)) {
                return true;
            }
            let bytes = bytes.get_or_insert_with(|| src.copy_all());
            r.session.push(&Push::sample(r.reader, info, bytes.clone()).encode())
        });
    }

    /// Forgets a session's readers and writer (it ended).
    pub(crate) fn forget(&mut self, client: u64) {
        self.readers.retain(|r| r.session.id() != client);
        self.writers.remove(&client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::WriterId;
    use sst::transport::NodeId;
    use views::view::ViewId;

    fn info(client: Option<u64>, id: u32, seq: u64) -> SampleInfo {
        SampleInfo {
            writer: WriterId { node: NodeId(1), id, client },
            seq,
            source_timestamp: std::time::UNIX_EPOCH,
            view: ViewId(1),
            topic_seq: 0,
            from_history: false,
        }
    }

    #[test]
    fn a_client_sample_sent_again_is_dropped_and_members_samples_never_are() {
        let mut r = Relay::default();
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
