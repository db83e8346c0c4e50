//! What a writer's send lock keeps, shared with its topic (which empties the
//! cache when a view starts).

/// The clock for a writer's source timestamps, and the subgroup its last send
/// went to (a send into it takes no lock of the group's; see
/// `spindle_views::group::Group::send_cached`).
pub(crate) struct Sending {
    pub(super) clock: crate::stamp::Stamp,
    pub(super) cache: spindle_views::group::SendCache,
    /// Writer batching: on, and the samples it holds (see `super::pending`).
    pub(super) batching: bool,
    pub(super) pending: super::pending::Pending,
}

impl Sending {
    pub(super) fn new() -> Sending {
        Sending {
            clock: crate::stamp::Stamp::new(),
            cache: Default::default(),
            batching: false,
            pending: Default::default(),
        }
    }

    /// Lets go of the cached subgroup, and with it the view it belongs to (its
    /// memory, its links, its file in /dev/shm), which an idle writer would
    /// otherwise hold until its next write.
    pub(crate) fn let_go(&mut self) {
        self.cache = Default::default();
    }
}
