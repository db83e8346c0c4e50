//! Every reader, member's or client's, sees samples of the topic's one order:
//! the sample it gets as number `s` is the group's sample `s`, and its numbers
//! only grow.

use super::Breach;
use crate::sim::member::SampleKey;
use crate::sim::world::World;

const NAME: &str = "total order";

/// `(topic_seq, identity)` pairs from `checked` on, against `order`.
fn check_offers<'a>(
    who: &str,
    order: &[(SampleKey, u64)],
    before: Option<u64>,
    offers: impl Iterator<Item = (u64, &'a SampleKey)>,
) -> Result<(), Breach> {
    let mut last = before;
    for (seq, key) in offers {
        match order.get(seq as usize) {
            None => return Err((NAME, format!("{who} got number {seq}, past the order's {}", order.len()))),
            Some((want, _)) if want != key => {
                return Err((NAME, format!("{who} got {key:?} as number {seq}, which is {want:?}")));
            }
            _ => {}
        }
        if last.is_some_and(|l| seq <= l) {
            return Err((NAME, format!("{who} got number {seq} after {}", last.unwrap_or(0))));
        }
        last = Some(seq);
    }
    Ok(())
}

pub(crate) fn check(w: &World) -> Result<(), Breach> {
    for m in &w.members {
        for r in &m.readers {
            let before = r.checked.checked_sub(1).map(|i| r.offers[i].0);
            let new = r.offers[r.checked..].iter().map(|(s, k, _, _, _)| (*s, k));
            check_offers(&format!("{} reader {}", m.id, r.id), &w.order, before, new)?;
        }
    }
    for c in &w.clients {
        let before = c.checked.checked_sub(1).map(|i| c.offers[i].0);
        let new = c.offers[c.checked..].iter().map(|(s, k, _)| (*s, k));
        check_offers(&format!("client {}", c.id), &w.order, before, new)?;
    }
    Ok(())
}
