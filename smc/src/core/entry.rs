//! Entries received and not yet wholly delivered, per sender: what the receive
//! stage queues and the delivery stage walks.

use std::collections::VecDeque;

/// Entries received but not yet wholly delivered: 32 bytes, two to a cache line.
/// Consecutive plain messages of a sender (a message in its slot, not a pack) are
/// queued as one *run*: indices `first..end` in the slots from `at` on, each slot
/// one message (see [`Entry::plain`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) first: u64,
    pub(super) end: u64,
    /// Its (first) slot in the sender's ring, or for a large message its payload's
    /// offset in the sender's arena (at most [`crate::spec::MAX_ARENA`], 1 GiB).
    pub(super) at: u32,
    /// A message's (or a pack's) bytes, at most [`crate::spec::MAX_MSG`] (64 MiB) in
    /// a slot and the arena's size for a large one; 0 for a null run; for a run of
    /// plain messages, the first's (the others' are read from their slots).
    pub(super) len: u32,
    /// For a pack, its messages (`len` is then the bytes they take); 0 otherwise.
    pub(super) pack: u32,
    pub(super) kind: EntryKind,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 32, "an entry stays 32 bytes");

/// What an [`Entry`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EntryKind {
    /// A message or a pack in the slot.
    Slot,
    /// A large message's descriptor (its payload in the arena).
    Large,
    /// A null run.
    Null,
}

impl Entry {
    /// A large message's payload offset in its sender's arena.
    pub(super) fn arena_at(&self) -> Option<usize> {
        (self.kind == EntryKind::Large).then_some(self.at as usize)
    }

    /// True for plain messages in their slots (one, or a run of them): not a pack,
    /// a descriptor or a null run.
    #[inline]
    pub(super) fn plain(&self) -> bool {
        self.kind == EntryKind::Slot && self.pack == 0
    }
}

/// Queues sender entry `e` behind the sender's last pending one: a plain message
/// right after a run of plain messages (its next index, hence its next slot)
/// lengthens the run. The last pending entry is always the sender's previous one:
/// delivered entries leave from the front.
#[inline]
pub(super) fn queue_entry(pending: &mut VecDeque<Entry>, e: Entry) {
    if !(e.plain() && lengthen(pending, e.first)) {
        pending.push_back(e);
    }
}

/// Takes a plain message of index `first` into the sender's last pending entry if
/// that is a run of plain messages ending right before it; false if it is not.
#[inline]
pub(super) fn lengthen(pending: &mut VecDeque<Entry>, first: u64) -> bool {
    match pending.back_mut() {
        Some(last) if last.plain() && last.end == first => {
            last.end += 1;
            true
        }
        _ => false,
    }
}
