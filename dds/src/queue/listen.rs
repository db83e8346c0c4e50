//! A reader's listener: set and cleared by the application, called in place by
//! delivery, and held across a run of samples by a delivered batch.

use super::ReaderCore;
use crate::sample::{SampleInfo, CLIENT_HEADER, HEADER};
use crate::sink::Src;
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::sync::lock;

/// A listener: the sample's info, its bytes, and where its payload starts in them.
pub(crate) type InPlaceFn = Box<dyn FnMut(&SampleInfo, &Src<'_>, usize) + Send>;

/// A reader's listener and the samples handed to it.
#[derive(Default)]
pub(crate) struct Listening {
    pub(super) f: Option<InPlaceFn>,
    /// Samples handed to `f` (counted here, under the listener's lock, and
    /// published to [`ReaderCore::taken_by_listener`] with a plain store).
    taken: u64,
}

impl ReaderCore {
    /// Sets (or with `None` removes) the listener that takes this reader's samples
    /// instead of its queue.
    pub(crate) fn set_listener(&self, f: Option<InPlaceFn>) {
        let mut l = lock(&self.listener);
        self.listening.store(f.is_some(), Ordering::Release);
        l.f = f;
    }

    /// Samples handed to a listener so far.
    pub(crate) fn taken_by_listener(&self) -> u64 {
        self.taken_by_listener.load(Ordering::Relaxed)
    }

    /// True if this reader's samples may go straight to its listener (see
    /// [`ReaderCore::offer`]): unkeyed, with no deadline or filter to track.
    pub(crate) fn untracked(&self) -> bool {
        !(self.keyed || self.deadline.is_some() || self.filter.is_some())
    }

    /// This reader's listener, locked, for a run of [`ReaderCore::offer_held`]
    /// calls (a delivered batch takes it once, not once per sample). While it is
    /// held, `listening` cannot change.
    pub(crate) fn hold_listener(&self) -> std::sync::MutexGuard<'_, Listening> {
        lock(&self.listener)
    }

    /// A sample for this reader: to its listener, or into its queue.
    pub(crate) fn offer(&self, info: &SampleInfo, src: Src<'_>) {
        // The fast path: an unkeyed reader with nothing to track, whose listener
        // takes the sample in place (no copy, no queue lock, the info as it came).
        if self.untracked() && self.listening.load(Ordering::Acquire) {
            let mut l = lock(&self.listener);
            if self.to_listener(&mut l, info, &src) {
                return;
            }
        }
        self.enqueue(info, src)
    }

    /// [`ReaderCore::offer`] with the listener's lock already held (`l`, from
    /// [`ReaderCore::hold_listener`] of this reader, which must be untracked).
    pub(crate) fn offer_held(&self, l: &mut Listening, info: &SampleInfo, src: Src<'_>) {
        debug_assert!(self.untracked());
        if !self.to_listener(l, info, &src) {
            // No listener: `listening` is false while the lock is held, so the
            // queue's path takes no listener lock.
            self.enqueue(info, src)
        }
    }

    /// Hands the sample to the listener in place, if one is set.
    #[inline]
    fn to_listener(&self, l: &mut Listening, info: &SampleInfo, src: &Src<'_>) -> bool {
        let Listening { f, taken } = l;
        let Some(f) = f.as_mut() else { return false };
        *taken += 1;
        self.taken_by_listener.store(*taken, Ordering::Relaxed);
        // The header's length, from what the info says of the writer (no read).
        f(info, src, if info.writer.client.is_some() { CLIENT_HEADER } else { HEADER });
        true
    }
}
