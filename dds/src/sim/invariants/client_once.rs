//! A client's write is delivered exactly once, though it was sent again after a
//! failover (through another member, maybe after the first copy was delivered):
//! at the end, every number the client wrote is in the topic's order once, in
//! the order written.

use super::Breach;
use crate::sim::world::World;

const NAME: &str = "client writes exactly once";

pub(crate) fn check(w: &World) -> Result<(), Breach> {
    for c in &w.clients {
        let seqs: Vec<u64> =
            w.order.iter().filter(|((wr, _), _)| wr.2 == Some(c.id)).map(|((_, seq), _)| *seq).collect();
        let want: Vec<u64> = (1..c.next_write).collect();
        if seqs != want {
            return Err((NAME, format!("client {} wrote 1..{}; the order has {seqs:?}", c.id, c.next_write)));
        }
    }
    Ok(())
}
