//! No acknowledged put is lost: once the run settled, each key's value in its
//! owner's store is one a write put there that no answered write started after
//! it was answered (the initial "no value" counts as a write answered before
//! everything).

use super::{violation, Sim, Violation};
use crate::shard::sim::Kind;

/// At the end.
pub fn check(sim: &Sim) -> Result<(), Violation> {
    let map = sim.map();
    for (k, key) in sim.keys.iter().enumerate() {
        let owner = usize::from(map.owner_of(key));
        let value = sim.members[owner].table.keys.get(key).cloned();
        let writes: Vec<_> = sim.history.iter().filter(|h| h.key == k && matches!(h.kind, Kind::Write(_))).collect();
        let overtaken = |answered: u64| writes.iter().any(|w| w.response.is_some() && w.invoke > answered);
        let fits =
            writes.iter().any(|w| w.kind == Kind::Write(value.clone()) && !overtaken(w.response.unwrap_or(u64::MAX)))
                || (value.is_none() && !overtaken(0));
        if !fits {
            let what = format!(
                "{} holds {:?}, which no write that was last could have put",
                String::from_utf8_lossy(key),
                value.map(|v| String::from_utf8_lossy(&v).into_owned())
            );
            return Err(violation(sim, "no lost put", what));
        }
    }
    Ok(())
}
