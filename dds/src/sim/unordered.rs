//! Unordered topics: each member delivers messages as they reach it, every
//! sender's in that sender's order but interleaved at random and differently at
//! each member; nothing is agreed at a view change. A survivor then has what it
//! received: every message of the senders that stay (their links to it are
//! reliable), a prefix of those of the member that left; the rest is dropped, not
//! sent again.

use super::world::World;
use crate::sink::Src;
use spindle_sst::transport::NodeId;

impl World {
    pub(crate) fn unordered(&self) -> bool {
        self.cfg.qos.level == crate::qos::Level::Unordered
    }

    /// Member `n` delivers up to `count` messages as they reach it: each time the
    /// next message of a random sender it has messages of.
    pub(crate) fn deliver_on_receipt(&mut self, n: NodeId, count: usize, from: Option<NodeId>) {
        let (view, now, keyed) = (self.view, self.now(), self.cfg.instances > 0);
        let len = self.log.len();
        self.members[n.0 as usize].taken.resize(len, false);
        let mut any = false;
        for _ in 0..count {
            let heads = self.heads(n, from);
            if heads.is_empty() {
                break;
            }
            let i = heads[self.rng.below(heads.len() as u64) as usize];
            let m = &mut self.members[n.0 as usize];
            let Some(e) = m.engine.as_mut() else { return };
            let (sender, bytes) = &self.log[i];
            e.deliver(view, *sender, Src::Bytes(bytes), now, &mut m.fx);
            m.taken[i] = true;
            m.cursor += 1;
            any = true;
        }
        if !any {
            return;
        }
        let m = &mut self.members[n.0 as usize];
        if let Some(e) = m.engine.as_mut() {
            e.batch_end(&mut m.fx);
        }
        let out = m.drain(keyed);
        self.hand_to_clients(n, &out);
    }

    /// The first message member `n` has not taken of each sender (of `from` only,
    /// if given), by position in the view's log.
    fn heads(&self, n: NodeId, from: Option<NodeId>) -> Vec<usize> {
        let taken = &self.members[n.0 as usize].taken;
        let mut heads: Vec<usize> = Vec::new();
        for (i, (s, _)) in self.log.iter().enumerate() {
            if !taken[i] && from.map_or(true, |f| f == *s) && !heads.iter().any(|h| self.log[*h].0 == *s) {
                heads.push(i);
            }
        }
        heads
    }

    /// The view ends with `left` gone: each survivor delivers every message of the
    /// senders that stay and some of those of `left`; the rest is dropped.
    pub(crate) fn end_unordered_view(&mut self, left: Option<NodeId>) {
        for n in self.in_view.clone() {
            if Some(n) == left {
                continue;
            }
            for s in self.in_view.clone() {
                let all = self.log.len();
                let k = match Some(s) == left {
                    true => self.rng.below(all as u64 + 1) as usize,
                    false => all,
                };
                self.deliver_on_receipt(n, k, Some(s));
            }
        }
        self.sent += self.log.len() as u64;
        self.log.clear();
        for m in &mut self.members {
            m.taken.clear();
            m.cursor = 0;
        }
    }
}
