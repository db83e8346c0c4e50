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
        // Busy passes that never give the core away: with busy loops beside the
        // test, each yield could wait out a time slice, and passes would crawl.
        let pt = with_config(PollConfig { spin, busy_yield: Duration::ZERO, ..PollConfig::default() });
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
        assert!(poll_until(Duration::from_secs(30), Duration::from_millis(1), || pt.stats().passes > passes + 10_000));
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

/// Runs `f` on a thread of its own; fails the test if it has not returned in 30 s.
fn within_30s<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(30)).expect("finished within 30 s")
}

#[derive(Default)]
struct Ran {
    on: Option<std::thread::ThreadId>,
    count: u64,
}

#[test]
fn a_borrower_runs_the_triggers_on_its_own_thread_and_the_thread_resumes_after() {
    for spin in [Duration::ZERO, Duration::from_micros(50)] {
        let t = MemFabric::new()
            .join(NodeId(0), &[], &[RegionSpec { id: RegionId(0), len: 64 }], Duration::from_secs(5))
            .unwrap();
        let cfg = PollConfig { spin, ..PollConfig::default() };
        let pt = Arc::new(PredicateThread::spawn((false, Ran::default()), Arc::new(t), cfg).unwrap());
        pt.register(
            Kind::Recurrent,
            |s: &(bool, Ran)| s.0,
            |s, _| {
                s.0 = false;
                s.1.on = Some(std::thread::current().id());
                s.1.count += 1;
            },
        );
        settle_any(&pt);
        let p = pt.clone();
        let (outcome, me) = within_30s(move || {
            let lender = p.lender();
            p.with_state(|s| s.0 = true);
            let outcome =
                lender.run_until(Instant::now() + Duration::from_secs(20), || p.with_state(|s| s.1.count > 0));
            (outcome, std::thread::current().id())
        });
        assert_eq!(outcome, Lent::Done);
        assert_eq!(pt.with_state(|s| s.1.on), Some(me), "the trigger ran on the borrowing thread");
        // Given back: the thread runs the passes again once the linger is over.
        pt.with_state(|s| s.0 = true);
        pt.notify();
        assert!(poll_until(Duration::from_secs(20), Duration::from_millis(1), || pt.with_state(|s| s.1.count == 2)));
        assert_ne!(pt.with_state(|s| s.1.on), Some(me), "the predicate thread ran it");
    }
}

/// `settle` for any state: the thread parked twice more.
fn settle_any<T: Send + 'static>(pt: &PredicateThread<T>) {
    let parks = pt.stats().parks;
    pt.notify();
    assert!(poll_until(Duration::from_secs(10), Duration::from_millis(1), || pt.stats().parks > parks + 1));
}

#[test]
fn one_borrower_at_a_time_and_a_condition_that_never_holds_times_out() {
    use crate::sync::atomic::AtomicBool;
    let pt = Arc::new(thread(Duration::from_micros(20)));
    let (inside, release) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (p, i, r) = (pt.clone(), inside.clone(), release.clone());
    let first = std::thread::spawn(move || {
        p.lender().run_until(Instant::now() + Duration::from_secs(25), || {
            i.store(true, Ordering::Release);
            r.load(Ordering::Acquire)
        })
    });
    assert!(poll_until(Duration::from_secs(20), Duration::from_millis(1), || inside.load(Ordering::Acquire)));
    assert_eq!(pt.lender().run_until(Instant::now() + Duration::from_secs(1), || true), Lent::Unavailable);
    release.store(true, Ordering::Release);
    assert_eq!(first.join().unwrap(), Lent::Done);
    let p = pt.clone();
    let outcome = within_30s(move || p.lender().run_until(Instant::now() + Duration::from_millis(20), || false));
    assert_eq!(outcome, Lent::TimedOut);
}

