//! The simulator's invariants, one per file: [`one_owner`] after every event;
//! [`linearizable`], [`no_lost_put`] and [`migrations_end`] at the end.

use super::Sim;

pub mod linearizable;
pub mod migrations_end;
pub mod no_lost_put;
pub mod one_owner;

/// An invariant that did not hold: which, where, and the seed to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The seed.
    pub seed: u64,
    /// The event step it was found at.
    pub step: u64,
    /// The invariant.
    pub invariant: &'static str,
    /// What was wrong.
    pub detail: String,
}

impl Violation {
    pub(super) fn new(sim: &Sim, invariant: &'static str, detail: String) -> Violation {
        Violation { seed: sim.cfg.seed, step: sim.step, invariant, detail }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "seed {} step {}: {} violated: {}", self.seed, self.step, self.invariant, self.detail)
    }
}

/// The invariants checked after every event.
pub(super) fn after_step(sim: &Sim) -> Result<(), Violation> {
    one_owner::check(sim)
}

/// The invariants checked once the run settled.
pub(super) fn at_end(sim: &Sim) -> Result<(), Violation> {
    one_owner::check_answers(sim)?;
    migrations_end::check(sim)?;
    no_lost_put::check(sim)?;
    linearizable::check(sim)
}
