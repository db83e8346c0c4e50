//! View agreement: every member that installs view `v` installs the same view `v`,
//! reached from the same view `v - 1` (virtual synchrony; Derecho TOCS §3, "views
//! are installed in the same order at every member"). The same view means the same
//! members and the same layout document.

use crate::view::View;
use std::collections::HashMap;

/// The invariant's name in reports.
pub const NAME: &str = "view agreement";

/// The views installed so far, by id.
#[derive(Debug, Default)]
pub struct Views {
    by_id: HashMap<u64, View>,
}

impl Views {
    /// A member installs `next` after `old` (for the first view, both are the same).
    pub fn on_install(&mut self, old: &View, next: &View) -> Result<(), String> {
        if next.id().0 != old.id().0 + 1 && next.id() != old.id() {
            return Err(format!("view {:?} follows view {:?}", next.id(), old.id()));
        }
        if let Some(prev) = self.by_id.get(&old.id().0) {
            if prev != old {
                return Err(format!("view {:?} was {prev:?} elsewhere, {old:?} here", old.id()));
            }
        }
        match self.by_id.get(&next.id().0) {
            Some(seen) if seen != next => {
                Err(format!("view {:?} is {next:?} here but {seen:?} at another member", next.id()))
            }
            Some(_) => Ok(()),
            None => {
                self.by_id.insert(next.id().0, next.clone());
                Ok(())
            }
        }
    }
}
