//! Whether this node still runs, why it stopped, and the generation counter that
//! waiters (senders, `wait_for_members`, layout edits) sleep on between views.

use spindle_sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spindle_sst::sync::lock;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Status {
    /// Raised at every view installed and at the stop; waiters sleep on `changed`.
    generation: AtomicU64,
    gen_lock: Mutex<()>,
    changed: Condvar,
    is_stopped: AtomicBool,
    stopped: Mutex<Option<String>>,
    shutdown: AtomicBool,
    /// Why this node was removed, while it is joining the group again.
    rejoining: Mutex<Option<String>>,
    /// The same, typed.
    removal: Mutex<Option<super::Removal>>,
}

impl Status {
    /// The generation now (read before looking, then [`Status::wait_change`]).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Something changed (a view was installed, or the node stopped): wakes waiters.
    pub(crate) fn bump(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let _g = lock(&self.gen_lock);
        self.changed.notify_all();
    }

    /// Sleeps up to `most` unless the generation moved past `seen`.
    pub(crate) fn wait_change(&self, seen: u64, most: Duration) {
        let g = lock(&self.gen_lock);
        if self.generation.load(Ordering::SeqCst) == seen {
            let _ = self.changed.wait_timeout(g, most);
        }
    }

    /// Records why this node stopped (the first reason wins).
    pub(crate) fn set_stopped(&self, why: String) {
        lock(&self.stopped).get_or_insert(why);
        self.is_stopped.store(true, Ordering::Release);
    }

    /// Why this node stopped, if it did (no lock while it runs: the send path asks,
    /// and inlined, a running node costs it one load).
    #[inline]
    pub(crate) fn stopped(&self) -> Option<String> {
        if !self.is_stopped.load(Ordering::Acquire) {
            return None;
        }
        self.why_stopped()
    }

    #[cold]
    fn why_stopped(&self) -> Option<String> {
        lock(&self.stopped).clone()
    }

    /// This node was removed for `why` and is joining again (`None`: it is back).
    pub(crate) fn set_rejoining(&self, why: Option<String>) {
        *lock(&self.rejoining) = why;
    }

    /// Why this node was removed, while it is joining again.
    pub(crate) fn rejoining(&self) -> Option<String> {
        lock(&self.rejoining).clone()
    }

    /// This node is out of its view for `why` (`None`: it is back).
    pub(crate) fn set_removal(&self, why: Option<super::Removal>) {
        *lock(&self.removal) = why;
    }

    /// Why this node is out of its view, while it is.
    pub(crate) fn removal(&self) -> Option<super::Removal> {
        lock(&self.removal).clone()
    }

    /// The application asked this node to shut down: its threads end.
    pub(crate) fn shut_down(&self) {
        self.shutdown.store(true, Ordering::Release);
    }

    /// True once [`Status::shut_down`] was called.
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }
}
