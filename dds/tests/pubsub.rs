//! Participants as threads of one process, over shm (and tcp where said): ordered
//! pub/sub, topics created while others flow, requested/offered QoS, late joiners
//! of Volatile topics, and bad input. Every wait has a deadline; shm files are
//! removed by the transports.

use serde::{Deserialize, Serialize};
use spindle_dds::{CodecError, DdsError, QosError, Rejection, Sample, TopicError};
use spindle_dds::{History, Level, Qos};
use spindle_views::config::Transport;
use std::time::Duration;
use testkit::poll_until;

mod common;
use common::{domain, participant, WAIT};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Msg {
    from: u32,
    n: u32,
    text: String,
}

fn keys(s: &[Sample<Msg>]) -> Vec<(u32, u32)> {
    s.iter().map(|x| (x.data.from, x.data.n)).collect()
}

fn ordered_writers_and_readers_agree(t: Transport) {
    let name = format!("ddso{}{}", std::process::id(), t as u8);
    let ps = domain(&name, 3, t);
    let topics: Vec<_> = ps.iter().map(|p| p.topic::<Msg>("chat", Qos::ordered()).unwrap()).collect();
    let readers: Vec<_> = (0..3).map(|i| ps[i].create_reader(&topics[i], topics[i].qos()).unwrap()).collect();
    let writers: Vec<_> = (0..2).map(|i| ps[i].create_writer(&topics[i], topics[i].qos()).unwrap()).collect();
    assert!(ps[2].wait_for_matched("chat", 2, 3, WAIT).is_ok());
    assert_eq!(ps[2].matched("chat"), Some(spindle_dds::Matched { writers: 2, readers: 3, ..Default::default() }));
    assert_eq!(ps[2].matched("no such topic"), None);
    const N: u32 = 300;
    std::thread::scope(|s| {
        for (i, w) in writers.iter().enumerate() {
            s.spawn(move || {
                for n in 0..N {
                    w.write(&Msg { from: i as u32, n, text: format!("{i}:{n}") }).unwrap();
                }
            });
        }
    });
    let got: Vec<Vec<Sample<Msg>>> = readers.iter().map(|r| r.take_n(2 * N as usize, WAIT)).collect();
    for g in &got {
        assert_eq!(g.len(), 2 * N as usize);
        for w in 0..2u32 {
            let mine: Vec<u32> = g.iter().filter(|s| s.data.from == w).map(|s| s.data.n).collect();
            assert_eq!(mine, (0..N).collect::<Vec<_>>(), "each writer's samples once, in its order");
        }
        let seqs: Vec<u64> = g.iter().map(|s| s.info.topic_seq).collect();
        assert_eq!(seqs, (0..2 * N as u64).collect::<Vec<_>>(), "topic_seq counts delivery order");
        assert!(g.iter().all(|s| s.info.seq == s.data.n as u64 + 1 && s.info.writer.node.0 == s.data.from));
    }
    assert_eq!(keys(&got[0]), keys(&got[1]), "one total order across writers");
    assert_eq!(keys(&got[0]), keys(&got[2]));
    drop((writers, readers));
}

#[test]
fn shm_ordered_topic_has_one_total_order() {
    ordered_writers_and_readers_agree(Transport::Shm);
}

#[test]
fn tcp_ordered_topic_has_one_total_order() {
    ordered_writers_and_readers_agree(Transport::Tcp);
}

