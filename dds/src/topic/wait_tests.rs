//! A thread waiting for its writer's samples to be delivered here is woken by the
//! delivery itself, not by the slice after which it looks at the group again.

use super::*;
use crate::engine::Effects;
use spindle_sst::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// Far longer than the test's deadline: a wake-up that is lost shows as a failure.
const SLICE: Duration = Duration::from_secs(3600);
const DEADLINE: Duration = Duration::from_secs(60);

fn topic() -> Arc<TopicState> {
    TopicState::open("waits", Qos::ordered(), false, NodeId(0), None).expect("a topic without a log")
}

/// Waits until `t` counts `n` waiters (each waiter counts itself under the lock
/// before it sleeps).
fn until_waiting(t: &TopicState, n: usize) {
    let until = Instant::now() + DEADLINE;
    while t.own.waiters.load(Ordering::Relaxed) != n {
        assert!(Instant::now() < until, "no waiter counted itself");
        std::thread::yield_now();
    }
}

#[test]
fn a_delivery_of_a_local_writers_sample_wakes_the_waiting_thread() {
    let t = topic();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let start = Instant::now();
            let ok = t.wait_own(DEADLINE, SLICE, |_| done.load(Ordering::Relaxed), || false);
            (ok, start.elapsed())
        });
        until_waiting(&t, 1);
        t.run(|_, fx| {
            done.store(true, Ordering::Relaxed);
            fx.delivered_own(1, 1);
        });
        let (ok, took) = waiter.join().expect("the waiter ends");
        // Returning at the deadline (with `done` true by then) would be a lost wake-up.
        assert!(ok && took < DEADLINE, "woken by the delivery, not at the deadline ({took:?})");
    });
    assert_eq!(t.own.waiters.load(Ordering::Relaxed), 0, "the waiter is no longer counted");
    assert_eq!(t.delivered_count(), 1, "one own sample counted");
}

#[test]
fn a_batch_of_own_samples_is_counted_once_whole() {
    let t = topic();
    t.run(|_, fx| {
        for seq in 1..=5 {
            fx.delivered_own(1, seq);
        }
    });
    assert_eq!(t.delivered_count(), 5);
    t.run(|_, _| {});
    assert_eq!(t.delivered_count(), 5, "an input without own samples adds none");
}

#[test]
fn a_waiter_gives_up_when_told_and_at_its_deadline() {
    let t = topic();
    assert!(!t.wait_own(Duration::from_millis(1), SLICE, |_| false, || false), "past its deadline");
    assert!(!t.wait_own(DEADLINE, Duration::from_millis(1), |_| false, || true), "the group stopped");
    assert!(t.wait_own(DEADLINE, SLICE, |_| true, || false), "already done");
    assert_eq!(t.own.waiters.load(Ordering::Relaxed), 0);
}
