//! The membership table: one SST row per member of a view, the columns the view
//! change runs on (Derecho TOCS §4.1, "the SST for membership").
//!
//! A row has a data part and a control part, pushed in that order, so that a reader
//! that sees a control value also sees the data it publishes (writes from one node to
//! one peer land in order):
//!
//! | part | column | meaning |
//! |---|---|---|
//! | data | `suspected` | ranks this member suspects (bit mask; only grows) |
//! | data | `proposals` | two proposal slots; proposal `p` lives in slot `p % 2` |
//! | data | `docs` | two layout-document slots, one per proposal slot (a proposal that changes the layout) |
//! | data | `edits` | the layout edits this member asks for in this view (length-prefixed, append only) |
//! | data | `received` | per subgroup, per sender: what this member received, final once `wedged` |
//! | data | `cuts` | per subgroup, per sender: the ragged trim this row publishes or echoes |
//! | control | `proposal` | number of the proposal held (the leader's: proposed; a follower's: acked) |
//! | control | `committed` | the proposal number committed (leader) or seen committed (follower) |
//! | control | `wedged` | every subgroup of this member is wedged (its `received` is final) |
//! | control | `leaving` | this member asks to leave |
//! | control | `cut_ready` | per subgroup: the cut in `cuts` is published (every member echoes every subgroup's cut) |
//! | control | `edit_words` | words of `edits` written (the guard of that list) |
//!
//! Two slots for proposals: a reader that reads slot `p % 2` after seeing `proposal = p`
//! could only see it overwritten by proposal `p + 2`, which needs two more changes
//! within one read; the slot's first word is the number, checked after the read.

use crate::layout::{MAX_DOC, MAX_EDITS};
use crate::view::LayoutDoc;
use spindle_sst::transport::NodeId;
use spindle_sst::{Bytes, Counter, CounterVec, Flag, LayoutBuilder, LocalRow, Push, Table};
use std::net::{Ipv4Addr, SocketAddrV4};

/// At most this many joiners are added by one view change (more wait for the next).
pub const MAX_JOINS: usize = 8;
/// Words of a proposal: number, issuer, removed, left, joins, layout version,
/// document length, then the joiners.
const PROP_WORDS: usize = 7 + MAX_JOINS;
const JOINS_AT: usize = 7;

/// A joining process: its id and the control-plane address it listens on (`None` for
/// transports that need none, such as the in-process and simulated ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joiner {
    /// The node id it asked for.
    pub node: NodeId,
    /// Where it listens (IPv4 only: it is packed into one word).
    pub addr: Option<SocketAddrV4>,
}

impl Joiner {
    fn encode(&self) -> u64 {
        let (ip, port) = self.addr.map(|a| (u32::from(*a.ip()), a.port())).unwrap_or((0, 0));
        ((self.node.0 as u64) << 48) | ((ip as u64) << 16) | port as u64
    }
    fn decode(w: u64) -> Joiner {
        let node = NodeId((w >> 48) as u32);
        let ip = Ipv4Addr::from((w >> 16) as u32);
        let port = w as u16;
        Joiner { node, addr: (port != 0).then(|| SocketAddrV4::new(ip, port)) }
    }
}

/// A leader's proposal for the next view.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Proposal {
    /// Its number (1, 2, ...; 0 means none).
    pub no: u64,
    /// The rank of the leader that issued it.
    pub issuer: usize,
    /// Ranks removed (failed or leaving).
    pub removed: u64,
    /// Of those, the ranks that left gracefully.
    pub left: u64,
    /// Processes added, in order.
    pub joins: Vec<Joiner>,
    /// The next view's layout document, if the proposal changes it.
    pub layout: Option<LayoutDoc>,
}

/// The membership table's columns for a view with the given subgroup sender counts.
#[derive(Debug, Clone)]
pub struct MembershipLayout {
    layout: spindle_sst::table::Layout,
    pub(crate) suspected: Bytes,
    proposals: Bytes,
    docs: Bytes,
    edits: Bytes,
    cuts: Bytes,
    received: Bytes,
    pub(crate) proposal: Counter,
    pub(crate) committed: Counter,
    pub(crate) wedged: Flag,
    pub(crate) leaving: Flag,
    cut_ready: CounterVec,
    pub(crate) edit_words: Counter,
    /// Raised every heartbeat period; pushed on its own, quietly.
    pub heartbeat: Counter,
    /// First cut word of each subgroup.
    cut_at: Vec<usize>,
    senders: Vec<usize>,
}

