//! A joiner's catch-up as the driver runs it (`crate::catchup::fetch`), one
//! request per step: ask each other member in turn; the first complete one is
//! the source and serves pages until the seam; if none is, the longest history
//! among the new members is; if the source dies, start again from the next.

use crate::engine::{Now, Seen, Served, TopicEngine};
use crate::error::CatchUpError;
use crate::history::Entry;
use spindle_sst::transport::NodeId;
use spindle_views::view::ViewId;

/// A late join in progress at one member.
#[derive(Debug)]
pub(crate) struct Fetch {
    pub(crate) view: ViewId,
    /// Where the joiner's own history ends.
    pub(crate) from: u64,
    /// Members not asked yet.
    pub(crate) pending: Vec<NodeId>,
    /// The step the late join began at.
    pub(crate) started: u64,
    /// The member serving pages now (`any`: a new member as the source).
    source: Option<(NodeId, bool)>,
    got: Vec<Entry>,
    seen: Seen,
    next: u64,
    news: Vec<(u64, NodeId)>,
    errors: Vec<CatchUpError>,
}

/// What one step of a fetch came to.
#[derive(Debug)]
pub(crate) enum Step {
    /// Ask again at a later step.
    Going,
    /// The history and its seam (or, with neither, this node's own is all).
    Done { entries: Vec<Entry>, seam: Option<u64>, seen: Seen, failed: Option<CatchUpError> },
}

impl Fetch {
    pub(crate) fn new(view: ViewId, from: u64, candidates: Vec<NodeId>, started: u64) -> Fetch {
        Fetch {
            view,
            from,
            pending: candidates,
            started,
            source: None,
            got: Vec::new(),
            seen: Seen::new(),
            next: from,
            news: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// One request to a member; `ask(member)` is its engine and log, if it runs
    /// (a dead member does not answer).
    pub(crate) fn step<'a>(
        &mut self,
        mut ask: impl FnMut(NodeId) -> Option<(&'a TopicEngine<u32>, &'a [Vec<u8>])>,
        has_log: bool,
        page: usize,
        now: Now,
    ) -> Step {
        let (to, any) = match self.source {
            Some(s) => s,
            None => match self.pending.first().copied() {
                Some(c) => (c, false),
                None => return self.give_up(),
            },
        };
        let Some((engine, log)) = ask(to) else {
            self.errors.push(CatchUpError::NoAnswer);
            self.restart(to);
            return Step::Going;
        };
        let served = engine.serve(self.view, self.next, any, page, has_log, now);
        if super::tracing_on() {
            eprintln!(
                "  ask {to} view {} from {}: {:?}",
                self.view.0,
                self.next,
                match &served {
                    Served::Entries { seam, entries, more, .. } =>
                        format!("entries {} seam {seam} more {more}", entries.len()),
                    other => format!("{other:?}"),
                }
            );
        }
        match served {
            Served::NotBegun => Step::Going,
            Served::TooOld => {
                self.errors.push(CatchUpError::Refused);
                self.restart(to);
                Step::Going
            }
            Served::New { seam } => {
                self.news.push((seam, to));
                self.pending.retain(|c| *c != to);
                Step::Going
            }
            // The log's writer has not written up to the seam yet: ask again.
            Served::FromLog { seam, .. } if (log.len() as u64) < seam => Step::Going,
            Served::FromLog { seam, seen } => {
                self.seen = seen;
                let mut used = 0;
                let mut more = false;
                for (seq, r) in log.iter().enumerate().skip(self.next as usize).take_while(|(s, _)| (*s as u64) < seam)
                {
                    if used > 0 && used + r.len() > page {
                        more = true;
                        break;
                    }
                    used += r.len();
                    match Entry::from_record(seq as u64, r) {
                        Some(e) => self.got.push(e),
                        None => return self.fail(CatchUpError::Refused),
                    }
                }
                self.page(to, any, seam, more)
            }
            Served::Entries { seam, entries, more, seen } => {
                self.got.extend(entries);
                self.seen = seen;
                self.page(to, any, seam, more)
            }
        }
    }

    fn page(&mut self, to: NodeId, any: bool, seam: u64, more: bool) -> Step {
        match self.got.last() {
            Some(l) if more && l.seq + 1 > self.next => {
                self.next = l.seq + 1;
                self.source = Some((to, any));
                Step::Going
            }
            _ => Step::Done {
                entries: std::mem::take(&mut self.got),
                seam: Some(seam),
                seen: std::mem::take(&mut self.seen),
                failed: None,
            },
        }
    }

    /// The source failed: drop what it gave and go on with the next member.
    fn restart(&mut self, failed: NodeId) {
        self.pending.retain(|c| *c != failed);
        self.source = None;
        self.got.clear();
        self.next = self.from;
    }

    /// Nobody complete answered: the longest history among the new members, or
    /// this node's own.
    fn give_up(&mut self) -> Step {
        self.news.sort_by_key(|(seam, n)| (std::cmp::Reverse(*seam), n.0));
        if let Some(&(seam, c)) = self.news.first().filter(|(seam, _)| *seam > self.from) {
            self.news.clear();
            self.source = Some((c, true));
            let _ = seam;
            return Step::Going;
        }
        let failed = self.errors.first().copied();
        Step::Done { entries: Vec::new(), seam: None, seen: Seen::new(), failed }
    }

    fn fail(&mut self, why: CatchUpError) -> Step {
        Step::Done { entries: Vec::new(), seam: None, seen: Seen::new(), failed: Some(why) }
    }
}
