//! Heartbeats and the failure detector.
//!
//! Each node advances a heartbeat counter column on a timer and pushes it to its
//! peers. The [`Detector`] (a sans-IO core: time is passed in) suspects a peer whose
//! counter has not moved for `timeout`, or at once when the transport reports the
//! connection broken. Suspicion is never retracted and is reported once per peer;
//! `views` consumes the reports.
//!
//! [`install`] wires a detector into a [`PredicateThread`]: a timer trigger that beats
//! and checks, and a transport-event handler.

use crate::predicate::{PredicateThread, Pushes};
use crate::sync::{lock, Arc, Mutex};
use crate::table::{Counter, LocalRow};
use crate::transport::{NodeId, PeerEvent};
use std::time::{Duration, Instant};

/// Heartbeat timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// How often this node beats (and checks its peers).
    pub period: Duration,
    /// A peer silent this long is suspected.
    pub timeout: Duration,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        HeartbeatConfig { period: Duration::from_millis(100), timeout: Duration::from_secs(1) }
    }
}

/// Why a peer is suspected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Its heartbeat did not move for this long.
    Silent(Duration),
    /// The transport reported the connection broken.
    Broken(String),
}

/// A newly suspected peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspicion {
    /// The peer.
    pub peer: NodeId,
    /// Why.
    pub reason: Reason,
}

#[derive(Debug)]
struct Watch {
    node: NodeId,
    last: u64,
    since: Instant,
    suspected: bool,
    /// True once its counter moved while watched.
    beaten: bool,
    /// The transport's count of reads from it (see [`Detector::heard`]).
    heard: u64,
}

/// Suspects peers whose heartbeat stops (see the module docs).
#[derive(Debug)]
pub struct Detector {
    timeout: Duration,
    /// Extra silence allowed before a peer's first beat (see [`Detector::with_startup_grace`]).
    grace: Duration,
    peers: Vec<Watch>,
    /// When this node last looked at its peers ([`Detector::look`]).
    last_look: Option<Instant>,
}

impl Detector {
    /// Watches `peers` from `now`.
    pub fn new(peers: &[NodeId], now: Instant, timeout: Duration) -> Detector {
        let peers = peers
            .iter()
            .map(|&node| Watch { node, last: 0, since: now, suspected: false, beaten: false, heard: 0 })
            .collect();
        Detector { timeout, grace: Duration::ZERO, peers, last_look: None }
    }

    /// Gives every peer `grace` more before its first beat: a peer that has not beaten
    /// once since the watch began is suspected after `grace + timeout` of silence, and
    /// after `timeout` once it has. A group runtime watches a new view's members from
    /// the moment its own setup ends, while a member that is merely later may still be
    /// in its setup (which ends by its own deadline) and cannot beat yet.
    pub fn with_startup_grace(mut self, grace: Duration) -> Detector {
        self.grace = grace;
        self
    }

    /// Watches every member of `table` but this node.
    pub fn for_table(table: &crate::table::Table, now: Instant, timeout: Duration) -> Detector {
        let me = table.members()[table.my_rank()];
        let others: Vec<NodeId> = table.members().iter().copied().filter(|m| *m != me).collect();
        Detector::new(&others, now, timeout)
    }

    /// Notes that this node looks at its peers at `now` (call it before the
    /// `observe`s of that moment). Silence counts only while this node could watch:
    /// a look more than half the timeout after the last means this node itself was
    /// held up (a long upcall, a starved CPU) and could neither receive nor look, so
    /// of that gap only half the timeout counts as every peer's silence. A peer that
    /// is really gone is still suspected, after a few more looks.
    pub fn look(&mut self, now: Instant) {
        let credit = self.timeout / 2;
        if let Some(gap) = self.last_look.map(|t| now.saturating_duration_since(t)).filter(|g| *g > credit) {
            for w in self.peers.iter_mut().filter(|w| !w.suspected) {
                w.since = (w.since + (gap - credit)).min(now);
            }
        }
        self.last_look = Some(now);
    }

