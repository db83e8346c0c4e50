//! No stale read, per key: the answered requests on each key fit one order, as
//! a register's (see `check::linearizable`); the final reads of every key are
//! part of it.

use super::{violation, Sim, Violation};

/// At the end.
pub fn check(sim: &Sim) -> Result<(), Violation> {
    for (k, key) in sim.keys.iter().enumerate() {
        let ops: Vec<_> = sim.history.iter().filter(|h| h.key == k).collect();
        if let Err(why) = crate::shard::sim::check::linearizable(&ops) {
            let what = format!("{}: {why}", String::from_utf8_lossy(key));
            return Err(violation(sim, "linearizable", what));
        }
    }
    Ok(())
}
