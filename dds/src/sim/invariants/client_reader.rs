//! A client's reader fails over without a silent gap: on a topic that keeps
//! history and has no instances, the samples it skipped are exactly those it was
//! told are lost (resuming where the new member no longer holds them); on any
//! topic that keeps history, what it gets live follows on without a hole. (On an
//! Ordered topic a member has nothing to resume from: the client counts the
//! gap per writer from the samples' numbers.) Under a lifespan, a member leaves
//! out what had outlived it when the client attached: a hole may then span an
//! attachment, and of the samples skipped, those still within their lifespan
//! then are among those it was told are lost.

use super::Breach;
use crate::sim::world::World;

const NAME: &str = "client failover without a silent gap";

pub(crate) fn check(w: &World) -> Result<(), Breach> {
    if let Some(life) = w.cfg.lifespan {
        return within_lifespan(w, life);
    }
    let exact = w.cfg.keeps_history() && w.cfg.instances == 0;
    for c in &w.clients {
        // Skipped: from where it started to its first sample, and between samples.
        let mut skipped = match (c.origin, c.offers.first()) {
            (Some(o), Some(f)) => f.0.saturating_sub(o),
            _ => 0,
        };
        for i in 1..c.offers.len() {
            let (prev, (seq, _, history)) = (c.offers[i - 1].0, c.offers[i]);
            let hole = seq - prev - 1;
            skipped += hole;
            if hole > 0 && !history && c.offers[i - 1].2 == history && w.cfg.keeps_history() {
                return Err((NAME, format!("client {} got live {seq} after live {prev}", c.id)));
            }
        }
        if exact && skipped != c.lost {
            return Err((NAME, format!("client {} skipped {skipped} samples and was told of {} lost", c.id, c.lost)));
        }
    }
    Ok(())
}

/// [`check`] for a topic with a lifespan of `life` steps.
fn within_lifespan(w: &World, life: u64) -> Result<(), Breach> {
    for c in &w.clients {
        let mut within = 0u64;
        let mut skipped = 0u64;
        for i in 1..c.offers.len() {
            let (prev, (seq, _, history)) = (c.offers[i - 1].0, c.offers[i]);
            if seq == prev + 1 {
                continue;
            }
            skipped += seq - prev - 1;
            // The attachment the hole spans (the last one whose first offer is `i`
            // or before it, and after `prev`).
            let at = c.attaches.iter().rev().find(|(from, _)| *from == i).map(|a| a.1);
            match at {
                Some(step) => within += (prev + 1..seq).filter(|q| w.stamps[*q as usize] + life >= step).count() as u64,
                None if !history && !c.offers[i - 1].2 => {
                    return Err((NAME, format!("client {} got live {seq} after live {prev}", c.id)));
                }
                None => {}
            }
        }
        if w.cfg.instances == 0 && within > c.lost {
            return Err((
                NAME,
                format!(
                    "client {}: {within} skipped within their lifespan, {} told lost, {skipped} skipped",
                    c.id, c.lost
                ),
            ));
        }
    }
    Ok(())
}
