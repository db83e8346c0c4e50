//! The receive stage: every new entry of every sender, checked, taken into
//! `received` (the pass pushes it once) and the nulls owed worked out; and the
//! null run that pays them.
//!
//! A peer's entries are input from another process (over tcp, from another host), so
//! each header is checked before anything relies on it: a known kind; a message no
//! longer than a slot's `max_msg`; a descriptor whose payload lies wholly inside the
//! arena, at a word boundary, and is larger than a slot (the sender would have used a
//! slot otherwise); a null run of at least one index; the next index of that sender.
//! A sender whose entry fails is *refused*: its entries are not taken from then on,
//! and [`SmcCore::take_refused`] reports it once, for the layer above to remove it
//! from the group (in ordered mode nothing after its next position can be delivered
//! until then).

use super::*;
use crate::spec::HEADER;

/// What a received entry is checked against: the subgroup's largest slot message
/// and the arena's size.
#[derive(Clone, Copy)]
struct Limits {
    max_msg: usize,
    arena: u64,
}

impl SmcCore {
    /// Receive stage: takes every new entry of every sender into `received` (the
    /// pass pushes it once) and works out the nulls owed.
    pub(super) fn receive_stage(&mut self, pushes: &mut Pushes) -> bool {
        let mut taken = 0u64;
        let table = &*self.table;
        let limits = Limits { max_msg: self.spec.max_msg, arena: self.lay.arena.len() as u64 };
        let (window, slot_words) = (self.spec.window, self.lay.slot_bytes / 8);
        for r in 0..self.spec.senders.len() {
            let row = self.sender_row[r];
            let sent = table.counter(row, self.lay.sent);
            // The sender's place, kept in locals for the run and stored once after it.
            let (mut seen, mut recv) = (self.seen[r], self.recv[r]);
            if seen >= sent || self.bad[r] {
                continue;
            }
            let slots = table.area(row, self.lay.slots);
            let pending = &mut self.pending[r];
            // The slot of entry `seen`, stepped without a division per entry.
            let mut slot = (seen % window as u64) as usize;
            let mut refused = None;
            while seen < sent {
                let base = slot * slot_words;
                let mut h = [0u64; 2];
                slots.read_words(base, &mut h);
                let [w0, first] = h;
                // The common case first: a plain message right after a run of them
                // lengthens it, with the checks `check_entry` makes of it (the
                // sender's next index, a length a slot holds).
                if first == recv && plain_in_slot(limits, w0) && lengthen(pending, first) {
                    recv += 1;
                    seen += 1;
                    taken += 1;
                    slot = if slot + 1 == window { 0 } else { slot + 1 };
                    continue;
                }
                // A descriptor's offset: read only for a descriptor.
                let at = if is_large(w0) { slots.word(base + 2) } else { 0 };
                let checked = check_entry(limits, recv, slot, w0, first, at).and_then(|e| match e.pack {
                    0 => Ok(e),
                    n => check_pack(n, e.len as usize, |i| slots.word(base + HEADER / 8 + i)).map(|_| e),
                });
                let e = match checked {
                    Ok(e) => e,
                    Err(why) => {
                        refused = Some(why);
                        break;
                    }
                };
                if let (Some(x), Some(at)) = (&mut self.relay, e.arena_at()) {
                    self.held[r] = !x.arrived(table, r, seen);
                    #[cfg(any(test, loom))]
                    if self.faults.relay_early {
                        self.held[r] = false;
                    }
                    if self.held[r] {
                        break; // its payload has not reached this node yet
                    }
                    let payload = self.lay.arena.sub_range(at, e.len as usize);
                    #[cfg(any(test, loom))]
                    if self.faults.relay_count_first {
                        x.count_ahead(r, seen, &self.row, pushes);
                    }
                    x.pass_on(table, r, row, payload, seen, pushes);
                }
                queue_entry(pending, e);
                recv = e.end;
                seen += 1;
                taken += 1;
                slot = if slot + 1 == window { 0 } else { slot + 1 };
            }
            (self.seen[r], self.recv[r]) = (seen, recv);
            if let Some(why) = refused {
                self.bad[r] = true;
                self.stats.refused += 1;
                let node = self.spec.senders[r];
                tracing::warn!(sender = %node, entry = seen, %why, "entry refused");
                self.refused.push((node, why));
            }
        }
        if taken == 0 {
            return false;
        }
        for r in 0..self.recv.len() {
            self.row.advance_at(self.lay.received, r, self.recv[r]).expect("received only grows");
        }
        self.stats.recv_batches.record(taken);
        if self.spec.mode == Mode::Ordered {
            if let Some(s) = self.me_sender {
                for (r, &n) in self.recv.iter().enumerate() {
                    // Received index n - 1 of sender r: own positions before it must be filled.
                    let need = match r.cmp(&s) {
                        std::cmp::Ordering::Greater => n,
                        std::cmp::Ordering::Less => n.saturating_sub(1),
                        std::cmp::Ordering::Equal => 0,
                    };
                    self.null_target = self.null_target.max(need);
                }
            }
        }
        true
    }

