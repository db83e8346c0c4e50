//! What a running group counts: views, deliveries, sends and resends.

use spindle_sst::sync::atomic::{AtomicU64, Ordering};
use spindle_sst::sync::lock;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Counters of a running group.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    /// Views installed after the first one this node had.
    pub views_installed: u64,
    /// Milliseconds from the start of each view change (the wedge) to the next view
    /// running here, in order.
    pub view_change_ms: Vec<f64>,
    /// Messages delivered to the application.
    pub delivered: u64,
    /// Messages this node sent (resends not counted again), counted as this node's
    /// predicate thread takes each in, within a pass of its send.
    pub sent: u64,
    /// Messages sent again after a view change discarded them.
    pub resent: u64,
    /// Of those, messages whose resend waited for a later view because the next
    /// view was already changing when it was installed.
    pub resends_carried: u64,
    /// Times this node was removed while alive and joined the group again
    /// ([`crate::config::Config::rejoin`]).
    pub rejoins: u64,
    /// Milliseconds from each removal this node noticed to its running a view of
    /// the group again, in order.
    pub rejoin_ms: Vec<f64>,
    /// Client sessions this member serves now ([`crate::client`]).
    pub clients: u64,
    /// Client sessions this member dropped because the client fell behind.
    pub clients_dropped: u64,
    /// Control connections and discovery beacons refused because they did not
    /// prove the group's secret (or came with one to a group without).
    pub auth_refused: u64,
}

/// The counters behind [`Metrics`]: the per-message ones are atomics (no lock on the
/// send and delivery paths), the per-view ones sit behind a lock.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    views: Mutex<Metrics>,
    /// Messages delivered to the application (shared with every view's upcalls).
    pub(crate) delivered: Arc<AtomicU64>,
    /// Messages this node sent in views that ended, resends included (each view
    /// adds its subgroups' counts when it stops). The current view's are read from
    /// its subgroups: a send counts nothing itself, since an atomic add on every
    /// send costs the sender a locked instruction per message.
    sent_ended: Arc<AtomicU64>,
    /// Connections and beacons refused for their credentials.
    pub(crate) auth_refused: AtomicU64,
}

impl Counters {
    /// Where a view adds the messages this node sent in it once it stops.
    pub(crate) fn sent_ended(&self) -> Arc<AtomicU64> {
        self.sent_ended.clone()
    }

    /// A view installed after a change that took `took`, resending `resent`
    /// messages now and carrying `carried` to the next view.
    pub(crate) fn view_installed(&self, took: Duration, resent: u64, carried: u64) {
        let mut m = lock(&self.views);
        m.views_installed += 1;
        m.view_change_ms.push(took.as_secs_f64() * 1e3);
        m.resent += resent;
        m.resends_carried += carried;
    }

    /// This node runs a view again, `took` after it noticed its removal.
    pub(crate) fn rejoined(&self, took: Duration) {
        lock(&self.views).rejoin_ms.push(took.as_secs_f64() * 1e3);
    }

    /// A copy of every counter; `sent_now` is what the current view's subgroups
    /// counted so far.
    pub(crate) fn snapshot(&self, sent_now: u64) -> Metrics {
        let mut m = lock(&self.views).clone();
        m.delivered = self.delivered.load(Ordering::Relaxed);
        // Resends were counted by the view that sent them first and again by the
        // one that sent them again.
        m.sent = (self.sent_ended.load(Ordering::Relaxed) + sent_now).saturating_sub(m.resent);
        m.auth_refused = self.auth_refused.load(Ordering::Relaxed);
        m.rejoins = m.rejoin_ms.len() as u64;
        m
    }
}
