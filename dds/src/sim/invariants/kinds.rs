//! Every sample a reader is offered (live, from a member's history, or from a
//! log) is the one the order holds at its number, with the same instance and the
//! same kind: a disposal or an unregistration stays one through history, catch-up
//! and the log, and is never dropped from an instance's last samples in favour of
//! its data.

use super::Breach;
use crate::sim::world::World;

const NAME: &str = "instance and kind kept";

pub(crate) fn check(w: &World) -> Result<(), Breach> {
    for m in &w.members {
        for r in &m.readers {
            for &(seq, key, _, instance, kind) in &r.offers[r.checked..] {
                let want = w.order.get(seq as usize).map(|o| (o.0, o.1, w.kinds[seq as usize]));
                if want.is_some() && want != Some((key, instance, kind)) {
                    return Err((
                        NAME,
                        format!(
                            "{} reader {} got sample {seq} as {key:?} instance {instance} kind {kind}; the order has {want:?}",
                            m.id, r.id
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}