    /// This node's own entries just pushed (`sent` now covers them), taken in as
    /// the receive stage would take them, without its checks: this node wrote them
    /// (no peer's bytes), and no relay waits on a sender's own payloads. Returns
    /// true if any was taken.
    pub(super) fn take_own(&mut self) -> bool {
        let Some(r) = self.me_sender else { return false };
        let (mut seen, to) = (self.seen[r], self.pushed);
        if seen >= to {
            return false;
        }
        let slots = self.table.area(self.sender_row[r], self.lay.slots);
        let (window, slot_words) = (self.spec.window, self.lay.slot_bytes / 8);
        let mut slot = (seen % window as u64) as usize;
        let pending = &mut self.pending[r];
        while seen < to {
            let base = slot * slot_words;
            let mut h = [0u64; 2];
            slots.read_words(base, &mut h);
            // A plain message after a run of them (this node wrote it) lengthens it.
            if !(is_plain(h[0]) && lengthen(pending, h[1])) {
                let at = if is_large(h[0]) { slots.word(base + 2) } else { 0 };
                queue_entry(pending, own_entry(slot, h[0], h[1], at));
            }
            seen += 1;
            slot = if slot + 1 == window { 0 } else { slot + 1 };
        }
        let taken = seen - self.seen[r];
        self.seen[r] = seen;
        self.recv[r] = pending.back().map_or(self.recv[r], |e| e.end);
        self.row.advance_at(self.lay.received, r, self.recv[r]).expect("received only grows");
        self.stats.recv_batches.record(taken);
        true
    }

    /// Senders refused since the last call, each once, with the reason (see the
    /// module docs): the layer above removes them from the group.
    pub fn take_refused(&mut self) -> Vec<(NodeId, String)> {
        std::mem::take(&mut self.refused)
    }

    /// Adds the nulls this sender owes as one run, if it may: only when every
    /// claimed entry is taken in and the senders' lease could be revoked (see
    /// [`super::send`]); a new lease is granted after the run.
    pub(super) fn add_nulls(&mut self) -> bool {
        #[cfg(any(test, loom))]
        if self.faults.no_nulls {
            return false;
        }
        #[cfg(any(test, loom))]
        if self.faults.endless_nulls && self.me_sender.is_some() {
            self.null_target = self.null_target.max(self.next_index + 1);
        }
        let Some(s) = &self.send else { return false };
        if self.wedged || self.next_index >= self.null_target || !s.extend_limit() {
            return false;
        }
        #[cfg(any(test, loom))]
        let how = match (self.faults.null_without_revoke, self.faults.nulls_over_claims) {
            (_, true) => Revoke::Blind,
            (true, false) => Revoke::Look,
            _ => Revoke::Cas,
        };
        #[cfg(not(any(test, loom)))]
        let how = Revoke::Cas;
        if let Err(e) = s.ensure_reserved(self.committed) {
            // No room in /dev/shm for the null's slot: no nulls for now, so ordered
            // delivery waits for this sender; the sends that reach the slot fail.
            if !std::mem::replace(&mut self.null_no_room, true) {
                tracing::warn!(%e, "no room to write a null run: ordered delivery waits for this sender");
            }
            return false;
        }
        let Some(gen) = s.revoke(self.committed, how) else { return false };
        let count = (self.null_target - self.next_index).min(u32::MAX as u64);
        let slot = s.slot_of(self.committed);
        self.write_header(slot, KIND_NULL, count, self.next_index);
        self.next_index += count;
        s.set_end(slot, self.next_index);
        self.committed += 1;
        s.set_absorbed(self.committed);
        s.grant(gen, self.committed, self.next_index);
        self.stats.nulls += count;
        self.stats.null_runs += 1;
        true
    }
}

