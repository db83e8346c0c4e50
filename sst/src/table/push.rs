//! Pushes: byte ranges of this node's row to be written at some peers, as triggers
//! return them for the predicate thread to post.

use super::*;

/// A byte range of this node's row to be written to the same offsets at some peers.
/// Triggers return pushes; the predicate thread posts them after releasing the state
/// lock.
#[derive(Debug, Clone)]
pub struct Push {
    /// Region of the table.
    pub region: RegionId,
    /// Byte offset in the region (same at source and destination).
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
    /// Members of the table (rank order).
    pub members: Arc<Vec<NodeId>>,
    /// Bit `i` set: push to `members[i]`.
    pub ranks: u64,
    /// Ring the targets' doorbells (see [`crate::transport::WriteOp::wake`]).
    pub wake: bool,
    /// The range is not written again before every target has it (see
    /// [`crate::transport::WriteOp::stable`]).
    pub stable: bool,
    /// For a shared table: where the range goes in this node's publication row. The
    /// push is then one [`crate::Transport::publish`] instead of a write per target.
    pub publish_at: Option<usize>,
}

impl Push {
    /// The same push without waking the targets: for state nobody waits on (the
    /// targets read it on their own timers, as with heartbeats).
    pub fn quiet(mut self) -> Push {
        self.wake = false;
        self
    }

    /// The same push of a range that is not written again before every target has
    /// it (a large message's payload): a transport may send it from where it lies.
    pub fn stable(mut self) -> Push {
        self.stable = true;
        self
    }

    /// The target nodes.
    pub fn targets(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members.iter().enumerate().filter(|(i, _)| self.ranks & (1 << i) != 0).map(|(_, n)| *n)
    }
}

/// Pushes collected by triggers, posted after the state lock is released.
#[derive(Debug, Default)]
pub struct Pushes {
    pub(super) list: Vec<Push>,
}

impl Pushes {
    /// Queues a push.
    pub fn push(&mut self, p: Push) {
        self.list.push(p);
    }
    /// Queues several pushes, in order.
    pub fn extend(&mut self, ps: impl IntoIterator<Item = Push>) {
        self.list.extend(ps);
    }
    /// The queued pushes, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Push> {
        self.list.iter()
    }
    /// Takes the queued pushes out, in order (for drivers other than the predicate
    /// thread, such as a simulator).
    pub fn drain(&mut self) -> impl Iterator<Item = Push> + '_ {
        self.list.drain(..)
    }
    /// Number queued.
    pub fn len(&self) -> usize {
        self.list.len()
    }
    /// True when none are queued.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}
