//! One owner per key per view: no two members that serve (installed, not
//! wedged) own the same key in their maps, and every answered request was served
//! by the shard that owned its key in the map it was admitted under.

use super::{violation, Sim, Violation};

/// After every event: the members serving now own disjoint keys.
pub fn check(sim: &Sim) -> Result<(), Violation> {
    for key in &sim.keys {
        let owners: Vec<usize> = sim
            .members
            .iter()
            .enumerate()
            .filter(|(s, m)| !m.wedged && usize::from(sim.maps[m.installed as usize].owner_of(key)) == *s)
            .map(|(s, _)| s)
            .collect();
        if owners.len() > 1 {
            let what = format!("shards {owners:?} both serve {}", String::from_utf8_lossy(key));
            return Err(violation(sim, "one owner per key", what));
        }
    }
    Ok(())
}

/// At the end: each answer came from the key's owner in its map.
pub fn check_answers(sim: &Sim) -> Result<(), Violation> {
    for (i, h) in sim.history.iter().enumerate() {
        if let Some((shard, version)) = h.served {
            let owner = sim.maps[version as usize].owner_of(&sim.keys[h.key]);
            if owner != shard {
                let what = format!("request {i} answered by shard {shard}, owner {owner} in version {version}");
                return Err(violation(sim, "one owner per key", what));
            }
        }
    }
    Ok(())
}
