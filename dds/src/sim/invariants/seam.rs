//! A late joiner's reader (and a restarted one's) gets, before its first live
//! sample `s`, the last min(n, written) samples of every instance among the
//! topic's samples before `s`, under `KeepLast(n)`: the history exactly as it
//! stood at the seam, though the members serving it went on delivering. Readers
//! of a late join that ended without the history (reported to them) are exempt.

use super::Breach;
use crate::sim::world::World;
use std::collections::HashMap;

const NAME: &str = "history at the seam";

pub(crate) fn check(w: &World) -> Result<(), Breach> {
    if !w.cfg.keeps_history() {
        return Ok(());
    }
    let n = w.cfg.keep as usize;
    for m in &w.members {
        if w.failed_joins.contains(&m.id) {
            continue;
        }
        for r in &m.readers {
            // Where live samples start: the first live one, or (none came) all the
            // order there was while it read.
            let live = r.offers.iter().find(|o| !o.2).map(|o| o.0);
            let Some(s) = live.or_else(|| r.offers.last().map(|o| o.0 + 1)) else { continue };
            if let Some(late) = r.offers.iter().find(|o| o.2 && o.0 >= s) {
                return Err((NAME, format!("{} reader {} got history number {} after live {s}", m.id, r.id, late.0)));
            }
            let mut want: HashMap<u64, Vec<u64>> = HashMap::new();
            for (seq, (_, inst)) in w.order[..s as usize].iter().enumerate() {
                want.entry(*inst).or_default().push(seq as u64);
            }
            let mut got: HashMap<u64, Vec<u64>> = HashMap::new();
            for o in r.offers.iter().filter(|o| o.2) {
                got.entry(o.3).or_default().push(o.0);
            }
            for (inst, all) in want {
                let tail = &all[all.len().saturating_sub(n)..];
                let had = got.get(&inst).map_or(&[][..], |g| &g[g.len().saturating_sub(tail.len())..]);
                if had != tail {
                    return Err((
                        NAME,
                        format!("{} reader {}: instance {inst} before {s}: got {had:?} as its last, the order's last {n} are {tail:?}", m.id, r.id),
                    ));
                }
            }
        }
    }
    Ok(())
}
