//! The free-slot search behind `SendState::extend_limit`.

use spindle_sst::sync::atomic::{AtomicU64, Ordering};

/// The first entry in `from..cap` (`window <= from`, `cap` at most the absorbed
/// count plus `window`) whose slot is not free with every member's `delivered`
/// at least `floor`, or `cap`; `ends[s]` is the end index of the last entry
/// absorbed into slot `s` (the window is `ends.len()`).
///
/// Entry `l` needs entry `l - window` delivered: its end at most `floor`. The
/// entries `from - window..cap - window` are absorbed and their ends grow with
/// the entry, so the free ones come first and a binary search finds the first
/// that is not, in O(log window) loads instead of one per entry freed since the
/// last call. A slot holds its entry's end, or a later entry's (larger) if the
/// slot moved on meanwhile; a probe that finds an end at most `floor` still
/// proves every earlier entry delivered (their true ends are no larger), so a
/// moved slot can only make the search stop early: it errs on the side of
/// waiting, never frees a slot in use.
///
/// One division per call: a probe's slot is its distance from the slot boundary
/// below `from`, less a window if it passed the next (`cap - from` is at most a
/// window, so at most one).
pub(super) fn first_busy(ends: &[AtomicU64], from: u64, cap: u64, floor: u64) -> u64 {
    let w = ends.len() as u64;
    debug_assert!(cap - from <= w, "the search spans at most a window");
    let base = from - from % w;
    let slot = |e: u64| {
        let d = e - base;
        (if d >= w { d - w } else { d }) as usize
    };
    let (mut lo, mut hi) = (from, cap);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ends[slot(mid)].load(Ordering::Acquire) <= floor {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}
