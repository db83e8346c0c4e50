//! A late joiner's reader (a restarted one's, and a rejoined member's) gets,
//! before a live sample `s` that follows history or a gap, what its topic's
//! `KeepLast(n)` history held at that seam: for every instance, the last
//! min(n, written) samples of the topic before `s` are the last ones the reader
//! got of that instance, from history or live before it left, though the members
//! serving it went on delivering. History comes only before live samples, except
//! after a rejoin. Readers of a late join that ended without the history
//! (reported to them) are exempt.
//!
//! Under a lifespan the history leaves out what had outlived it when served:
//! then no sample in the history had outlived it when the serving began, every
//! one of those last samples still within it when the serving ended is there,
//! and the history holds none but those last samples. (A Logged topic's joiner
//! fills its log from another's, whole, and its readers are offered all of it:
//! for it only the last rule holds; a reader's queue drops at its take what
//! outlived the lifespan.)

use super::Breach;
use crate::sim::member::ReaderLog;
use crate::sim::world::World;
use std::collections::HashMap;

const NAME: &str = "history at the seam";

pub(crate) fn check(w: &World) -> Result<(), Breach> {
    if !w.cfg.keeps_history() {
        return Ok(());
    }
    for m in &w.members {
        if w.failed_joins.contains(&m.id) {
            continue;
        }
        for r in &m.readers {
            let who = format!("{} reader {}", m.id, r.id);
            if m.rejoins == 0 {
                let live = r.offers.iter().position(|o| !o.2);
                if let Some(late) = live.and_then(|p| r.offers[p..].iter().find(|o| o.2)) {
                    return Err((NAME, format!("{who} got history number {} after live samples", late.0)));
                }
            }
            for (p, s) in seams(r) {
                at_seam(w, r, p, s).map_err(|d| (NAME, format!("{who}: {d}")))?;
            }
        }
    }
    Ok(())
}

/// Where a reader's history must stand whole: (index of the offer, its number)
/// for each live offer after history or after a gap (the first one too), and
/// the end of a reader whose last offers are history.
fn seams(r: &ReaderLog) -> Vec<(usize, u64)> {
    let mut at = Vec::new();
    for (p, o) in r.offers.iter().enumerate() {
        let after = p.checked_sub(1).map(|q| &r.offers[q]);
        if !o.2 && after.map_or(true, |a| a.2 || a.0 + 1 != o.0) {
            at.push((p, o.0));
        }
    }
    if let Some(last) = r.offers.last().filter(|o| o.2) {
        at.push((r.offers.len(), last.0 + 1));
    }
    at
}

/// The reader's offers before index `p` end, for every instance, with the last
/// `n` samples of that instance in the topic's order before `s`.
fn at_seam(w: &World, r: &ReaderLog, p: usize, s: u64) -> Result<(), String> {
    if let Some(life) = w.cfg.lifespan {
        return within_lifespan(w, r, p, s, life);
    }
    let n = w.cfg.keep as usize;
    let want = last_of_each(w, s, n);
    let mut got: HashMap<u64, Vec<u64>> = HashMap::new();
    for o in &r.offers[..p] {
        got.entry(o.3).or_default().push(o.0);
    }
    for (inst, tail) in &want {
        let had = got.get(inst).map_or(&[][..], |g| &g[g.len().saturating_sub(tail.len())..]);
        if had != &tail[..] {
            return Err(format!(
                "instance {inst} before {s}: got {had:?} as its last, the order's last {n} are {tail:?}"
            ));
        }
    }
    Ok(())
}

/// The numbers of the last `n` samples of each instance in the topic's order
/// before `s`.
fn last_of_each(w: &World, s: u64, n: usize) -> HashMap<u64, Vec<u64>> {
    let mut tails: HashMap<u64, Vec<u64>> = HashMap::new();
    for (seq, (_, inst)) in w.order[..s as usize].iter().enumerate() {
        tails.entry(*inst).or_default().push(seq as u64);
    }
    for all in tails.values_mut() {
        all.drain(..all.len().saturating_sub(n));
    }
    tails
}

/// [`at_seam`] for a topic with a lifespan of `life` steps.
fn within_lifespan(w: &World, r: &ReaderLog, p: usize, s: u64, life: u64) -> Result<(), String> {
    let n = w.cfg.keep as usize;
    // The history given last before `p`, and when it was served.
    let Some(&(from, began, ended)) = r.histories.iter().rev().find(|h| h.0 <= p) else {
        return Ok(()); // none given: nothing of it to check
    };
    let tails = last_of_each(w, s, n);
    let stamp = |seq: u64| w.stamps[seq as usize];
    let whole_log = w.cfg.qos.level == crate::qos::Level::Logged;
    for o in r.offers[from..p].iter().filter(|o| o.2 && !whole_log) {
        if stamp(o.0) + life < began {
            return Err(format!("history sample {} had outlived its lifespan when the serving began", o.0));
        }
        if !tails.get(&o.3).is_some_and(|t| t.contains(&o.0)) {
            return Err(format!("history sample {} is not among instance {}'s last {n} before {s}", o.0, o.3));
        }
    }
    for (inst, tail) in tails {
        for seq in tail.into_iter().filter(|q| stamp(*q) + life >= ended) {
            if !r.offers[..p].iter().any(|o| o.0 == seq) {
                return Err(format!("instance {inst} before {s}: sample {seq}, within its lifespan, is missing"));
            }
        }
    }
    Ok(())
}
