//! The simulated domain: members, clients, the group's order, and the steps.

use super::catchup::{Fetch, Step};
use super::clients::Client;
use super::config::SimConfig;
use super::member::{instance_of, key_of, kind_of, sample_bytes, samples_of, Member, SampleKey, WRITER};
use super::{Stats, Violation};
use crate::engine::record::Fx;
use crate::engine::Now;
use crate::qos::Level;
use crate::sample::pack_bytes;
use crate::sink::Src;
use spindle_smc::sim::Rng;
use spindle_sst::transport::NodeId;
use spindle_views::view::ViewId;
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

/// See the module docs.
#[derive(Debug)]
pub(crate) struct World {
    pub(crate) cfg: SimConfig,
    pub(crate) rng: Rng,
    start: Instant,
    pub(crate) step: u64,
    pub(crate) members: Vec<Member>,
    pub(crate) view: ViewId,
    pub(crate) in_view: Vec<NodeId>,
    /// The view's messages in the group's order: (sender, bytes).
    pub(crate) log: Vec<(NodeId, Vec<u8>)>,
    /// How much of `log` the reference order took in (all that any member delivered).
    committed: usize,
    /// The topic's order as the group fixed it: each sample's identity and instance.
    pub(crate) order: Vec<(SampleKey, u64)>,
    /// Each sample's kind in the order (data, disposal, unregistration).
    pub(crate) kinds: Vec<u64>,
    /// The step each sample of the order was written at (its source timestamp).
    pub(crate) stamps: Vec<u64>,
    /// Unordered topics: messages sent in views that ended.
    pub(crate) sent: u64,
    /// The resend filter of the reference order: the highest number per client writer.
    seen: HashMap<(u64, u32), u64>,
    pub(crate) fetches: Vec<(NodeId, Fetch)>,
    pub(crate) clients: Vec<Client>,
    /// Nodes that have not started yet.
    pub(crate) later: Vec<NodeId>,
    pub(crate) dead: Vec<NodeId>,
    /// Running members out of the view (their engines kept), to be taken back.
    pub(crate) removed: Vec<NodeId>,
    pub(crate) stats: Stats,
    /// Late joins that ended without the history (reported to the readers).
    pub(crate) failed_joins: Vec<NodeId>,
}

impl World {
    pub(crate) fn new(cfg: SimConfig) -> World {
        let rng = Rng::new(cfg.seed ^ 0x5eed);
        let n = cfg.first + cfg.later;
        let members = (0..n).map(|i| Member::new(NodeId(i as u32), cfg.writes)).collect();
        let clients = (0..cfg.clients).map(|i| Client::new(100 + i as u64, cfg.client_writes)).collect();
        let later = (cfg.first..n).map(|i| NodeId(i as u32)).collect();
        World {
            cfg,
            rng,
            start: Instant::now(),
            step: 0,
            members,
            view: ViewId(0),
            in_view: Vec::new(),
            log: Vec::new(),
            committed: 0,
            order: Vec::new(),
            kinds: Vec::new(),
            stamps: Vec::new(),
            sent: 0,
            seen: HashMap::new(),
            fetches: Vec::new(),
            clients,
            later,
            dead: Vec::new(),
            removed: Vec::new(),
            stats: Stats::default(),
            failed_joins: Vec::new(),
        }
    }

    /// The simulated time: a millisecond per step.
    pub(crate) fn now(&self) -> Now {
        let d = Duration::from_millis(self.step);
        Now { at: self.start + d, wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + d }
    }

    fn keyed(&self) -> bool {
        self.cfg.instances > 0
    }

    pub(crate) fn member(&mut self, n: NodeId) -> &mut Member {
        &mut self.members[n.0 as usize]
    }

