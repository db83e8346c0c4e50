//! Clients' requests at the members, and the pullers: the rules of
//! [`super::super::rules`] and the steps of [`super::super::puller`] over the
//! simulated logs and stores.

use super::{Ev, Job, Kind, Op, OpRecord, PullIn, Sim};
use crate::shard::map::{key_hash, Shard};
use crate::shard::puller::{Puller, Step, BATCH_BYTES, BATCH_KEYS};
use crate::shard::rules::{self, Admit, Table};
use crate::update::Writer;
use crate::Update;

impl Sim {
    /// A client starts its next request, or asks again (unless another attempt
    /// replaced this one).
    pub(super) fn client_next(&mut self, c: usize, attempt: u64) {
        if self.clients[c].attempt != attempt {
            return;
        }
        if self.clients[c].op.is_none() {
            if self.clients[c].left == 0 {
                return;
            }
            self.clients[c].left -= 1;
            let final_reads = c == self.cfg.clients;
            let key = match final_reads {
                true => self.cfg.keys - 1 - self.clients[c].left,
                false => self.rng.below(self.cfg.keys as u64) as usize,
            };
            let kind = match (final_reads, self.rng.below(20)) {
                (true, _) | (false, 0..=8) => Kind::Read,
                (false, 9..=10) => Kind::Write(None),
                _ => Kind::Write(Some(format!("c{c}-{}", self.clients[c].seq + 1).into_bytes())),
            };
            let by = match kind {
                Kind::Write(_) => {
                    self.clients[c].seq += 1;
                    Some(Writer { client: c as u64 + 1, seq: self.clients[c].seq })
                }
                Kind::Read => None,
            };
            self.history.push(OpRecord {
                client: c,
                key,
                kind,
                result: None,
                invoke: self.step,
                response: None,
                served: None,
            });
            let hist = self.history.len() - 1;
            self.clients[c].op = Some(Op { hist, key, by, shard: 0, life: 0, admitted: 0, read: None });
        }
        let cl = &mut self.clients[c];
        let op = cl.op.as_mut().expect("a request");
        let shard = self.maps[cl.version as usize].owner_of(&self.keys[op.key]);
        op.shard = shard;
        op.life = self.members[usize::from(shard)].life;
        self.later(Ev::Arrive { c, attempt });
    }

    /// The client's current request, if `attempt` is its current attempt and the
    /// member it went to is the same one.
    fn current(&self, c: usize, attempt: u64) -> Option<Op> {
        let cl = &self.clients[c];
        let op = cl.op.clone()?;
        (cl.attempt == attempt && self.members[usize::from(op.shard)].life == op.life).then_some(op)
    }

    /// The client asks again after a while, with the newest map if `refresh`.
    pub(super) fn retry(&mut self, c: usize, refresh: bool) {
        if refresh {
            self.clients[c].version = self.maps.len() as u64 - 1;
        }
        self.clients[c].attempt += 1;
        let attempt = self.clients[c].attempt;
        self.later(Ev::Client { c, attempt });
    }

    fn unadmit(&mut self, shard: Shard, c: usize) {
        let m = &mut self.members[usize::from(shard)];
        if let Some(i) = m.inflight.iter().position(|(x, _)| *x == c) {
            m.inflight.remove(i);
        }
    }

    /// The request reaches its member.
    pub(super) fn arrive(&mut self, c: usize, attempt: u64) {
        let Some(op) = self.current(c, attempt) else { return };
        let key = self.keys[op.key].clone();
        let m = &mut self.members[usize::from(op.shard)];
        let map = &self.maps[m.installed as usize];
        let table = &mut m.table;
        let admit = rules::admit(map, op.shard, &key, m.wedged, |id| {
            table.pulls.contains_key(&id) || table.closed.contains_key(&id)
        });
        match admit {
            Admit::Moved => {
                self.report.moved += 1;
                self.retry(c, true);
            }
            Admit::Wait => self.retry(c, false),
            Admit::Serve { pulling } => {
                let version = m.installed;
                m.inflight.push((c, version));
                let claimed = m.table.claims.contains(&key);
                self.clients[c].op.as_mut().expect("a request").admitted = version;
                match (op.by, &self.history[op.hist].kind) {
                    (Some(by), Kind::Write(v)) => {
                        let rec = rules::write_record(&key, v.as_deref(), by);
                        self.append(op.shard, rec, Job::Write { c, attempt });
                    }
                    _ => match pulling {
                        Some(_) if !claimed => self.later(Ev::SourceRead { c, attempt }),
                        _ => self.later(Ev::ReadStore { c, attempt }),
                    },
                }
            }
        }
    }

