//! The simulator's invariants, one per file. Each returns the first breach it
//! finds as (its name, what it saw). `check_step` runs after every step (each
//! invariant looks at what is new since its last look); `check_end` once the
//! run is quiet.

pub(crate) mod client_once;
pub(crate) mod client_reader;
pub(crate) mod contiguous;
pub(crate) mod kinds;
pub(crate) mod logged;
pub(crate) mod quiescence;
pub(crate) mod seam;
pub(crate) mod total_order;
pub(crate) mod unordered;

use super::world::World;

/// A breach: the invariant's name and what was seen.
pub(crate) type Breach = (&'static str, String);

pub(crate) fn check_step(w: &mut World) -> Result<(), Breach> {
    if !w.unordered() {
        total_order::check(w)?;
    }
    contiguous::check(w)?;
    kinds::check(w)?;
    logged::check(w)?;
    // What is checked is marked, so the next step looks at new offers only.
    for m in &mut w.members {
        for r in &mut m.readers {
            r.checked = r.offers.len();
        }
    }
    for c in &mut w.clients {
        c.checked = c.offers.len();
    }
    Ok(())
}

pub(crate) fn check_end(w: &World) -> Result<(), Breach> {
    seam::check(w)?;
    client_reader::check(w)?;
    if !w.unordered() {
        client_once::check(w)?;
    }
    unordered::check(w)?;
    unordered::check_end(w)?;
    quiescence::check(w)
}
