//! A Logged topic's log holds the topic's order from its start with no gap;
//! everything a member acknowledged was durable in its log first (its log's
//! writer lags behind delivery, and a kill loses what it had not written); a
//! restarted member starts from exactly what its log holds.

use super::Breach;
use crate::history::Entry;
use crate::qos::Level;
use crate::sim::member::{key_of, Member};
use crate::sim::world::World;

const NAME: &str = "logged";

pub(crate) fn check(w: &World) -> Result<(), Breach> {
    if w.cfg.qos.level != Level::Logged {
        return Ok(());
    }
    for m in &w.members {
        if let Some(why) = &m.early_ack {
            return Err((NAME, why.clone()));
        }
        // The newest record only: the older ones were checked when they were.
        if let Some(r) = m.log.last() {
            let seq = m.log.len() as u64 - 1;
            let e =
                Entry::from_record(seq, r).ok_or_else(|| (NAME, format!("{}: record {seq} holds no sample", m.id)))?;
            let key = key_of(&e.info(false).0);
            if w.order.get(seq as usize).map(|o| o.0) != Some(key) {
                return Err((
                    NAME,
                    format!("{} logged {key:?} as record {seq}, the order has {:?}", m.id, w.order.get(seq as usize)),
                ));
            }
        }
    }
    Ok(())
}

/// A member (re)started: from exactly its log's records.
pub(crate) fn reopened(m: &Member) -> Result<(), String> {
    let Some(e) = &m.engine else { return Ok(()) };
    if e.log_len().is_some_and(|n| n != m.log.len() as u64 || e.next_seq() != n) {
        return Err(format!("{} reopened {} records at {:?}, next {}", m.id, m.log.len(), e.log_len(), e.next_seq()));
    }
    Ok(())
}