    /// A get of a key being pulled here asks the old owner for it.
    pub(super) fn source_read(&mut self, c: usize, attempt: u64) {
        let Some(op) = self.current(c, attempt) else { return };
        let key = self.keys[op.key].clone();
        let target = &self.members[usize::from(op.shard)];
        if target.installed != op.admitted {
            // The view changed: the read asks again rather than hold up, with
            // its wait, a drain this member's new view needs.
            self.unadmit(op.shard, c);
            return self.retry(c, true);
        }
        let Some(mig) = self.maps[target.installed as usize].pulling(key_hash(&key)).copied() else {
            return self.later(Ev::ReadStore { c, attempt });
        };
        if !self.source_ready(mig.from, mig.range) {
            return self.later(Ev::SourceRead { c, attempt });
        }
        let src = &self.members[usize::from(mig.from)];
        match src.table.keys.get(&key) {
            Some(v) => {
                // The read answers with the old owner's value, logging nothing
                // (as a member does: the pull's batches bring the same value).
                self.clients[c].op.as_mut().expect("a request").read = Some(Some(v.clone()));
                self.later(Ev::Answer { c, attempt });
            }
            None => self.later(Ev::ReadStore { c, attempt }),
        }
    }

    /// Whether the old owner `from` serves `range`'s records (see
    /// [`rules::source_ready`]).
    fn source_ready(&self, from: Shard, range: crate::shard::Range) -> bool {
        let m = &self.members[usize::from(from)];
        rules::source_ready(&self.maps[m.installed as usize], from, range, self.drained(from))
    }

    /// The old owner `from`'s answer to an ask for a batch, read now; `None` if
    /// it is not ready to give one.
    fn read_source(
        &mut self,
        from: Shard,
        range: crate::shard::Range,
        after: Option<&[u8]>,
        max: u32,
        max_bytes: u32,
    ) -> Option<(Vec<crate::Pair>, bool)> {
        if !self.source_ready(from, range) {
            return None;
        }
        let src = &self.members[usize::from(from)];
        let pairs = src.table.keys.iter().map(|(k, v)| Ok::<_, ()>((k.clone(), v.clone())));
        let (batch, more) = rules::take_batch(pairs, range, after, max.min(BATCH_KEYS), max_bytes).ok()?;
        self.report.pulled += batch.len() as u64;
        Some((batch, more))
    }

    /// Whether no request `shard`'s member admitted in an older view runs.
    fn drained(&self, shard: Shard) -> bool {
        let m = &self.members[usize::from(shard)];
        m.inflight.iter().all(|(_, v)| *v == m.installed)
    }

    /// A member appends the ends of pulls it owes, once drained (and looks
    /// again later until then).
    pub(super) fn tidy(&mut self, shard: Shard, life: u32) {
        let m = &mut self.members[usize::from(shard)];
        if m.life != life || m.wedged {
            return;
        }
        let owed = rules::ends_owed(&m.table.pulls().unwrap_or_default(), &self.maps[m.installed as usize]);
        if owed.is_empty() {
            return;
        }
        // Not while an end is being appended already, nor before the drain.
        if m.appends.iter().any(|(_, _, j)| *j == Job::Tidy) || !self.drained(shard) {
            return self.later(Ev::Tidy { shard, life });
        }
        for rec in owed {
            self.append(shard, rec, Job::Tidy);
        }
    }

    /// A get reads the member's store.
    pub(super) fn read_store(&mut self, c: usize, attempt: u64) {
        let Some(op) = self.current(c, attempt) else { return };
        let v = self.members[usize::from(op.shard)].table.keys.get(&self.keys[op.key]).cloned();
        self.clients[c].op.as_mut().expect("a request").read = Some(v);
        self.later(Ev::Answer { c, attempt });
    }

    /// A get answers.
    pub(super) fn answer(&mut self, c: usize, attempt: u64) {
        let Some(op) = self.current(c, attempt) else { return };
        self.unadmit(op.shard, c);
        self.history[op.hist].result = op.read.clone();
        self.done(c, op);
    }

    fn done(&mut self, c: usize, op: Op) {
        let h = &mut self.history[op.hist];
        h.response = Some(self.step);
        h.served = Some((op.shard, op.admitted));
        self.clients[c].op = None;
        self.report.ops += 1;
        self.retry(c, false);
    }

    /// Starts an append of `rec` at `shard`'s member.
    pub(super) fn append(&mut self, shard: Shard, rec: Update, job: Job) {
        self.next_append += 1;
        let id = self.next_append;
        let m = &mut self.members[usize::from(shard)];
        m.appends.push((id, rec, job));
        let life = m.life;
        self.later(Ev::Commit { shard, life, id });
    }

    /// Logs and applies a record at a member.
    pub(super) fn log(&mut self, shard: Shard, rec: Update) {
        let m = &mut self.members[usize::from(shard)];
        let Ok(()) = rules::apply(&mut m.table, &rec);
        m.log.push(rec);
    }

