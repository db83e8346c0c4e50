//! The relay of large payloads where rows are copied (see [`SubgroupSpec::relay`]):
//! the chain of Derecho's RDMC, so that a sender's link carries one copy of each
//! payload instead of one per member.
//!
//! ```text
//!   sender s ──payload──▶ s+1 ──payload──▶ s+2 ──▶ … ──▶ s-1      (ranks mod n)
//!            ──descriptor, sent──▶ every member, as without a relay
//! ```
//!
//! Member `m` takes a descriptor of sender `s` only once the payload has reached it:
//! from `s` itself for `m = s + 1` (the payload push goes before the slots on the
//! same link), otherwise once its predecessor `m - 1` says so in its `relayed[s]`
//! column, which counts the entries of `s` it has passed on; it pushes that count
//! once per pass, after the pass's last payload, on the same link, so the bytes are
//! in when the count is seen. (A push copies its range when it is posted, not when
//! it is queued: a count queued before a later payload would go out with that
//! payload's entry counted and ahead of its bytes. Peers' entries are taken by one
//! receive stage per pass today, but a transport's receiving thread may land new
//! entries while it runs, and a count queued at the pass's end holds for any
//! number of stages.)
//! Having taken it, `m` passes the payload on to `m + 1` (unless that is `s`) from
//! its own copy of the sender's row, which stays as it is until every member has
//! delivered the message (the arena rule), so it is sent from where it lies.
//!
//! Virtual synchrony needs nothing more: `received` counts only what a member has
//! taken, payload included, so a relay that dies mid-message leaves the members
//! after it without that message received, the ragged trim's cut stays below it,
//! and no survivor delivers it in this view.

use super::*;
use spindle_sst::table::ColumnRange;
use spindle_sst::CounterVec;

/// This node's place in every sender's chain.
#[derive(Debug)]
pub(super) struct Relay {
    relayed: CounterVec,
    /// The members before and after this one (ranks mod n): every chain runs
    /// through them in that order.
    prev: usize,
    next: usize,
    /// Per sender rank: whether its payloads come through `prev` (not from the
    /// sender itself, and this node is not the sender).
    waits: Vec<bool>,
    /// Per sender rank: whether this node passes its payloads on to `next` (it is
    /// neither the sender nor last in the chain).
    passes: Vec<bool>,
    /// Per sender rank: entries passed on so far, and whether that grew this pass.
    passed: Vec<u64>,
    grew: bool,
}

impl Relay {
    /// This node's relay in a subgroup laid out by `lay`, if the subgroup relays and
    /// its arenas are copied (not read in place).
    pub(super) fn new(lay: &SmcLayout, table: &Table, sender_row: &[usize]) -> Option<Relay> {
        let relayed = lay.relayed?;
        if table.reads_in_place(lay.arena) {
            return None;
        }
        let (n, me) = (table.rows(), table.my_rank());
        let place = |s: usize| (me + n - s) % n; // 1 for the first after the sender
        let waits = sender_row.iter().map(|&s| place(s) > 1).collect();
        let passes = sender_row.iter().map(|&s| place(s) != 0 && place(s) + 1 < n).collect();
        let (prev, next) = ((me + n - 1) % n, (me + 1) % n);
        Some(Relay { relayed, prev, next, waits, passes, passed: vec![0; sender_row.len()], grew: false })
    }

    /// The member this node, as a sender, sends its payloads to: the first of its chain.
    pub(super) fn first(&self) -> usize {
        self.next
    }

    /// Whether entry `entry` of sender rank `r`, a descriptor, has its payload here.
    pub(super) fn arrived(&self, table: &Table, r: usize, entry: u64) -> bool {
        !self.waits[r] || table.counter_at(self.prev, self.relayed, r) > entry
    }

    /// Passes on the payload of entry `entry` of sender rank `r` (`payload`, in the
    /// arena of row `row`), if this node is not the last in its chain.
    pub(super) fn pass_on(
        &mut self,
        table: &Table,
        r: usize,
        row: usize,
        payload: ColumnRange,
        entry: u64,
        pushes: &mut Pushes,
    ) {
        if !self.passes[r] {
            return;
        }
        pushes.push(table.forward(row, payload, 1 << self.next).stable());
        self.passed[r] = entry + 1;
        self.grew = true;
    }

    /// The planted bug `Faults::relay_count_first`: entry `entry` of sender rank
    /// `r` counted as passed on, and the count queued, before its payload is.
    #[cfg(any(test, loom))]
    pub(super) fn count_ahead(&mut self, r: usize, entry: u64, me: &LocalRow, pushes: &mut Pushes) {
        if self.passes[r] {
            self.passed[r] = entry + 1;
            self.grew = true;
            self.publish(me, pushes);
        }
    }

    /// At the end of a pass: publishes what was passed on, after every payload the
    /// pass queued, to the members that wait on it.
    pub(super) fn publish(&mut self, me: &LocalRow, pushes: &mut Pushes) {
        if !std::mem::take(&mut self.grew) {
            return;
        }
        for (r, &n) in self.passed.iter().enumerate().filter(|(r, _)| self.passes[*r]) {
            me.advance_at(self.relayed, r, n).expect("relayed only grows");
        }
        pushes.push(me.push_to(self.relayed.range(), 1 << self.next));
    }
}
