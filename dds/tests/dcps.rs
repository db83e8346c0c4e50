//! The DCPS features beside keys: the KeepLast late joiner under load, WaitSets,
//! content filters, lifespan, deadlines, writes that never hang, the async
//! stream and write, and type fingerprints.

mod common;
use common::{domain, WAIT};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use spindle_dds::StateMask;
use spindle_dds::{Awaited, DdsError, QosError, Sample, TopicError};
use spindle_dds::{GuardCondition, StatusKind, WaitSet};
use spindle_dds::{History, Qos};
use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_views::config::Transport;
use std::sync::{mpsc, Arc};
use std::time::Duration;
use testkit::poll_until;

/// A late KeepLast(20) reader of a topic written at about 1 kHz gets exactly the
/// 20 samples before its seam, then the live ones, with no gap.
fn keep_last_late_joiner(t: Transport) {
    let name = format!("ddsl{}{}", std::process::id(), t as u8);
    let ps = domain(&name, 3, t);
    let qos = Qos::volatile(History::KeepLast(20));
    let t0 = ps[0].topic::<u64>("ticks", qos).unwrap();
    let t1 = ps[1].topic::<u64>("ticks", qos).unwrap();
    let early = ps[1].create_reader(&t1, qos.history(History::KeepAll)).unwrap();
    let w = ps[0].create_writer(&t0, qos).unwrap();
    let stop = AtomicBool::new(false);
    let got = std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) && i < 20_000 {
                w.write(&i).unwrap();
                i += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        // Node 2 asks only once 40 samples are delivered at node 1, so its request is
        // ordered after them and its seam has at least 20 before it, however slow the host.
        assert_eq!(early.take_n(40, WAIT).len(), 40, "the writer is running");
        let t2 = ps[2].find_topic::<u64>("ticks").unwrap();
        let late = ps[2].create_reader(&t2, Qos::volatile(History::KeepAll)).unwrap();
        let got = late.take_n(60, WAIT);
        stop.store(true, Ordering::Relaxed);
        got
    });
    assert_eq!(got.len(), 60);
    let history: Vec<&Sample<u64>> = got.iter().filter(|s| s.info.from_history).collect();
    assert_eq!(history.len(), 20, "the last 20 before the seam: {:?}", got.iter().map(|s| s.data).collect::<Vec<_>>());
    let data: Vec<u64> = got.iter().map(|s| s.data).collect();
    assert!(data.windows(2).all(|p| p[1] == p[0] + 1), "no gap, no duplicate: {data:?}");
    assert!(got.windows(2).all(|p| p[1].info.topic_seq == p[0].info.topic_seq + 1));
    assert!(got[..20].iter().all(|s| s.info.from_history) && !got[20].info.from_history);
}

#[test]
fn a_keep_last_late_joiner_gets_the_last_n_before_its_seam_on_shm() {
    keep_last_late_joiner(Transport::Shm);
}