    /// An append is committed: its work goes on.
    pub(super) fn commit(&mut self, shard: Shard, life: u32, id: u64) {
        let m = &mut self.members[usize::from(shard)];
        if m.life != life {
            return;
        }
        let Some(i) = m.appends.iter().position(|(x, _, _)| *x == id) else { return };
        let (_, rec, job) = m.appends.remove(i);
        self.log(shard, rec);
        self.after_commit(shard, job);
    }

    /// What follows a committed append of `job`.
    fn after_commit(&mut self, shard: Shard, job: Job) {
        match job {
            Job::Write { c, attempt } => {
                if let Some(op) = self.current(c, attempt) {
                    self.unadmit(shard, c);
                    self.done(c, op);
                }
            }
            Job::Puller { mig } => {
                let life = self.members[usize::from(shard)].life;
                self.later(Ev::Pull { shard, life, mig, input: PullIn::Appended });
            }
            Job::Drop { target, life, mig } => {
                self.later(Ev::Pull { shard: target, life, mig, input: PullIn::Dropped })
            }
            Job::Tidy => {}
        }
    }

    /// Starts a puller at `shard` for every migration to it its view lists.
    pub(super) fn start_pullers(&mut self, shard: Shard) {
        let m = &self.members[usize::from(shard)];
        let migs: Vec<_> = self.maps[m.installed as usize]
            .migrations()
            .iter()
            .filter(|g| g.to == shard && !m.pullers.contains_key(&g.id))
            .copied()
            .collect();
        let life = m.life;
        for mig in migs {
            let (p, _) = Puller::with_batch(mig, self.cfg.pull_batch, BATCH_BYTES);
            self.members[usize::from(shard)].pullers.insert(mig.id, p);
            self.later(Ev::Pull { shard, life, mig: mig.id, input: PullIn::Start });
        }
    }

    /// A puller takes what its last step brought and does the next.
    pub(super) fn pull(&mut self, shard: Shard, life: u32, mig: u64, input: PullIn) {
        let m = &mut self.members[usize::from(shard)];
        if m.life != life {
            return;
        }
        // A migration the view no longer lists is over: its puller stops.
        let listed = self.maps[m.installed as usize].migrations().iter().any(|g| g.id == mig);
        if !listed && input != PullIn::Edited {
            m.pullers.remove(&mig);
            m.awaiting_edit.remove(&mig);
            return;
        }
        let Some(p) = m.pullers.get_mut(&mig) else { return };
        let step = match input {
            // The answer ahead waits in the puller for the append beside it.
            PullIn::Ahead(answer) => {
                match answer {
                    Some((pairs, more)) => self.report.ahead += u64::from(p.ahead_batch(pairs, more)),
                    None => p.ahead_failed(),
                }
                return;
            }
            PullIn::Start | PullIn::Retry => p.retry(),
            PullIn::Batch(pairs, writers, more) => p.batch(pairs, writers, more),
            PullIn::Appended => p.appended(),
            PullIn::Dropped => p.dropped(),
            PullIn::Edited => p.edited(),
        };
        let again = Ev::Pull { shard, life, mig, input: PullIn::Retry };
        match step {
            Step::Ask { from, range, after, max, max_bytes } => {
                let Some((batch, more)) = self.read_source(from, range, after.as_deref(), max, max_bytes) else {
                    return self.later(again);
                };
                let src = &self.members[usize::from(from)];
                let writers = after
                    .is_none()
                    .then(|| src.table.writers.iter().map(|(c, s)| Writer { client: *c, seq: *s }).collect());
                self.later(Ev::Pull { shard, life, mig, input: PullIn::Batch(batch, writers, more) });
            }
            Step::Append(rec) => {
                // By a coin, the next batch is asked for beside the append; its
                // answer (or none) comes before or after the append is in.
                let ahead = if self.rng.chance(70) { p.ask_ahead() } else { None };
                if let Some(Step::Ask { from, range, after, max, max_bytes }) = ahead {
                    let answer = match self.rng.chance(10) {
                        true => None,
                        false => self.read_source(from, range, after.as_deref(), max, max_bytes),
                    };
                    self.later(Ev::Pull { shard, life, mig, input: PullIn::Ahead(answer) });
                }
                self.append(shard, rec, Job::Puller { mig })
            }
            Step::Drop { from, range } => {
                if !self.source_ready(from, range) {
                    return self.later(again);
                }
                self.append(from, Update::DropRange { migration: mig, range }, Job::Drop { target: shard, life, mig });
            }
            Step::Edit(e) => {
                self.members[usize::from(shard)].awaiting_edit.insert(mig);
                if !self.edits.contains(&e) {
                    self.edits.push(e);
                }
                self.kick();
            }
            Step::Done => {
                self.members[usize::from(shard)].pullers.remove(&mig);
                self.report.migrations += 1;
            }
        }
    }
}
