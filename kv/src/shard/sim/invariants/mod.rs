//! The simulator's invariants, one per file: [`one_owner`] after every event;
//! [`linearizable`], [`no_lost_put`] and [`migrations_end`] at the end.

use super::Sim;

pub mod linearizable;
pub mod migrations_end;
pub mod no_lost_put;
pub mod one_owner;

/// An invariant that did not hold: which, where, and the seed to replay (the
/// simulators' common report).
pub use spindle_smc::sim::Violation;

/// The violation of `invariant` found now in `sim`.
pub(crate) fn violation(sim: &Sim, invariant: &'static str, detail: String) -> Violation {
    Violation { seed: sim.cfg.seed, step: sim.step, invariant, detail }
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