impl MembershipLayout {
    /// The layout for subgroups with `senders[k]` senders each.
    pub fn new(senders: &[usize]) -> MembershipLayout {
        let mut b = LayoutBuilder::new();
        let suspected = b.bytes("suspected", 8);
        let proposals = b.bytes("proposals", 2 * PROP_WORDS * 8);
        let total: usize = senders.iter().sum();
        let cuts = b.bytes("cuts", total.max(1) * 8);
        let received = b.bytes("received", total.max(1) * 8);
        let proposal = b.counter("proposal");
        let committed = b.counter("committed");
        let wedged = b.flag("wedged");
        let leaving = b.flag("leaving");
        let cut_ready = b.counters("cut_ready", senders.len().max(1));
        let edit_words = b.counter("edit_words");
        let heartbeat = b.counter("heartbeat");
        // Last, and pushed only as far as they are used (a covering push of 34 KB per
        // change filled a tcp socket to a partitioned peer and stalled the thread).
        let docs = b.bytes("docs", 2 * MAX_DOC);
        let edits = b.bytes("edits", MAX_EDITS);
        let mut cut_at = Vec::new();
        let mut at = 0;
        for s in senders {
            cut_at.push(at);
            at += s;
        }
        MembershipLayout {
            layout: b.build(),
            suspected,
            proposals,
            docs,
            edits,
            cuts,
            received,
            proposal,
            committed,
            wedged,
            leaving,
            cut_ready,
            edit_words,
            heartbeat,
            cut_at,
            senders: senders.to_vec(),
        }
    }

    /// The sst table layout.
    pub fn table_layout(&self) -> &spindle_sst::table::Layout {
        &self.layout
    }

    /// Bytes a table of `rows` rows needs.
    pub fn table_bytes(&self, rows: usize) -> usize {
        self.layout.table_bytes(rows)
    }

    /// The pushes that publish this row, in order: the layout document of proposal
    /// `doc.0` (its `doc.1` bytes) if any, the edits written so far, the data, then
    /// the control part (which vouches for everything before it).
    pub(crate) fn pushes(&self, row: &LocalRow, doc: Option<(u64, usize)>) -> Vec<Push> {
        let mut out = Vec::with_capacity(4);
        if let Some((no, len)) = doc.filter(|d| d.1 > 0) {
            out.push(row.push(self.docs.sub_range((no % 2) as usize * MAX_DOC, len.min(MAX_DOC))));
        }
        let words = (row.get(self.edit_words) as usize).min(MAX_EDITS / 8);
        if words > 0 {
            out.push(row.push(self.edits.sub_range(0, words * 8)));
        }
        let data = self
            .suspected
            .sub_range(0, 8)
            .join(self.cuts.sub_range(0, self.cuts.len()))
            .join(self.received.sub_range(0, self.received.len()))
            .join(self.proposals.sub_range(0, self.proposals.len()));
        let control = self
            .proposal
            .range()
            .join(self.committed.range())
            .join(self.wedged.range())
            .join(self.leaving.range())
            .join(self.cut_ready.range())
            .join(self.edit_words.range());
        out.push(row.push(data));
        out.push(row.push(control));
        out
    }

    /// A number that grows whenever any row's control part or suspicions change: the
    /// engine needs a step only when it moved (or a local input arrived).
    pub fn fingerprint(&self, t: &Table) -> u64 {
        (0..t.rows())
            .map(|r| {
                t.counter(r, self.proposal)
                    + t.counter(r, self.committed)
                    + t.flag(r, self.wedged) as u64
                    + t.flag(r, self.leaving) as u64
                    + t.counter(r, self.edit_words)
                    + (0..self.senders.len()).map(|k| t.counter_at(r, self.cut_ready, k)).sum::<u64>()
                    + self.suspected_of(t, r).count_ones() as u64
            })
            .sum()
    }

    pub(crate) fn suspected_of(&self, t: &Table, rank: usize) -> u64 {
        t.word(rank, self.suspected, 0)
    }

    /// Proposal `no` as held in row `rank`, if the slot still holds it.
    pub(crate) fn read_proposal(&self, t: &Table, rank: usize, no: u64) -> Option<Proposal> {
        let base = (no % 2) as usize * PROP_WORDS;
        let w = |i: usize| t.word(rank, self.proposals, base + i);
        let n = (w(4) as usize).min(MAX_JOINS);
        let (version, len) = (w(5), w(6) as usize);
        let layout = (version > 0).then(|| {
            let mut doc = vec![0; len.min(MAX_DOC)];
            t.read_bytes(rank, self.docs, (no % 2) as usize * MAX_DOC, &mut doc);
            LayoutDoc::new(version, doc)
        });
        let p = Proposal {
            no,
            issuer: w(1) as usize,
            removed: w(2),
            left: w(3),
            joins: (0..n).map(|i| Joiner::decode(w(JOINS_AT + i))).collect(),
            layout,
        };
        (w(0) == no).then_some(p)
    }

    /// Writes `p` into its slot. Its layout document, if any, fits ([`MAX_DOC`]):
    /// the engine checks that before it proposes.
    pub(crate) fn write_proposal(&self, row: &LocalRow, p: &Proposal) {
        let base = (p.no % 2) as usize * PROP_WORDS;
        let (version, len) = p.layout.as_ref().map(|d| (d.version(), d.bytes().len())).unwrap_or((0, 0));
        let mut words = vec![p.no, p.issuer as u64, p.removed, p.left, p.joins.len() as u64, version, len as u64];
        words.extend(p.joins.iter().map(Joiner::encode));
        if let Some(d) = &p.layout {
            row.write_bytes(self.docs, (p.no % 2) as usize * MAX_DOC, &d.bytes()[..len.min(MAX_DOC)]);
        }
        for (i, w) in words.into_iter().enumerate() {
            row.store_word(self.proposals, base + i, w);
        }
    }