#[test]
fn a_keep_last_late_joiner_gets_the_last_n_before_its_seam_on_tcp() {
    keep_last_late_joiner(Transport::Tcp);
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Reading {
    sensor: u32,
    celsius: f32,
}

#[test]
fn a_waitset_waits_on_several_readers_and_says_which_fired() {
    let name = format!("ddsw{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let ta = ps[0].topic::<u32>("a", Qos::ordered()).unwrap();
    let tb = ps[0].topic::<Reading>("b", Qos::ordered()).unwrap();
    let ra = ps[1].create_reader(&ps[1].find_topic::<u32>("a").unwrap(), Qos::ordered()).unwrap();
    let rb = ps[1].create_reader(&ps[1].find_topic::<Reading>("b").unwrap(), Qos::ordered()).unwrap();
    let wa = ps[0].create_writer(&ta, ta.qos()).unwrap();
    let wb = ps[0].create_writer(&tb, tb.qos()).unwrap();
    let mut ws = WaitSet::new();
    let on_a = ws.attach(ra.read_condition(StateMask::not_read()));
    let on_b = ws.attach(rb.read_condition(StateMask::ANY));
    let guard = GuardCondition::new();
    let on_guard = ws.attach(guard.clone());
    let lost = ws.attach(ra.status_condition(&[StatusKind::SampleLost]));
    assert!(ws.wait(Duration::from_millis(50)).is_empty(), "nothing yet: the timeout");
    wb.write(&Reading { sensor: 1, celsius: 2.5 }).unwrap();
    assert_eq!(ws.wait(WAIT), vec![on_b]);
    assert_eq!(rb.take().len(), 1);
    wa.write(&7).unwrap();
    assert_eq!(ws.wait(WAIT), vec![on_a]);
    assert_eq!(ra.read().len(), 1, "read: no longer 'not read'");
    assert!(ws.wait(Duration::from_millis(50)).is_empty());
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| tx.send(ws.wait(WAIT)).unwrap());
        std::thread::sleep(Duration::from_millis(20));
        guard.set_trigger_value(true);
    });
    assert_eq!(rx.recv().unwrap(), vec![on_guard], "another thread's guard wakes it");
    guard.set_trigger_value(false);
    assert!(!ws.wait(Duration::ZERO).contains(&lost));
}