    /// Records `peer`'s heartbeat `value` seen at `now`; returns a suspicion the first
    /// time the peer has been silent for the timeout. Unknown peers are ignored.
    pub fn observe(&mut self, now: Instant, peer: NodeId, value: u64) -> Option<Suspicion> {
        let w = self.peers.iter_mut().find(|w| w.node == peer)?;
        if w.suspected {
            return None;
        }
        if value != w.last {
            w.last = value;
            w.since = now;
            w.beaten = true;
            return None;
        }
        let silent = now.saturating_duration_since(w.since);
        let allowed = if w.beaten { self.timeout } else { self.timeout + self.grace };
        if silent >= allowed {
            w.suspected = true;
            return Some(Suspicion { peer, reason: Reason::Silent(silent) });
        }
        None
    }

    /// Records the transport's count of reads from `peer` (`Transport::heard`) seen at
    /// `now`: bytes arriving are a sign of life as a heartbeat is, so a peer whose
    /// heartbeat waits behind a large write on the same stream is not suspected.
    pub fn heard(&mut self, now: Instant, peer: NodeId, count: u64) {
        if let Some(w) = self.peers.iter_mut().find(|w| w.node == peer && !w.suspected && w.heard != count) {
            w.heard = count;
            w.since = now;
        }
    }

    /// The transport says the link to `peer` broke; returns a suspicion if new.
    pub fn broken(&mut self, peer: NodeId, why: &str) -> Option<Suspicion> {
        let w = self.peers.iter_mut().find(|w| w.node == peer)?;
        if w.suspected {
            return None;
        }
        w.suspected = true;
        Some(Suspicion { peer, reason: Reason::Broken(why.to_owned()) })
    }

    /// True once `peer` is suspected.
    pub fn is_suspected(&self, peer: NodeId) -> bool {
        self.peers.iter().any(|w| w.node == peer && w.suspected)
    }
}