#[test]
fn take_n_takes_at_most_n_and_leaves_the_rest_waiting() {
    let name = format!("ddsn{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let t0 = ps[0].topic::<u64>("n", Qos::ordered()).unwrap();
    let t1 = ps[1].topic::<u64>("n", Qos::ordered()).unwrap();
    let r = ps[1].create_reader(&t1, t1.qos().history(History::KeepAll)).unwrap();
    let w = ps[0].create_writer(&t0, t0.qos()).unwrap();
    assert!(ps[1].wait_for_matched("n", 1, 1, WAIT).is_ok());
    for i in 0..10u64 {
        w.write(&i).unwrap();
    }
    // All ten are waiting before the first take.
    assert!(poll_until(WAIT, Duration::from_millis(5), || r.read().len() == 10), "{} waiting", r.read().len());
    let data = |v: Vec<Sample<u64>>| v.into_iter().map(|s| s.data).collect::<Vec<_>>();
    assert_eq!(data(r.take_n(3, WAIT)), [0, 1, 2]);
    assert_eq!(data(r.take_up_to(2)), [3, 4]);
    assert_eq!(data(r.take_up_to(0)), Vec::<u64>::new());
    assert_eq!(data(r.take()), [5, 6, 7, 8, 9]);
    assert!(r.take_n(1, Duration::from_millis(20)).is_empty());
}

#[test]
fn a_topic_created_while_another_flows_loses_nothing() {
    let name = format!("ddsr{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let a0 = ps[0].topic::<u64>("a", Qos::ordered()).unwrap();
    let a1 = ps[1].topic::<u64>("a", Qos::ordered()).unwrap();
    let ra = ps[1].create_reader(&a1, a1.qos().history(History::KeepAll)).unwrap();
    let wa = ps[0].create_writer(&a0, a0.qos()).unwrap();
    let done = spindle_sst::sync::atomic::AtomicBool::new(false);
    let started = std::time::Instant::now();
    let (rb, wb, n) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            // Writes until the changes are over, and 100 more.
            let mut i = 0u64;
            let mut after = 0;
            while after < 100 {
                wa.write(&i).unwrap();
                i += 1;
                if done.load(spindle_sst::sync::atomic::Ordering::Relaxed) {
                    after += 1;
                }
            }
            i
        });
        // Three layout changes while `a` streams: a topic, a reader, a writer.
        let b1 = ps[1].topic::<String>("b", Qos::unordered()).unwrap();
        let rb = ps[1].create_reader(&b1, b1.qos()).unwrap();
        let b0 = ps[0].find_topic::<String>("b").unwrap();
        let wb = ps[0].create_writer(&b0, b0.qos()).unwrap();
        done.store(true, spindle_sst::sync::atomic::Ordering::Relaxed);
        (rb, wb, writer.join().unwrap())
    });
    let usable = started.elapsed();
    wb.write(&"hello".to_string()).unwrap();
    let got: Vec<u64> = ra.take_n(n as usize, WAIT).into_iter().map(|s| s.data).collect();
    assert!(
        got == (0..n).collect::<Vec<_>>(),
        "every sample of `a`, once, in order: {} of {n}, status {:?}",
        got.len(),
        ra.status()
    );
    assert_eq!(rb.take_n(1, WAIT)[0].data, "hello");
    assert!(ps[0].group().metrics().views_installed >= 3);
    eprintln!(
        "topic b usable {usable:?} after the start of the changes; writer's metrics {:?}",
        ps[0].group().metrics()
    );
}