/// Checks the entry in `slot` (see the module docs): its header word `w0`, first
/// index `first` (the sender's next, `expect`) and first payload word `at` (a
/// descriptor's offset).
#[inline]
fn check_entry(lim: Limits, expect: u64, slot: usize, w0: u64, first: u64, at: u64) -> Result<Entry, String> {
    if first != expect {
        return Err(format!("entry starts at index {first}, expected {expect}"));
    }
    let high = w0 >> 32;
    // The u32 fields hold what they are given: a slot's message is at most MAX_MSG
    // (64 MiB), a large one lies inside the arena (at most MAX_ARENA, 1 GiB), and the
    // ring has at most MAX_WINDOW slots. A null run's count goes into `end` (u64).
    let entry = |kind, at: u64, len: u64, count: u64| Entry {
        first,
        end: first + count,
        at: at as u32,
        len: len as u32,
        pack: 0,
        kind,
    };
    let in_slot = slot as u64;
    if w0 & 0xff == KIND_PACK {
        let (n, bytes) = (pack_count(w0), high as usize);
        if n == 0 || bytes > lim.max_msg || bytes < 8 * n as usize {
            return Err(format!("pack of {n} messages in {bytes} bytes, in a slot of {}", lim.max_msg));
        }
        return Ok(Entry { pack: n as u32, ..entry(EntryKind::Slot, in_slot, high, 1) });
    }
    if plain_in_slot(lim, w0) {
        return Ok(entry(EntryKind::Slot, in_slot, high, 1));
    }
    match w0 & 0xffff_ffff {
        KIND_DATA => Err(format!("message of {high} bytes in a slot of {}", lim.max_msg)),
        KIND_NULL if high > 0 => Ok(entry(EntryKind::Null, in_slot, 0, high)),
        KIND_NULL => Err("null run of no index".into()),
        KIND_LARGE => {
            let (len, arena) = (high, lim.arena);
            let fits = at % 8 == 0 && at.checked_add(len.div_ceil(8) * 8).is_some_and(|end| end <= arena);
            if len as usize <= lim.max_msg || !fits {
                return Err(format!(
                    "descriptor of {len} bytes at offset {at}: not a large payload inside the {arena}-byte arena"
                ));
            }
            Ok(entry(EntryKind::Large, at, len, 1))
        }
        kind => Err(format!("unknown entry kind {kind:#x}")),
    }
}

/// True for a plain message (header word `w0`) of a length a slot holds.
#[inline]
fn plain_in_slot(lim: Limits, w0: u64) -> bool {
    is_plain(w0) && (w0 >> 32) as usize <= lim.max_msg
}

/// The entry this node wrote in `slot` (header word `w0`, first index `first`, a
/// descriptor's offset `at`): [`check_entry`]'s result for it, with no check.
fn own_entry(slot: usize, w0: u64, first: u64, at: u64) -> Entry {
    let high = w0 >> 32;
    let one = Entry { first, end: first + 1, at: slot as u32, len: high as u32, pack: 0, kind: EntryKind::Slot };
    match w0 & 0xff {
        KIND_PACK => Entry { pack: pack_count(w0) as u32, ..one },
        KIND_NULL => Entry { end: first + high, len: 0, kind: EntryKind::Null, ..one },
        KIND_LARGE => Entry { at: at as u32, kind: EntryKind::Large, ..one },
        _ => one,
    }
}

/// Checks a pack's layout: `n` messages, each a length word (`word(i)`, the pack's
/// words from its first) and that many payload bytes padded to a word, taking
/// exactly `bytes`.
pub(super) fn check_pack(n: u32, bytes: usize, word: impl Fn(usize) -> u64) -> Result<(), String> {
    let mut at = 0usize;
    for k in 0..n {
        let left = bytes.saturating_sub(at + 8);
        let len = word(at / 8);
        if at + 8 > bytes || len > left as u64 {
            return Err(format!("pack message {k} of {n}: {len} bytes at byte {at} of {bytes}"));
        }
        at += 8 + (len as usize).div_ceil(8) * 8;
    }
    if at != bytes {
        return Err(format!("pack of {n} messages takes {at} of its {bytes} bytes"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `take_own` builds each kind of entry as the checked path does.
    #[test]
    fn own_entries_are_what_the_checks_make_of_them() {
        let lim = Limits { max_msg: 1000, arena: 1 << 20 };
        let cases = [
            (KIND_DATA | (100 << 32), 0),
            (KIND_DATA, 0),
            (pack_word(3, 72), 0),
            (KIND_NULL | (5 << 32), 0),
            (KIND_LARGE | (5000 << 32), 4096),
        ];
        for (w0, at) in cases {
            let own = own_entry(7, w0, 42, at);
            let checked = check_entry(lim, 42, 7, w0, 42, at).expect("a valid entry");
            assert_eq!(format!("{own:?}"), format!("{checked:?}"), "header {w0:#x}");
        }
    }
}