/// Wires heartbeats into `pt`: every `cfg.period`, raise this node's `column` in the
/// row `row(state)` and push it to the other members, then check every member's
/// counter; transport breaks are reported at once. `on_suspect` runs on the predicate
/// thread (with the state lock held) once per suspected peer.
pub fn install<S, R, F>(pt: &PredicateThread<S>, cfg: HeartbeatConfig, row: R, column: Counter, on_suspect: F)
where
    S: Send + 'static,
    R: Fn(&S) -> &LocalRow + Send + Sync + 'static,
    F: FnMut(&mut S, Suspicion, &mut Pushes) + Send + 'static,
{
    let row = Arc::new(row);
    let on_suspect = Arc::new(Mutex::new(on_suspect));
    let detector: Arc<Mutex<Option<Detector>>> = Arc::new(Mutex::new(None));
    {
        let (row, det, cb) = (row.clone(), detector.clone(), on_suspect.clone());
        pt.every(cfg.period, move |s, pushes| {
            let now = Instant::now();
            let local = row(s);
            local.increment(column);
            // Quiet: peers read heartbeats on their own timers; waking them for each
            // beat would cost an idle node one wake-up per peer per period.
            pushes.push(local.push(column.range()).quiet());
            let table = local.table().clone();
            let mut det = lock(&det);
            let d = det.get_or_insert_with(|| Detector::for_table(&table, now, cfg.timeout));
            d.look(now);
            let found: Vec<Suspicion> = (0..table.rows())
                .filter(|r| *r != table.my_rank())
                .filter_map(|r| d.observe(now, table.members()[r], table.counter(r, column)))
                .collect();
            drop(det);
            let mut cb = lock(&cb);
            for sus in found {
                cb(s, sus, pushes);
            }
        });
    }
    pt.on_event(move |s, ev, pushes| {
        let PeerEvent::Broken { peer, reason } = ev;
        let table = row(s).table().clone();
        let mut det = lock(&detector);
        let d = det.get_or_insert_with(|| Detector::for_table(&table, Instant::now(), cfg.timeout));
        let sus = d.broken(*peer, reason);
        drop(det);
        if let Some(sus) = sus {
            lock(&on_suspect)(s, sus, pushes);
        }
    });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_peer_heard_from_is_alive_until_the_bytes_stop_too() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Detector::new(&[NodeId(1)], t0, ms(100));
        assert_eq!(d.observe(t0 + ms(10), NodeId(1), 1), None);
        d.heard(t0 + ms(90), NodeId(1), 5);
        assert_eq!(d.observe(t0 + ms(150), NodeId(1), 1), None, "heartbeat still, but bytes 60 ms ago");
        d.heard(t0 + ms(170), NodeId(1), 5);
        assert!(d.observe(t0 + ms(191), NodeId(1), 1).is_some(), "neither beat nor bytes for 101 ms");
    }

    #[test]
    fn silent_peer_is_suspected_once_after_timeout() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Detector::new(&[NodeId(1), NodeId(2)], t0, ms(100));
        assert_eq!(d.observe(t0 + ms(50), NodeId(1), 1), None);
        assert_eq!(d.observe(t0 + ms(50), NodeId(2), 1), None);
        assert_eq!(d.observe(t0 + ms(120), NodeId(1), 2), None, "moving heartbeat");
        assert_eq!(d.observe(t0 + ms(140), NodeId(2), 1), None, "90 ms silent");
        let s = d.observe(t0 + ms(151), NodeId(2), 1).expect("suspected at 101 ms");
        assert_eq!(s.peer, NodeId(2));
        assert!(matches!(s.reason, Reason::Silent(x) if x >= ms(100)));
        assert_eq!(d.observe(t0 + ms(500), NodeId(2), 1), None, "reported once");
        assert_eq!(d.observe(t0 + ms(500), NodeId(2), 9), None, "never retracted");
        assert!(d.is_suspected(NodeId(2)));
        assert!(!d.is_suspected(NodeId(1)));
    }

    #[test]
    fn startup_grace_covers_only_the_first_beat() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Detector::new(&[NodeId(1), NodeId(2)], t0, ms(100)).with_startup_grace(ms(300));
        assert_eq!(d.observe(t0 + ms(350), NodeId(1), 0), None, "not beaten yet: 100 + 300 ms allowed");
        let s = d.observe(t0 + ms(400), NodeId(1), 0).expect("silent past timeout + grace");
        assert!(matches!(s.reason, Reason::Silent(x) if x >= ms(400)));
        assert_eq!(d.observe(t0 + ms(390), NodeId(2), 1), None, "first beat");
        assert_eq!(d.observe(t0 + ms(480), NodeId(2), 1), None, "90 ms silent");
        assert!(d.observe(t0 + ms(490), NodeId(2), 1).is_some(), "after a beat, the plain timeout");
    }

    #[test]
    fn silence_this_node_could_not_watch_counts_only_in_part() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Detector::new(&[NodeId(1)], t0, ms(100));
        d.look(t0);
        assert_eq!(d.observe(t0, NodeId(1), 1), None);
        // This node was held up for 300 ms: 50 of them count.
        d.look(t0 + ms(300));
        assert_eq!(d.observe(t0 + ms(300), NodeId(1), 1), None, "held up itself, it watched 50 ms");
        d.look(t0 + ms(340));
        assert_eq!(d.observe(t0 + ms(340), NodeId(1), 1), None, "watched 90 ms");
        d.look(t0 + ms(351));
        assert!(d.observe(t0 + ms(351), NodeId(1), 1).is_some(), "watched 101 ms");
        // Held up on every look, it still suspects a silent peer: 50 ms count per look.
        let mut d = Detector::new(&[NodeId(1)], t0, ms(100));
        let found = (0..10).map(|i| t0 + ms(300 * i)).find(|&t| {
            d.look(t);
            d.observe(t, NodeId(1), 0).is_some()
        });
        assert_eq!(found, Some(t0 + ms(600)), "suspected on the third look");
    }

    #[test]
    fn broken_link_is_immediate_and_once() {
        let t0 = Instant::now();
        let mut d = Detector::new(&[NodeId(1)], t0, Duration::from_secs(60));
        assert!(matches!(d.broken(NodeId(1), "reset"), Some(Suspicion { reason: Reason::Broken(_), .. })));
        assert_eq!(d.broken(NodeId(1), "again"), None);
        assert_eq!(d.broken(NodeId(7), "unknown"), None);
    }
}