#[test]
fn incompatible_qos_is_reported_on_both_sides() {
    let name = format!("ddsq{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let t0 = ps[0].topic::<u32>("q", Qos::volatile(History::KeepAll)).unwrap();
    let t1 = ps[1].topic::<u32>("q", Qos::volatile(History::KeepAll)).unwrap();
    assert!(
        matches!(ps[0].create_writer(&t0, Qos::logged(History::KeepAll)), Err(DdsError::Qos(_))),
        "a writer cannot offer more than its topic"
    );
    let weak = ps[0].create_writer(&t0, Qos::ordered()).unwrap();
    let reader = ps[1].create_reader(&t1, t1.qos()).unwrap(); // requests Volatile
    let strong = ps[0].create_writer(&t0, t0.qos()).unwrap();
    weak.write(&1).unwrap();
    strong.write(&2).unwrap();
    weak.write(&3).unwrap();
    strong.write(&4).unwrap();
    assert!(strong.wait_for_delivery(WAIT) && weak.wait_for_delivery(WAIT));
    let got: Vec<u32> = reader.take_n(2, WAIT).into_iter().map(|s| s.data).collect();
    assert_eq!(got, vec![2, 4], "only the matching writer's samples");
    let r = reader.incompatible_qos();
    assert_eq!(r.total_count, 1);
    assert_eq!(
        r.current,
        vec![(spindle_dds::WriterId { node: ps[0].node(), id: weak.id(), client: None }, Level::Ordered)]
    );
    let w = weak.incompatible_qos();
    assert_eq!(w.total_count, 1, "{w:?}");
    assert_eq!(w.current[0].1, Level::Volatile);
    assert_eq!(strong.incompatible_qos().total_count, 0);
}

#[test]
fn a_late_volatile_reader_gets_the_history_then_live_samples_with_no_gap() {
    let name = format!("ddsv{}", std::process::id());
    let ps = domain(&name, 3, Transport::Shm);
    let t0 = ps[0].topic::<u64>("v", Qos::volatile(History::KeepAll)).unwrap();
    let w = ps[0].create_writer(&t0, t0.qos()).unwrap();
    let t1 = ps[1].topic::<u64>("v", Qos::volatile(History::KeepAll)).unwrap();
    let early = ps[1].create_reader(&t1, t1.qos()).unwrap();
    for i in 0..500 {
        w.write(&i).unwrap();
    }
    assert!(w.wait_for_delivery(WAIT), "the first 500 are delivered before node 2 asks for them");
    // Node 2 joins the topic while node 0 keeps writing: where the seam falls among
    // 500..1000 depends on the schedule, and the data must be whole wherever it falls.
    let late = std::thread::scope(|s| {
        s.spawn(|| {
            for i in 500..1000 {
                w.write(&i).unwrap();
            }
        });
        let t2 = ps[2].find_topic::<u64>("v").unwrap();
        ps[2].create_reader(&t2, t2.qos()).unwrap()
    });
    let got = late.take_n(1000, WAIT);
    let data: Vec<u64> = got.iter().map(|s| s.data).collect();
    assert_eq!(data, (0..1000).collect::<Vec<_>>(), "history, then live: no gap, no duplicate");
    let seqs: Vec<u64> = got.iter().map(|s| s.info.topic_seq).collect();
    assert_eq!(seqs, (0..1000).collect::<Vec<_>>());
    assert!(got[0].info.from_history, "the first samples came by state transfer");
    let live = got.iter().position(|s| !s.info.from_history).unwrap_or(got.len());
    assert!(got[live..].iter().all(|s| !s.info.from_history), "history first, then live only");
    assert!(late.catch_up_failed().is_ok());
    // The writer may have finished before the transfer was cut, so all 1000 may have come
    // from history; what is written now, after the reader holds its history, comes live.
    for i in 1000..1010 {
        w.write(&i).unwrap();
    }
    let after = late.take_n(10, WAIT);
    assert_eq!(after.iter().map(|s| s.data).collect::<Vec<_>>(), (1000..1010).collect::<Vec<_>>());
    assert!(after.iter().all(|s| !s.info.from_history), "samples after the seam come live");
    assert_eq!(early.take_n(1010, WAIT).len(), 1010);
    // A KeepLast reader created now at node 0 (the writer's participant) gets the
    // last 10 from its own history at once.
    let last = ps[0].create_reader(&t0, t0.qos().history(History::KeepLast(10))).unwrap();
    let d: Vec<u64> = last.take().into_iter().map(|s| s.data).collect();
    assert_eq!(d, (1000..1010).collect::<Vec<_>>());
}

/// Deserializes only even numbers: a sample that fails to decode at the reader.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "u32")]
struct Even(u32);

impl TryFrom<u32> for Even {
    type Error = String;
    fn try_from(v: u32) -> Result<Even, String> {
        if v % 2 == 0 {
            Ok(Even(v))
        } else {
            Err(format!("{v} is odd"))
        }
    }
}

#[test]
fn bad_input_is_an_error_and_loses_nothing_else() {
    let name = format!("ddsb{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let t = ps[0].topic::<u64>("typed", Qos::ordered().max_sample_bytes(64)).unwrap();
    // Another type, or another QoS, under the same name.
    let e = ps[1].topic::<String>("typed", Qos::ordered().max_sample_bytes(64)).unwrap_err();
    assert!(matches!(&e, DdsError::Topic { why: TopicError::TypeMismatch { .. }, .. }), "{e}");
    let e = ps[1].topic::<u64>("typed", Qos::unordered().max_sample_bytes(64)).unwrap_err();
    assert!(matches!(&e, DdsError::Topic { why: TopicError::QosMismatch { .. }, .. }), "{e}");
    let e = ps[1].find_topic::<String>("typed").unwrap_err();
    assert!(matches!(&e, DdsError::Topic { why: TopicError::TypeMismatch { .. }, .. }), "{e}");
    let e = ps[1].find_topic::<u64>("nope").unwrap_err();
    assert!(matches!(&e, DdsError::Topic { topic, why: TopicError::NoSuchTopic } if topic == "nope"), "{e}");
    let e = ps[0].topic::<u64>("", Qos::ordered()).unwrap_err();
    assert!(matches!(&e, DdsError::Topic { why: TopicError::NameLength { len: 0, .. }, .. }), "{e}");
    let e = ps[0].topic::<u64>("big", Qos::ordered().max_sample_bytes(0)).unwrap_err();
    let zero = TopicError::Qos(QosError::MaxSampleBytes { value: 0, max: (1 << 30) - 32 });
    assert!(matches!(&e, DdsError::Topic { why, .. } if *why == zero), "{e}");
    // A reader that would keep nothing is refused, as a writer past its topic is.
    let keeps_none = ps[0].create_reader(&t, t.qos().history(History::KeepLast(0)));
    assert!(matches!(&keeps_none, Err(DdsError::Qos(QosError::KeepsNothing))), "{:?}", keeps_none.err());
    // An oversize sample.
    let bytes = ps[0].topic::<Vec<u8>>("bytes", Qos::ordered().max_sample_bytes(64)).unwrap();
    let wb = ps[0].create_writer(&bytes, bytes.qos()).unwrap();
    let e = wb.write(&vec![0u8; 65]).unwrap_err();
    assert!(matches!(e, DdsError::TooLarge { max: 64, .. }), "{e}");
    let _ = t;
    // Samples that do not decode are counted; the rest arrive.
    let e0 = ps[0].topic::<Even>("even", Qos::ordered()).unwrap();
    let e1 = ps[1].topic::<Even>("even", Qos::ordered()).unwrap();
    let r = ps[1].create_reader(&e1, e1.qos()).unwrap();
    let w = ps[0].create_writer(&e0, e0.qos()).unwrap();
    for v in 0..10 {
        w.write(&Even(v)).unwrap();
    }
    assert!(w.wait_for_delivery(WAIT));
    assert!(poll_until(WAIT, Duration::from_millis(5), || r.status().received >= 10));
    let got: Vec<u32> = r.take().into_iter().map(|s| s.data.0).collect();
    assert_eq!(got, vec![0, 2, 4, 6, 8]);
    let st = r.status();
    assert_eq!(st.rejected, 5, "{st:?}");
    let undecodable = matches!(st.last_rejected, Some(Rejection::Undecodable { why: CodecError::Serde(_), .. }));
    assert!(undecodable, "{st:?}");
}

#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Tick {
    n: u64,
    value: [u32; 6],
}

#[test]
fn pod_loans_and_in_place_reads() {
    let name = format!("ddsp{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let t0 = ps[0].pod_topic::<Tick>("ticks", Qos::ordered()).unwrap();
    let t1 = ps[1].pod_topic::<Tick>("ticks", Qos::ordered()).unwrap();
    let r = ps[1].create_reader(&t1, t1.qos()).unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    r.on_sample_in_place(move |s| {
        let mut t = Tick { n: 0, value: [0; 6] };
        s.read_pod(&mut t).unwrap();
        assert_eq!(s.word(0), Some(t.n), "word reads see the same bytes");
        assert_eq!(s.word(s.len() / 8), None, "past the sample's end");
        assert_eq!(s.word(usize::MAX), None);
        s2.lock().unwrap().push(t);
    });
    let w = ps[0].create_writer(&t0, t0.qos()).unwrap();
    for n in 0..100u64 {
        let mut loan = w.loan().unwrap();
        loan.n = n;
        loan.value = [n as u32; 6];
        loan.write().unwrap();
    }
    assert!(poll_until(WAIT, Duration::from_millis(5), || seen.lock().unwrap().len() >= 100));
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.iter().map(|t| t.n).collect::<Vec<_>>(), (0..100).collect::<Vec<_>>());
    assert!(got.iter().all(|t| t.value == [t.n as u32; 6]));
    assert_eq!(r.status().received, 100, "samples a listener took are counted");
    assert!(r.take().is_empty(), "nothing queued behind the listener");
    // Without the listener samples queue again.
    r.clear_listener();
    let mut loan = w.loan().unwrap();
    loan.n = 100;
    loan.write().unwrap();
    let queued = r.take_n(1, WAIT);
    assert_eq!(queued.iter().map(|s| s.data.n).collect::<Vec<_>>(), [100]);
    assert_eq!(seen.lock().unwrap().len(), 100, "the listener took no more");
    assert_eq!(r.status().received, 101);
    // Loans need a Pod topic; a Pod type under a serde topic is another type.
    let serde_topic = ps[0].topic::<u64>("plain", Qos::ordered()).unwrap();
    let sw = ps[0].create_writer(&serde_topic, serde_topic.qos()).unwrap();
    assert!(matches!(sw.loan(), Err(DdsError::NotPod(_))));
    assert!(ps[1].pod_topic::<[u64; 4]>("ticks", Qos::ordered()).is_err_and(|e| e.to_string().contains("type")));
}

#[test]
fn participants_without_ids_get_them_from_the_domain() {
    let name = format!("dsauto{}", std::process::id());
    let first = participant(&name, spindle_views::config::AUTO_ID, None, Transport::Shm);
    let contact = Some(first.group().listen_addr());
    let ps = [first, participant(&name, spindle_views::config::AUTO_ID, contact, Transport::Shm)];
    let ps = [&ps[0], &ps[1], &participant(&name, spindle_views::config::AUTO_ID, contact, Transport::Shm)];
    assert!(ps[0].group().wait_for_members(3, WAIT));
    let ids: Vec<u32> = ps.iter().map(|p| p.node().0).collect();
    assert_eq!(ids[0], 0);
    assert!(ids[1] != ids[2] && ids[1] != 0 && ids[2] != 0, "{ids:?}");
    let topic = ps[2].topic::<Msg>("auto", Qos::ordered()).unwrap();
    let r = ps[0].create_reader(&ps[0].find_topic::<Msg>("auto").unwrap(), topic.qos()).unwrap();
    let w = ps[2].create_writer(&topic, topic.qos()).unwrap();
    w.write(&Msg { from: ids[2], n: 1, text: "hi".into() }).unwrap();
    let got = r.take_n(1, WAIT);
    assert_eq!(got[0].info.writer.node, ps[2].node(), "samples name the given id");
    assert_eq!(ps[0].matched("auto").map(|m| (m.writers, m.readers)), Some((1, 1)));
}

#[test]
fn an_idle_writer_lets_go_of_the_view_before() {
    let name = format!("ddsidle{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let topic = ps[0].topic::<Msg>("idle", Qos::ordered()).unwrap();
    let w = ps[0].create_writer(&topic, topic.qos()).unwrap();
    // A write keeps the subgroup it went to for the next one (and its view).
    w.write(&Msg { from: 0, n: 0, text: "first".into() }).unwrap();
    // Node 0's shm files, one per view it holds (`spindle-<domain>-v<view>-0`).
    let files = || {
        let prefix = format!("spindle-{name}-v");
        std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|f| f.starts_with(&prefix) && f.ends_with("-0"))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert!(!files().is_empty(), "node 0 has a file for its view");
    // A third member joins: a view change while the writer is idle. Once it is
    // over, node 0 holds the file of its current view alone.
    let p2 = participant(&name, 2, Some(ps[0].group().listen_addr()), Transport::Shm);
    assert!(ps[0].group().wait_for_members(3, WAIT));
    let one = poll_until(WAIT, Duration::from_millis(10), || files().len() == 1);
    assert!(one, "the idle writer let go of the views before: {:?}", files());
    // And it writes on, in the new view.
    let r = p2.create_reader(&p2.topic::<Msg>("idle", Qos::ordered()).unwrap(), Qos::ordered()).unwrap();
    assert!(p2.wait_for_matched("idle", 1, 1, WAIT).is_ok());
    w.write(&Msg { from: 0, n: 1, text: "second".into() }).unwrap();
    let got = r.take_n(1, WAIT);
    assert_eq!(keys(&got), vec![(0, 1)]);
    drop((w, r));
}
