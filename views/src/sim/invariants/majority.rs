//! Minority never installs: a view is installed only if a strict majority of the
//! previous view's members are in it or left it gracefully, so two sides of a
//! partition can never both go on (docs/DESIGN.md "views", partition safety; Derecho TOCS
//! §4.4, where Derecho ships the rule disabled).

use crate::engine::Next;
use crate::view::View;

/// The invariant's name in reports.
pub const NAME: &str = "minority never installs";

/// Checks the step from `old` to `next`.
pub fn check(old: &View, next: &Next) -> Result<(), String> {
    let failed = next.failed.len();
    let n = old.members().len();
    if 2 * (n - failed) > n {
        Ok(())
    } else {
        Err(format!("view {:?} installed with {failed} of {n} members failed", next.view.id()))
    }
}