    pub(crate) fn violation(&self, (invariant, detail): (&'static str, String)) -> Violation {
        Violation { seed: self.cfg.seed, step: self.step, invariant, detail }
    }

    /// One step: a write, a delivery, a catch-up request, or (with `faults`) a
    /// view change or a client's failover.
    pub(crate) fn act(&mut self, faults: bool) {
        let roll = self.rng.below(100);
        match roll {
            0..=29 => self.member_write(),
            30..=44 => self.client_write(),
            45..=74 => self.deliver_some(),
            75..=84 => self.fetch_step(),
            85..=92 => self.flush_some_log(),
            _ if faults => self.fault(),
            _ => {
                self.deliver_some();
                self.flush_some_log();
            }
        }
        // Clients whose member died move on at once (as a client's reconnect does).
        for i in 0..self.clients.len() {
            if self.clients[i].at.map_or(true, |m| !self.in_view.contains(&m)) {
                self.failover(i);
            }
        }
    }

    /// A random member's log writer makes some of what it was handed durable.
    fn flush_some_log(&mut self) {
        let waiting: Vec<NodeId> =
            self.in_view.iter().copied().filter(|n| !self.members[n.0 as usize].pending.is_empty()).collect();
        if waiting.is_empty() {
            return;
        }
        let n = waiting[self.rng.below(waiting.len() as u64) as usize];
        let k = 1 + self.rng.below(8) as usize;
        let keyed = self.keyed();
        let out = self.member(n).flush_log(k, keyed);
        self.hand_to_clients(n, &out);
    }

    fn member_write(&mut self) {
        let writers: Vec<NodeId> =
            self.in_view.iter().copied().filter(|n| self.members[n.0 as usize].writes_left > 0).collect();
        if writers.is_empty() {
            return;
        }
        let n = writers[self.rng.below(writers.len() as u64) as usize];
        // Now and then a batch: several samples packed into one message.
        let want = if self.rng.below(4) == 0 { 2 + self.rng.below(3) } else { 1 };
        let count = want.min(self.members[n.0 as usize].writes_left);
        let instances: Vec<u64> = (0..count).map(|_| self.pick_instance()).collect();
        let wall = self.now().wall;
        let m = self.member(n);
        let parts: Vec<Vec<u8>> = instances
            .iter()
            .map(|instance| {
                let h = crate::sample::header(WRITER, m.next_write, wall);
                let bytes = sample_bytes(&h, *instance, m.next_write);
                m.next_write += 1;
                m.writes_left -= 1;
                bytes
            })
            .collect();
        let bytes = match parts.len() {
            1 => parts.into_iter().next().expect("one"),
            _ => {
                self.stats.packs += 1;
                pack_bytes(&parts)
            }
        };
        self.log.push((n, bytes));
    }

    pub(crate) fn pick_instance(&mut self) -> u64 {
        if self.cfg.instances == 0 {
            0
        } else {
            1 + self.rng.below(self.cfg.instances)
        }
    }

    /// The instance of a client's sample `seq` (the same when it is sent again).
    pub(crate) fn client_instance(&self, seq: u64) -> u64 {
        if self.cfg.instances == 0 {
            0
        } else {
            1 + seq % self.cfg.instances
        }
    }

    /// The view's order starts again (a new view).
    pub(crate) fn commit_reset(&mut self) {
        self.committed = 0;
    }

    fn client_write(&mut self) {
        let ready: Vec<usize> = (0..self.clients.len())
            .filter(|i| {
                self.clients[*i].writes_left > 0 && self.clients[*i].at.is_some_and(|m| self.in_view.contains(&m))
            })
            .collect();
        if ready.is_empty() {
            return;
        }
        let i = ready[self.rng.below(ready.len() as u64) as usize];
        let instance = self.client_instance(self.clients[i].next_write);
        let ns = self.now().wall.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        let c = &mut self.clients[i];
        let bytes = c.sample(self.cfg.qos.level, c.next_write, instance, ns);
        let via = c.at.expect("attached");
        c.next_write += 1;
        c.writes_left -= 1;
        self.log.push((via, bytes));
    }

    /// A random member of the view delivers the next few messages of the order.
    fn deliver_some(&mut self) {
        let behind: Vec<NodeId> =
            self.in_view.iter().copied().filter(|n| self.members[n.0 as usize].cursor < self.log.len()).collect();
        if behind.is_empty() {
            return;
        }
        let n = behind[self.rng.below(behind.len() as u64) as usize];
        let count = 1 + self.rng.below(4) as usize;
        self.deliver(n, count);
    }

    /// Member `n` delivers up to `count` messages of the order, as one batch.
    pub(crate) fn deliver(&mut self, n: NodeId, count: usize) {
        if self.unordered() {
            return self.deliver_on_receipt(n, count, None);
        }
        let (view, now, keyed) = (self.view, self.now(), self.keyed());
        let m = &mut self.members[n.0 as usize];
        let Some(e) = m.engine.as_mut() else { return };
        let to = (m.cursor + count).min(self.log.len());
        let batch = self.log[m.cursor..to].iter().map(|(sender, bytes)| (*sender, Src::Bytes(bytes)));
        e.deliver_all(view, batch, now, &mut m.fx);
        e.batch_end(&mut m.fx);
        m.cursor = to;
        let out = m.drain(keyed);
        self.hand_to_clients(n, &out);
        self.commit(to);
    }

    pub(crate) fn hand_to_clients(&mut self, from: NodeId, fx: &[Fx]) {
        if fx.is_empty() {
            return;
        }
        for c in &mut self.clients {
            c.take(from, fx);
        }
    }

    /// The reference order takes in `log[..upto]`: delivered somewhere, so by
    /// every member of the view. A client's resend takes no number.
    pub(crate) fn commit(&mut self, upto: usize) {
        let keyed = self.keyed();
        while self.committed < upto {
            let (sender, message) = &self.log[self.committed];
            self.committed += 1;
            for bytes in samples_of(message) {
                let src = Src::Bytes(bytes);
                let (info, _) = crate::sample::info_of(|i| src.word(i), *sender, self.view, 0, false);
                if let Some(c) = info.writer.client {
                    let last = self.seen.entry((c, info.writer.id)).or_insert(0);
                    if info.seq <= *last {
                        continue;
                    }
                    *last = info.seq;
                    self.stats.client_samples += 1;
                }
                self.order.push((key_of(&info), instance_of(bytes, keyed)));
                self.kinds.push(kind_of(bytes, keyed));
                let base = self.now().wall - Duration::from_millis(self.step);
                self.stamps.push(info.source_timestamp.duration_since(base).map_or(0, |d| d.as_millis() as u64));
            }
        }
    }

    /// Starts a late join's request at a random member that is catching up.
    fn fetch_step(&mut self) {
        if self.fetches.is_empty() {
            return;
        }
        let i = self.rng.below(self.fetches.len() as u64) as usize;
        let (page, now, has_log) = (self.cfg.page, self.now(), self.cfg.qos.level == Level::Logged);
        let (n, mut f) = self.fetches.remove(i);
        let members = &self.members;
        let in_view = &self.in_view;
        let step = f.step(
            |c| {
                let m = &members[c.0 as usize];
                let e = m.engine.as_ref().filter(|_| in_view.contains(&c))?;
                Some((e, &m.log[..]))
            },
            has_log,
            page,
            now,
        );
        match step {
            Step::Going => {
                self.stats.pages += 1;
                self.fetches.push((n, f));
            }
            Step::Done { entries, seam, seen, failed } => {
                if super::tracing_on() {
                    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
                    eprintln!("step {}: {n} caught up: {seqs:?} seam {seam:?} failed {failed:?}", self.step);
                }
                if failed.is_some() {
                    self.failed_joins.push(n);
                }
                let (keyed, step) = (self.keyed(), self.step);
                let m = self.member(n);
                if let Some(e) = m.engine.as_mut() {
                    let start = seam.unwrap_or(0).max(e.next_seq());
                    if let Some(r) = m.readers.last_mut() {
                        // Only a first join moves where its order starts (a rejoin
                        // goes on from where it stopped).
                        if r.offers.is_empty() {
                            r.start = start;
                        }
                        r.histories.push((r.offers.len(), f.started, step));
                    }
                    e.caught_up(entries, seam, &seen, failed, now, &mut m.fx);
                }
                let out = m.drain(keyed);
                self.hand_to_clients(n, &out);
            }
        }
    }
}
