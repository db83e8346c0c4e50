//! The handle sender threads claim through.

use super::{Claim, Reservation, SendError, SendState};
use spindle_sst::sync::Arc;

/// A handle that reserves slots of one subgroup without the core's lock (cheap to
/// clone; any number of threads may hold one).
#[derive(Debug, Clone)]
pub struct Sender(pub(crate) Arc<SendState>);

impl Sender {
    /// Claims the next slot for a `len`-byte message; never blocks. `Full`: no free
    /// slot (wait for deliveries); `Busy`: the predicate thread is inserting nulls for
    /// a moment; `Wedged`: the view is ending.
    pub fn try_reserve(&self, len: usize) -> Result<Reservation, SendError> {
        SendState::try_reserve(&self.0, len)
    }

    /// [`Sender::try_reserve`] for a caller that keeps this handle while it holds
    /// the claim (no reference count is taken).
    #[inline]
    pub(crate) fn claim(&self, len: usize) -> Result<Claim, SendError> {
        self.0.claim_slot(len)
    }

    /// The state claims are made on.
    #[inline]
    pub(crate) fn state(&self) -> &SendState {
        &self.0
    }

    /// True if [`Sender::try_reserve`] could succeed now.
    pub fn can_reserve(&self) -> bool {
        self.0.can_claim()
    }

    /// Packs small messages (`true`): a message that fits joins this sender's last
    /// entry while the predicate thread has not taken it in, and shares its index
    /// (see the module `pack`). Off by default. Receivers need no setting.
    pub fn set_packing(&self, on: bool) {
        self.0.set_packing(on)
    }
}