    /// Appends `edit` to this row's edit list (the guard is raised by the caller's
    /// [`MembershipLayout::pushes`] order: data first). False if the list is full.
    pub(crate) fn append_edit(&self, row: &LocalRow, edit: &[u8]) -> bool {
        let at = row.get(self.edit_words) as usize;
        let words = 1 + edit.len().div_ceil(8);
        if (at + words) * 8 > MAX_EDITS {
            return false;
        }
        row.store_word(self.edits, at, edit.len() as u64);
        let mut padded = edit.to_vec();
        padded.resize(edit.len().div_ceil(8) * 8, 0);
        row.write_bytes(self.edits, (at + 1) * 8, &padded);
        row.advance(self.edit_words, (at + words) as u64).expect("the edit list only grows");
        true
    }

    /// The edits row `rank` asks for (a malformed list yields what parses before it).
    pub(crate) fn read_edits(&self, t: &Table, rank: usize) -> Vec<Vec<u8>> {
        let end = (t.counter(rank, self.edit_words) as usize).min(MAX_EDITS / 8);
        let mut out = Vec::new();
        let mut at = 0;
        while at < end {
            let len = t.word(rank, self.edits, at) as usize;
            let words = len.div_ceil(8);
            if at + 1 + words > end {
                break;
            }
            let mut e = vec![0; len];
            t.read_bytes(rank, self.edits, (at + 1) * 8, &mut e);
            out.push(e);
            at += 1 + words;
        }
        out
    }

    pub(crate) fn cut_ready(&self, t: &Table, rank: usize, k: usize) -> bool {
        t.counter_at(rank, self.cut_ready, k) != 0
    }

    pub(crate) fn read_cut(&self, t: &Table, rank: usize, k: usize) -> Vec<u64> {
        (0..self.senders[k]).map(|s| t.word(rank, self.cuts, self.cut_at[k] + s)).collect()
    }

    pub(crate) fn write_cut(&self, row: &LocalRow, k: usize, cut: &[u64]) {
        for (s, v) in cut.iter().enumerate() {
            row.store_word(self.cuts, self.cut_at[k] + s, *v);
        }
    }

    /// What row `rank` received of subgroup `k`'s senders (valid once it is wedged).
    pub(crate) fn read_received(&self, t: &Table, rank: usize, k: usize) -> Vec<u64> {
        (0..self.senders[k]).map(|s| t.word(rank, self.received, self.cut_at[k] + s)).collect()
    }

    pub(crate) fn write_received(&self, row: &LocalRow, k: usize, received: &[u64]) {
        for (s, v) in received.iter().enumerate() {
            row.store_word(self.received, self.cut_at[k] + s, *v);
        }
    }

    pub(crate) fn set_cut_ready(&self, row: &LocalRow, k: usize) {
        row.advance_at(self.cut_ready, k, 1).expect("cut_ready only goes 0 -> 1");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_round_trip_and_a_full_list_refuses_more() {
        let lay = MembershipLayout::new(&[1]);
        let region = std::sync::Arc::new(spindle_sst::Region::new(lay.table_bytes(1)));
        let row = Table::create(
            lay.table_layout().clone(),
            &[NodeId(0)],
            NodeId(0),
            spindle_sst::transport::RegionId(0),
            region,
        )
        .unwrap();
        assert!(lay.read_edits(row.table(), 0).is_empty());
        assert!(lay.append_edit(&row, b"one"));
        assert!(lay.append_edit(&row, &[]));
        assert!(lay.append_edit(&row, &[9; 17]));
        assert_eq!(lay.read_edits(row.table(), 0), vec![b"one".to_vec(), vec![], vec![9; 17]]);
        let mut n = 3;
        while lay.append_edit(&row, &[1; 100]) {
            n += 1;
        }
        assert!(n > 3 && !lay.append_edit(&row, &[1; 100]), "the list is bounded by MAX_EDITS");
        assert_eq!(lay.read_edits(row.table(), 0).len(), n);
        // A length word that runs past the list ends the parse there.
        let at = row.get(lay.edit_words) as usize;
        row.store_word(lay.edits, at, u64::MAX);
        row.advance(lay.edit_words, at as u64 + 1).unwrap();
        assert_eq!(lay.read_edits(row.table(), 0).len(), n);
    }

    #[test]
    fn joiners_pack_into_a_word() {
        let j = Joiner { node: NodeId(1023), addr: Some("127.0.0.1:40001".parse().unwrap()) };
        assert_eq!(Joiner::decode(j.encode()), j);
        let k = Joiner { node: NodeId(7), addr: None };
        assert_eq!(Joiner::decode(k.encode()), k);
    }
}
