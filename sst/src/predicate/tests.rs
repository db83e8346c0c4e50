//! The predicate thread's kinds, timers, pacing and idle policy.

use super::*;
use crate::transport::{mem::MemFabric, NodeId, RegionId, RegionSpec};
use testkit::poll_until;

#[derive(Default)]
struct S {
    flag: bool,
    rises: u32,
    ticks: u32,
}

fn thread(spin: Duration) -> PredicateThread<S> {
    with_config(PollConfig { spin, ..PollConfig::default() })
}

fn with_config(cfg: PollConfig) -> PredicateThread<S> {
    let t = MemFabric::new()
        .join(NodeId(0), &[], &[RegionSpec { id: RegionId(0), len: 64 }], Duration::from_secs(5))
        .unwrap();
    PredicateThread::spawn(S::default(), Arc::new(t), cfg).unwrap()
}

/// Waits until the thread has parked twice more: it has run a full pass over the
/// current state and found nothing to do.
fn settle(pt: &PredicateThread<S>) {
    let parks = pt.stats().parks;
    pt.notify();
    assert!(poll_until(Duration::from_secs(10), Duration::from_millis(1), || pt.stats().parks > parks + 1));
}

#[test]
fn transition_fires_on_each_rise_only() {
    for spin in [Duration::ZERO, Duration::from_micros(50)] {
        let pt = thread(spin);
        pt.register(Kind::Transition, |s: &S| s.flag, |s, _| s.rises += 1);
        settle(&pt);
        assert_eq!(pt.with_state(|s| s.rises), 0);
        pt.with_state(|s| s.flag = true);
        settle(&pt);
        assert_eq!(pt.with_state(|s| s.rises), 1, "fires once while the predicate stays true");
        pt.with_state(|s| s.flag = false);
        settle(&pt);
        pt.with_state(|s| s.flag = true);
        settle(&pt);
        assert_eq!(pt.with_state(|s| s.rises), 2, "fires again on the next rise");
    }
}

#[test]
fn a_paced_condition_waits_its_period_while_busy_and_is_looked_at_before_parking() {
    use crate::sync::atomic::AtomicU32;
    for spin in [Duration::ZERO, Duration::from_micros(50)] {
        let pt = thread(spin);
        let looks = Arc::new(AtomicU32::new(0));
        let l = looks.clone();
        let hour = Duration::from_secs(3600);
        pt.register_paced(
            Kind::Transition,
            hour,
            move |s: &S| {
                l.fetch_add(1, Ordering::Relaxed);
                s.flag
            },
            |s, _| s.rises += 1,
        );
        settle(&pt);
        pt.with_state(|s| s.flag = true);
        settle(&pt);
        assert_eq!(pt.with_state(|s| s.rises), 1, "seen in the pass before parking, though not due");
        // Busy: a trigger that always runs keeps the thread from parking.
        let busy = pt.register(Kind::Recurrent, |_: &S| true, |s, _| s.ticks = s.ticks.wrapping_add(1));
        let (before, passes) = (looks.load(Ordering::Relaxed), pt.stats().passes);
        assert!(poll_until(Duration::from_secs(10), Duration::from_millis(1), || pt.stats().passes > passes + 10_000));
        assert!(looks.load(Ordering::Relaxed) <= before + 1, "not looked at on every busy pass");
        pt.remove(busy);
    }
}

#[test]
fn removed_timer_stops_and_stop_joins() {
    let mut pt = thread(Duration::from_micros(10));
    let id = pt.every(Duration::from_millis(2), |s: &mut S, _| s.ticks += 1);
    assert!(poll_until(Duration::from_secs(10), Duration::from_millis(1), || pt.with_state(|s| s.ticks >= 3)));
    pt.remove(id);
    settle(&pt);
    let after = pt.with_state(|s| s.ticks);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(pt.with_state(|s| s.ticks), after, "a removed timer no longer runs");
    pt.stop();
    assert!(pt.stats().passes > 0);
}

#[test]
fn a_spinning_thread_yields_its_core_only_when_configured_to() {
    for (every, yields) in [(Duration::from_micros(1), true), (Duration::ZERO, false)] {
        // A budget far longer than the test: the thread spins idle throughout.
        let mut pt =
            with_config(PollConfig { spin: Duration::from_secs(600), yield_every: every, ..PollConfig::default() });
        assert!(
            poll_until(Duration::from_secs(30), Duration::from_millis(1), || pt.stats().passes > 200_000),
            "the thread spins"
        );
        if yields {
            assert!(
                poll_until(Duration::from_secs(30), Duration::from_millis(1), || pt.stats().yields > 10),
                "a spinning thread yields every {every:?}"
            );
        } else {
            assert_eq!(pt.stats().yields, 0, "no yields when yield_every is zero");
        }
        assert_eq!(pt.stats().parks, 0, "spinning, not parked");
        pt.stop();
    }
}
