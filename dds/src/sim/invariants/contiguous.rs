//! A member's reader has no hole in what it gets live: each live sample is the
//! one after the sample before it (history or live), unless the reader was told
//! samples are missed; a reader's first sample, if live, is the first of the
//! order where it joined (the topic's first, or its late join's seam).
//! Readers of a late join that ended without the history (reported to them) are
//! exempt. Under a lifespan a live sample after history may follow a gap (the
//! samples between had outlived it when served: the seam invariant checks them).

use super::Breach;
use crate::sim::world::World;

const NAME: &str = "no hole in live samples";

pub(crate) fn check(w: &World) -> Result<(), Breach> {
    for m in &w.members {
        if w.failed_joins.contains(&m.id) {
            continue;
        }
        for r in &m.readers {
            for i in r.checked..r.offers.len() {
                let (seq, _, history, _, _) = r.offers[i];
                if history {
                    continue;
                }
                let want = match i.checked_sub(1) {
                    Some(p) if r.offers[p].2 && w.cfg.lifespan.is_some() => continue,
                    Some(p) => r.offers[p].0 + 1,
                    None => r.start,
                };
                if seq != want && seq > want + r.missed {
                    return Err((
                        NAME,
                        format!(
                            "{} reader {} got live number {seq} where {want} was next ({} missed told)",
                            m.id, r.id, r.missed
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}
