//! Once nothing is being sent, every member of the view has delivered the whole
//! order (and its writer's delivered number is the last its engine reported), no
//! late join is left waiting, and every reader (members' and clients')
//! has got the last sample. (A client that moved on an Ordered topic, which
//! keeps no history, resumes with the live samples of its new member: what was
//! delivered before it came is not owed to it. Likewise a member taken back
//! into the view on such a topic (or on one whose history outlives a lifespan)
//! owes its reader only what came after its return, once it told the reader how
//! many it missed. Under a lifespan, a reader is not owed the last samples if
//! they had outlived it when the history it was given last ended.)

use super::Breach;
use crate::sim::world::World;

const NAME: &str = "quiescence";

pub(crate) fn check(w: &World) -> Result<(), Breach> {
    let Some(last) = w.order.len().checked_sub(1).map(|l| l as u64) else { return Ok(()) };
    for n in &w.in_view {
        let m = &w.members[n.0 as usize];
        let Some(e) = &m.engine else { return Err((NAME, format!("{n} is in the view and not running"))) };
        if e.catching_up() {
            return Err((NAME, format!("{n} is still catching up")));
        }
        if e.next_seq() != w.order.len() as u64 {
            return Err((NAME, format!("{n} numbered {} samples; the order has {}", e.next_seq(), w.order.len())));
        }
        // Its writer's delivered number (what a wait for delivery waits on) is the
        // last one its engine said was delivered.
        let said = m.own_delivered;
        if e.delivered(crate::sim::member::WRITER).is_some_and(|d| d != said) {
            return Err((
                NAME,
                format!(
                    "{n}'s writer stands at {:?}, its deliveries said {said}",
                    e.delivered(crate::sim::member::WRITER)
                ),
            ));
        }
        // A member that makes no reader is held to its numbering alone (above).
        let Some(r) = m.readers.last() else { continue };
        // A reader that came after the last sample, on a topic with no history or
        // whose history may have outlived its lifespan, is owed nothing here.
        if r.offers.last().is_none() && r.start > last && (!w.cfg.keeps_history() || w.cfg.lifespan.is_some()) {
            continue;
        }
        let next = r.offers.last().map_or(r.start, |o| o.0 + 1);
        let told = m.rejoins > 0 && (!w.cfg.keeps_history() || w.cfg.lifespan.is_some()) && next + r.missed > last;
        // Under a lifespan the samples after its last had outlived it when the
        // history it was given last ended.
        let expired = w.cfg.lifespan.zip(r.histories.last()).is_some_and(|(life, &(from, _, ended))| {
            from <= r.offers.len()
                && r.offers.last().map_or(true, |o| o.2)
                && (next..=last).all(|q| w.stamps[q as usize] + life < ended)
        });
        if r.offers.last().map(|o| o.0) != Some(last) && !told && !expired {
            return Err((
                NAME,
                format!("{n}'s reader ended at {:?}, the order at {last}", r.offers.last().map(|o| o.0)),
            ));
        }
    }
    for c in w.clients.iter().filter(|_| w.cfg.keeps_history()) {
        // Under a lifespan, a client that last attached after its last sample is
        // not owed those that had outlived it then.
        let next = c.offers.last().map_or(0, |o| o.0 + 1);
        let expired = w.cfg.lifespan.zip(c.attaches.last()).is_some_and(|(life, &(from, step))| {
            from == c.offers.len() && (next..=last).all(|q| w.stamps[q as usize] + life < step)
        });
        if c.at.is_some() && c.offers.last().map(|o| o.0) != Some(last) && !expired {
            return Err((
                NAME,
                format!("client {} ended at {:?}, the order at {last}", c.id, c.offers.last().map(|o| o.0)),
            ));
        }
    }
    Ok(())
}