#[test]
fn a_filtered_reader_queues_only_matching_samples_and_its_history_counts_those() {
    let name = format!("ddsf{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let t0 = ps[0].topic::<Reading>("f", Qos::ordered()).unwrap();
    let t1 = ps[1].find_topic::<Reading>("f").unwrap();
    let hot =
        ps[1].create_reader_filtered(&t1, Qos::ordered().history(History::KeepLast(3)), |r| r.celsius > 30.0).unwrap();
    let all = ps[1].create_reader(&t1, Qos::ordered().history(History::KeepAll)).unwrap();
    let w = ps[0].create_writer(&t0, t0.qos()).unwrap();
    for i in 0..40 {
        w.write(&Reading { sensor: i, celsius: i as f32 }).unwrap();
    }
    assert_eq!(all.take_n(40, WAIT).len(), 40);
    let got: Vec<u32> = hot.take().into_iter().map(|s| s.data.sensor).collect();
    assert_eq!(got, vec![37, 38, 39], "the last three matching ones: history counts matching samples");
    let st = hot.status();
    assert_eq!((st.filtered, st.lost), (31, 6));

    // The same by an expression over the type's fields.
    let cold = ps[1].create_reader_where(&t1, Qos::ordered(), "celsius < 2 OR sensor = 39").unwrap();
    for i in 0..40 {
        w.write(&Reading { sensor: i, celsius: i as f32 }).unwrap();
    }
    let got: Vec<u32> = cold.take_n(3, WAIT).into_iter().map(|s| s.data.sensor).collect();
    assert_eq!(got, vec![0, 1, 39]);
    for bad in ["kelvin > 3", "celsius > 'hot'", "celsius >", "(sensor = 1"] {
        match ps[1].create_reader_where(&t1, Qos::ordered(), bad) {
            Err(DdsError::Filter { expr, .. }) => assert_eq!(expr, bad),
            other => panic!("{bad}: {other:?}"),
        }
    }
}

#[test]
fn endpoint_numbers_are_reused_after_their_endpoint_is_gone() {
    let name = format!("ddsi{}", std::process::id());
    let ps = domain(&name, 1, Transport::Shm);
    let t = ps[0].topic::<u32>("i", Qos::ordered()).unwrap();
    let a = ps[0].create_writer(&t, t.qos()).unwrap();
    let b = ps[0].create_reader(&t, t.qos()).unwrap();
    let (ida, idb) = (a.id(), b.id());
    drop(b);
    drop(a);
    let c = ps[0].create_writer(&t, t.qos()).unwrap();
    let d = ps[0].create_writer(&t, t.qos()).unwrap();
    assert_eq!((c.id(), d.id()), (ida, idb), "the lowest free numbers first");
    let e = ps[0].create_reader(&t, t.qos()).unwrap();
    c.write(&5).unwrap();
    let got = e.take_n(1, WAIT);
    assert_eq!((got[0].data, got[0].info.writer.id, got[0].info.seq), (5, ida, 1));
}

#[test]
fn samples_past_their_lifespan_leave_queues_and_histories() {
    let name = format!("ddse{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let qos = Qos::volatile(History::KeepAll).lifespan(Duration::from_millis(150));
    let t0 = ps[0].topic::<u32>("e", qos).unwrap();
    let t1 = ps[1].find_topic::<u32>("e").unwrap();
    let r = ps[1].create_reader(&t1, qos).unwrap();
    let w = ps[0].create_writer(&t0, qos).unwrap();
    for i in 0..5 {
        w.write(&i).unwrap();
    }
    assert!(w.wait_for_delivery(WAIT));
    assert!(poll_until(WAIT, Duration::from_millis(5), || r.status().received == 5));
    std::thread::sleep(Duration::from_millis(300));
    assert!(r.take().is_empty(), "all five outlived their lifespan");
    assert_eq!(r.status().expired, 5);
    let late = ps[0].create_reader(&t0, qos).unwrap();
    assert!(late.take_n(1, Duration::from_millis(100)).is_empty(), "the history dropped them too");
    w.write(&9).unwrap();
    assert_eq!(late.take_n(1, WAIT)[0].data, 9);
    let zero = ps[0].topic::<u32>("zero", Qos::ordered().lifespan(Duration::ZERO));
    assert!(matches!(zero, Err(DdsError::Topic { why: TopicError::Qos(QosError::ZeroLifespan), .. })), "{zero:?}");
}

#[test]
fn deadlines_missed_are_counted_per_instance_at_readers_and_writers() {
    let name = format!("ddsd{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let qos = Qos::ordered().deadline(Duration::from_millis(40));
    let t0 = ps[0].topic::<u32>("d", Qos::ordered()).unwrap();
    let t1 = ps[1].find_topic::<u32>("d").unwrap();
    let r = ps[1].create_reader(&t1, qos).unwrap();
    let w = ps[0].create_writer(&t0, qos).unwrap();
    let mut ws = WaitSet::new();
    let missed = ws.attach(r.status_condition(&[StatusKind::RequestedDeadlineMissed]));
    w.write(&1).unwrap();
    assert!(poll_until(WAIT, Duration::from_millis(5), || r.status().received == 1));
    assert_eq!(ws.wait(WAIT), vec![missed], "the deadline passes with no sample");
    let d = r.status().deadline_missed;
    assert!(d.total_count >= 1 && d.last_instance == spindle_dds::InstanceHandle::NIL, "{d:?}");
    assert!(w.offered_deadline_missed().total_count >= 1);
    let zero = ps[1].create_reader(&t1, Qos::ordered().deadline(Duration::ZERO));
    assert!(matches!(zero, Err(DdsError::Qos(QosError::ZeroDeadline))), "{:?}", zero.err());
}

#[test]
fn a_write_with_no_room_fails_after_max_blocking_time_and_try_write_never_waits() {
    let name = format!("ddsb{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let topic_qos = Qos::ordered().window(4);
    let t0 = ps[0].topic::<u32>("b", topic_qos).unwrap();
    let t1 = ps[1].find_topic::<u32>("b").unwrap();
    let r = ps[1].create_reader(&t1, Qos::ordered().history(History::KeepAll)).unwrap();
    // The reader's listener holds node 1's delivery thread: nothing it receives is
    // acknowledged, so node 0's ring fills.
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(std::sync::Mutex::new(release_rx));
    let held = Arc::new(AtomicBool::new(false));
    let (h, rx) = (held.clone(), release_rx.clone());
    r.on_data_available(move |_s| {
        if !h.swap(true, Ordering::SeqCst) {
            let _ = rx.lock().unwrap().recv_timeout(WAIT);
        }
    });
    let w = ps[0].create_writer(&t0, Qos::ordered().max_blocking_time(Duration::from_millis(50))).unwrap();
    // The first sample reaches the listener once node 1 is in the topic (a first
    // entry asks the others where the order stands): from then on it holds.
    assert_eq!(w.write(&0).unwrap(), 1);
    let got_first = || held.load(Ordering::SeqCst);
    assert!(testkit::poll_until(WAIT, Duration::from_millis(1), got_first), "the listener got the first sample");
    // Fill the ring with writes that wait: one refused after waiting its
    // max_blocking_time proves the ring full, as nothing can free room now. (A
    // try_write may also be refused while the ring still has room, when the
    // predicate thread is adding nulls at that moment: on a loaded host it did.)
    let mut sent = vec![1];
    let refused = loop {
        assert!(sent.len() < 64, "the ring of 4 never filled: {} sent", sent.len());
        match w.write(&(sent.len() as u32)) {
            Ok(seq) => sent.push(seq),
            Err(e) => break e,
        }
    };
    assert!(matches!(refused, DdsError::NoRoom(d) if d == Duration::from_millis(50)), "{refused:?}");
    let t = w.try_write(&99);
    assert!(matches!(t, Err(DdsError::NoRoom(_))), "{t:?} with the ring full");
    release_tx.send(()).unwrap();
    r.clear_listener();
    let n = sent.len() as u64;
    assert_eq!(sent, (1..=n).collect::<Vec<_>>(), "refused writes leave no gap in the writer's numbers");
    assert_eq!(w.write(&100).unwrap(), n + 1);
    assert!(w.wait_for_delivery(WAIT));
}

#[test]
fn stream_and_write_async_run_on_an_executor() {
    let name = format!("ddss{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let t0 = ps[0].topic::<u64>("s", Qos::ordered()).unwrap();
    let t1 = ps[1].find_topic::<u64>("s").unwrap();
    let r = ps[1].create_reader(&t1, Qos::ordered().history(History::KeepAll)).unwrap();
    let w = ps[0].create_writer(&t0, t0.qos()).unwrap();
    let got = std::thread::scope(|s| {
        s.spawn(|| {
            futures::executor::block_on(async {
                for i in 0..500u64 {
                    w.write_async(&i).await.unwrap();
                }
            })
        });
        futures::executor::block_on(r.stream().take(500).map(|s| s.data).collect::<Vec<u64>>())
    });
    assert_eq!(got, (0..500).collect::<Vec<_>>());
}

mod v1 {
    #[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
    pub struct Reading {
        pub sensor: u32,
        pub celsius: f32,
    }
}

mod v2 {
    #[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
    pub struct Reading {
        pub sensor: u32,
        pub celsius: f64,
    }
}

#[test]
fn types_match_by_name_and_layout_and_a_mismatch_names_both() {
    let name = format!("ddst{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let mine = ps[0].topic::<Reading>("t", Qos::ordered()).unwrap();
    let theirs = ps[1].find_topic::<v1::Reading>("t").unwrap();
    assert_eq!(mine.type_name(), theirs.type_name(), "the same declaration in another module");
    let r = ps[1].create_reader(&theirs, Qos::ordered()).unwrap();
    let w = ps[0].create_writer(&mine, mine.qos()).unwrap();
    w.write(&Reading { sensor: 3, celsius: 1.5 }).unwrap();
    assert_eq!(r.take_n(1, WAIT)[0].data.celsius, 1.5);
    match ps[1].topic::<v2::Reading>("t", Qos::ordered()) {
        Err(DdsError::Topic { why: TopicError::TypeMismatch { domain, here }, .. }) => {
            assert_eq!(domain, mine.type_name());
            assert!(here.contains("Reading#") && here != domain, "{here}");
        }
        other => panic!("a changed layout must be refused: {other:?}"),
    }
    assert!(matches!(ps[1].find_topic::<v2::Reading>("t"), Err(DdsError::Topic { .. })));
    assert!(matches!(
        ps[1].find_topic_within::<u8>("never", Duration::from_millis(50)),
        Err(DdsError::TimedOut { what: Awaited::Topic(t), .. }) if t == "never"
    ));
}