#[test]
fn stop_ends_a_borrow_and_no_pass_runs_after_it() {
    let mut pt = thread(Duration::from_micros(20));
    pt.register(Kind::Recurrent, |_: &S| true, |s, _| s.ticks = s.ticks.wrapping_add(1));
    let lender = pt.lender();
    let probe = pt.lender();
    // The borrower's first try can meet the probe's borrow and be refused; it tries
    // again until it holds the passes (each of its borrows can only end at the
    // deadline or by the stop).
    let until = Instant::now() + Duration::from_secs(25);
    let stopping = Arc::new(crate::sync::atomic::AtomicBool::new(false));
    let s = stopping.clone();
    let borrower = std::thread::spawn(move || loop {
        let outcome = lender.run_until(until, || false);
        if outcome != Lent::Unavailable || Instant::now() >= until {
            break (outcome, false);
        }
        if s.load(Ordering::Acquire) {
            break (outcome, true);
        }
    });
    // The borrower is running the passes once a second borrow is refused.
    assert!(poll_until(Duration::from_secs(20), Duration::from_millis(1), || {
        probe.run_until(Instant::now(), || true) == Lent::Unavailable
    }));
    stopping.store(true, Ordering::Release);
    pt.stop();
    assert_eq!(borrower.join().unwrap(), (Lent::Unavailable, true), "a stopped node's borrow ends");
    let ticks = pt.with_state(|s| s.ticks);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(pt.with_state(|s| s.ticks), ticks, "no pass after stop");
    assert_eq!(probe.run_until(Instant::now() + Duration::from_secs(1), || false), Lent::Unavailable);
}

#[test]
fn a_trigger_that_would_borrow_is_refused_instead_of_deadlocking() {
    let pt = Arc::new(thread(Duration::from_micros(20)));
    let seen: Arc<Mutex<Vec<Lent>>> = Arc::new(Mutex::new(Vec::new()));
    let (lender, s) = (pt.lender(), seen.clone());
    pt.register(
        Kind::OneTime,
        |st: &S| st.flag,
        move |_, _| {
            s.lock().unwrap().push(lender.run_until(Instant::now() + Duration::from_secs(5), || false));
        },
    );
    pt.with_state(|st| st.flag = true);
    pt.notify();
    assert!(poll_until(Duration::from_secs(20), Duration::from_millis(1), || !seen.lock().unwrap().is_empty()));
    assert_eq!(seen.lock().unwrap()[0], Lent::Unavailable, "on the predicate thread");
    // And inside a borrower's own pass: the condition is set from the borrower's
    // `done`, while it holds the working set, so no other thread runs that pass.
    let (lender, s) = (pt.lender(), seen.clone());
    pt.register(
        Kind::OneTime,
        |st: &S| st.ticks == 1,
        move |_, _| {
            s.lock().unwrap().push(lender.run_until(Instant::now() + Duration::from_secs(5), || false));
        },
    );
    let (p, sn) = (pt.clone(), seen.clone());
    let outcome = within_30s(move || {
        let mut first = true;
        p.lender().run_until(Instant::now() + Duration::from_secs(20), || {
            if std::mem::take(&mut first) {
                p.with_state(|st| st.ticks = 1);
            }
            sn.lock().unwrap().len() == 2
        })
    });
    assert_eq!(outcome, Lent::Done);
    assert_eq!(seen.lock().unwrap()[1], Lent::Unavailable, "inside a borrowed pass");
}

#[test]
fn a_busy_thread_yields_after_each_working_pass_once_busy_long_enough() {
    // Ten passes in a row fire the trigger, then none does. Busy for a nanosecond
    // is busy from the second pass on: a yield after each of passes 2..=10; an
    // hour is never reached; zero turns it off. Whatever the spin budget (a parked
    // thread's pass before sleeping counts as the first of the run too).
    let (ns, hour) = (Duration::from_nanos(1), Duration::from_secs(3600));
    for spin in [Duration::ZERO, Duration::from_micros(50)] {
        for (after, expect) in [(ns, 9u64), (Duration::ZERO, 0), (hour, 0)] {
            let mut pt = with_config(PollConfig { spin, busy_yield: after, ..PollConfig::default() });
            settle(&pt);
            pt.register(Kind::Recurrent, |s: &S| s.ticks < 10, |s, _| s.ticks += 1);
            pt.notify();
            settle(&pt);
            assert_eq!(pt.with_state(|s| s.ticks), 10);
            assert_eq!(pt.stats().busy_yields, expect, "busy_yield {after:?}, spin {spin:?}");
            pt.stop();
        }
    }
}
