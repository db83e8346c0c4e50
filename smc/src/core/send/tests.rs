//! The free-slot search against the step-by-step scan it replaced.

use super::*;
use proptest::prelude::*;

/// Slots of a window of `w` after entries with the given ends were absorbed in
/// order (each entry's slot holds the end of the last entry absorbed into it).
fn slots(w: usize, ends: &[u64]) -> Vec<AtomicU64> {
    let slots: Vec<AtomicU64> = (0..w).map(|_| AtomicU64::new(0)).collect();
    for (e, end) in ends.iter().enumerate() {
        slots[e % w].store(*end, Ordering::Relaxed);
    }
    slots
}

proptest! {
    /// Against the step-by-step scan it replaced: the same entry while no slot
    /// moved on; never a later one (no slot freed too early) when some did.
    #[test]
    fn finds_what_a_scan_finds_and_never_frees_a_busy_slot(
        w in 1usize..12,
        steps in proptest::collection::vec(1u64..4, 1..40),
        from_back in 0usize..13,
        floor_at in 0usize..40,
        moved in 0usize..6,
    ) {
        // True ends of the absorbed entries, growing with the entry.
        let ends: Vec<u64> = steps.iter().scan(0, |t, s| { *t += s; Some(*t) }).collect();
        let committed = ends.len() as u64;
        let w64 = w as u64;
        let cap = committed + w64;
        // The limit never lags the absorbed count (`from >= committed`), so
        // the entries looked at each have a slot of their own.
        let from = (cap - (from_back % (w + 1)) as u64).max(w64);
        let floor = ends[floor_at % ends.len()];
        let scan = (from..cap).find(|l| ends[(l - w64) as usize] > floor).unwrap_or(cap);
        // No slot moved on: exactly the scan's answer.
        let found = first_busy(&slots(w, &ends), from, cap, floor);
        prop_assert_eq!(found, scan);
        // Later entries (larger ends) absorbed into the first slots meanwhile.
        let mut more = ends.clone();
        for k in 0..moved {
            more.push(ends[ends.len() - 1] + 1 + k as u64);
        }
        let found = first_busy(&slots(w, &more), from, cap, floor);
        prop_assert!(found <= scan, "freed up to {found}, the scan only to {scan}");
    }
}
