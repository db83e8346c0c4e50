//! Every migration ends: once the run settled the map lists none, each store
//! holds only keys its shard owns and no claims, and each store is what its log
//! makes when applied from the start (what a restarted member would rebuild).

use super::{violation, Sim, Violation};
use crate::shard::rules::{apply, MemTable};

/// At the end.
pub fn check(sim: &Sim) -> Result<(), Violation> {
    let fail = |what: String| Err(violation(sim, "migrations end", what));
    let map = sim.map();
    if !map.migrations().is_empty() {
        return fail(format!("the map still lists {:?}", map.migrations()));
    }
    for (s, m) in sim.members.iter().enumerate() {
        if let Some(k) = m.table.keys.keys().find(|k| usize::from(map.owner_of(k)) != s) {
            return fail(format!("shard {s} still holds {}, which it does not own", String::from_utf8_lossy(k)));
        }
        if !m.table.claims.is_empty() {
            return fail(format!("shard {s} still holds claims {:?}", m.table.claims));
        }
        let mut replay = MemTable::default();
        for u in &m.log {
            let Ok(()) = apply(&mut replay, u);
        }
        if replay != m.table {
            return fail(format!("shard {s}'s store is not its log applied"));
        }
    }
    Ok(())
}
