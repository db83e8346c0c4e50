//! An Unordered topic's readers: no sample twice, each member writer's samples
//! in the order written (a client's may come in another order: those it sent
//! through a member it left can come after those it sent through the next),
//! and, once quiet, every member of the last view has every sample sent in that
//! view (its senders all stayed: nothing of it was lost to a view change). A
//! client's sample is the same sample through whichever member it came.

use super::Breach;
use crate::sample::info_of;
use crate::sim::member::{key_of, samples_of, SampleKey};
use crate::sim::world::World;
use crate::sink::Src;
use std::collections::{HashMap, HashSet};

const NAME: &str = "unordered delivery";

/// A sample's identity, a client's without the member it came through.
fn id(k: SampleKey) -> SampleKey {
    match k.0 .2 {
        Some(_) => ((0, k.0 .1, k.0 .2), k.1),
        None => k,
    }
}

/// Once quiet (a whole reader's offers at once): no sample twice, each member
/// writer's in order.
pub(crate) fn check(w: &World) -> Result<(), Breach> {
    if !w.unordered() {
        return Ok(());
    }
    for m in &w.members {
        for r in &m.readers {
            let mut got: HashSet<SampleKey> = HashSet::new();
            let mut last: HashMap<(u32, u32, Option<u64>), u64> = HashMap::new();
            for o in &r.offers {
                let k = id(o.1);
                if !got.insert(k) {
                    return Err((NAME, format!("{} reader {} got {:?} twice", m.id, r.id, o.1)));
                }
                let prev = last.insert(k.0, k.1);
                if k.0 .2.is_none() && prev.is_some_and(|p| p >= k.1) {
                    return Err((NAME, format!("{} reader {} got {:?} after number {prev:?}", m.id, r.id, o.1)));
                }
            }
        }
    }
    Ok(())
}

/// Once quiet: every member of the view delivered every sample sent in it.
pub(crate) fn check_end(w: &World) -> Result<(), Breach> {
    if !w.unordered() {
        return Ok(());
    }
    for n in &w.in_view {
        let m = &w.members[n.0 as usize];
        let Some(r) = m.readers.last() else { continue };
        let got: HashSet<SampleKey> = r.offers.iter().map(|o| id(o.1)).collect();
        for (sender, message) in &w.log {
            for bytes in samples_of(message) {
                let src = Src::Bytes(bytes);
                let key = id(key_of(&info_of(|i| src.word(i), *sender, w.view, 0, false).0));
                if !got.contains(&key) {
                    return Err((NAME, format!("{n}'s reader lacks {key:?}, sent in the last view by {sender}")));
                }
            }
        }
    }
    Ok(())
}
