//! Deliberate protocol bugs that the simulator's and loom's own tests plant.

/// Deliberate protocol bugs, for tests that show the simulator catches them.
/// (Compiled for unit tests and loom models only.)
#[derive(Debug, Default, Clone, Copy)]
pub struct Faults {
    /// Reuse a slot without waiting for delivery everywhere.
    pub reuse_early: bool,
    /// Deliver what this node has received, without waiting for the others.
    pub deliver_unstable: bool,
    /// Never send nulls.
    pub no_nulls: bool,
    /// Keep sending nulls when nothing happens.
    pub endless_nulls: bool,
    /// Insert nulls without revoking the senders' lease (a look, then act: a sender
    /// may claim the same entry in between).
    pub null_without_revoke: bool,
    /// Insert nulls even while senders hold claimed entries.
    pub nulls_over_claims: bool,
    /// Reuse arena room without waiting for delivery everywhere.
    pub arena_early: bool,
    /// Take a relayed descriptor without waiting for its payload to come.
    pub relay_early: bool,
    /// Queue the relayed count of a payload ahead of the payload itself.
    pub relay_count_first: bool,
}
