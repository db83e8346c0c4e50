//! `DataWriter::write_batch`: samples written several to a message reach every
//! reader one by one, numbered as if written alone, in the topic's one order; late
//! joiners and keyed topics see them as single samples. Participants as threads of
//! one process over shm and tcp; every wait has a deadline.

use serde::{Deserialize, Serialize};
use spindle_dds::{Batching, DataReader, DataWriter, DdsError, DomainParticipant, History, Keyed, Qos, Sample};
use spindle_views::config::Transport;

mod common;
use common::{domain, WAIT};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Msg {
    from: u32,
    n: u32,
    text: String,
}

/// A message of writer `from`, its number `n`, of a length that varies with `n`
/// (so packs hold different counts and parts end mid-word).
fn msg(from: u32, n: u32) -> Msg {
    Msg { from, n, text: "x".repeat((n % 37) as usize) }
}

fn batched_and_single_writers_share_one_order(t: Transport) {
    let name = format!("ddsb{}{}", std::process::id(), t as u8);
    let ps = domain(&name, 3, t);
    let qos = Qos::volatile(History::KeepAll);
    let topics: Vec<_> = ps.iter().map(|p| p.topic::<Msg>("batch", qos).unwrap()).collect();
    let readers: Vec<_> = (0..3).map(|i| ps[i].create_reader(&topics[i], qos).unwrap()).collect();
    let batched = ps[0].create_writer(&topics[0], qos).unwrap();
    let single = ps[1].create_writer(&topics[1], qos).unwrap();
    assert!(ps[2].wait_for_matched("batch", 2, 3, WAIT).is_ok());
    const N: u32 = 600;
    let sent_before = ps[0].group().metrics().sent;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut next = 1u64;
            for chunk in (0..N).collect::<Vec<_>>().chunks(50) {
                let batch: Vec<Msg> = chunk.iter().map(|n| msg(0, *n)).collect();
                let numbers = batched.write_batch(&batch).unwrap();
                assert_eq!(numbers, next..next + chunk.len() as u64, "numbered as if written alone");
                next = numbers.end;
            }
            assert_eq!(batched.write_batch(&[]).unwrap(), next..next, "an empty batch sends nothing");
        });
        s.spawn(|| {
            for n in 0..N / 3 {
                single.write(&msg(1, n)).unwrap();
            }
        });
    });
    let packed = ps[0].group().metrics().sent - sent_before;
    assert!(packed <= N as u64 / 4, "{N} samples in batches of 50 went in {packed} messages");
    let total = (N + N / 3) as usize;
    let got: Vec<Vec<Sample<Msg>>> = readers.iter().map(|r| r.take_n(total, WAIT)).collect();
    for g in &got {
        assert_eq!(g.len(), total);
        for (w, count) in [(0u32, N), (1, N / 3)] {
            let mine: Vec<&Sample<Msg>> = g.iter().filter(|s| s.data.from == w).collect();
            assert!(mine.iter().map(|s| s.data.n).eq(0..count), "writer {w}: each sample once, in order");
            assert!(mine.iter().all(|s| s.info.seq == s.data.n as u64 + 1 && s.data == msg(w, s.data.n)));
        }
        assert!(g.iter().map(|s| s.info.topic_seq).eq(0..total as u64), "topic_seq counts samples");
    }
    let order = |g: &[Sample<Msg>]| g.iter().map(|s| (s.data.from, s.data.n)).collect::<Vec<_>>();
    assert_eq!(order(&got[0]), order(&got[1]), "one total order");
    assert_eq!(order(&got[0]), order(&got[2]));
    // A reader that comes later gets the history sample by sample.
    let late = ps[2].create_reader(&topics[2], qos).unwrap();
    let history = late.take_n(total, WAIT);
    assert_eq!(order(&history), order(&got[0]));
    assert!(history.iter().all(|s| s.info.from_history));
}

#[test]
fn shm_batched_and_single_writers_share_one_order() {
    batched_and_single_writers_share_one_order(Transport::Shm);
}

#[test]
fn tcp_batched_and_single_writers_share_one_order() {
    batched_and_single_writers_share_one_order(Transport::Tcp);
}

/// A sensor's reading, keyed by the sensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Reading {
    sensor: String,
    value: i32,
}

impl Keyed for Reading {
    type Key = String;
    fn key(&self) -> String {
        self.sensor.clone()
    }
}

#[test]
fn a_keyed_batch_keeps_each_instance_and_a_too_large_sample_sends_nothing() {
    let name = format!("ddsbk{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let qos = Qos::volatile(History::KeepLast(2)).max_sample_bytes(64);
    let t0 = ps[0].keyed_topic::<Reading>("readings", qos).unwrap();
    let w = ps[0].create_writer(&t0, qos).unwrap();
    let t1 = ps[1].find_keyed_topic::<Reading>("readings").unwrap();
    let r = ps[1].create_reader(&t1, qos.history(History::KeepAll)).unwrap();
    assert!(ps[1].wait_for_matched("readings", 1, 1, WAIT).is_ok());
    let too_large = [Reading { sensor: "a".into(), value: 0 }, Reading { sensor: "b".repeat(100), value: 1 }];
    assert!(matches!(w.write_batch(&too_large), Err(DdsError::TooLarge { .. })));
    let readings: Vec<Reading> =
        (0..30).map(|value| Reading { sensor: ["a", "b", "c"][value as usize % 3].into(), value }).collect();
    assert_eq!(w.write_batch(&readings).unwrap(), 1..31, "the refused batch took no number");
    let got = r.take_n(30, WAIT);
    assert!(got.iter().map(|s| s.data.value).eq(0..30));
    for sensor in ["a", "b", "c"] {
        let h = got.iter().find(|s| s.data.sensor == sensor).unwrap().info.instance;
        assert!(got.iter().filter(|s| s.data.sensor == sensor).all(|s| s.info.instance == h));
    }
    // A reader that joins later gets the last two of each instance.
    let late = ps[1].create_reader(&t1, qos).unwrap();
    let mut values: Vec<i32> = late.take_n(6, WAIT).iter().map(|s| s.data.value).collect();
    values.sort_unstable();
    assert_eq!(values, vec![24, 25, 26, 27, 28, 29]);
}

/// Two participants over shm (domain `prefix` and this process's id), a writer of
/// `topic` at the first and a reader of it (KeepAll) at the second, matched.
fn writer_and_reader(prefix: &str, topic: &str) -> (Vec<DomainParticipant>, DataWriter<Msg>, DataReader<Msg>) {
    let ps = domain(&format!("{prefix}{}", std::process::id()), 2, Transport::Shm);
    let qos = Qos::volatile(History::KeepAll);
    let t0 = ps[0].topic::<Msg>(topic, qos).unwrap();
    let t1 = ps[1].topic::<Msg>(topic, qos).unwrap();
    let r = ps[1].create_reader(&t1, qos).unwrap();
    let w = ps[0].create_writer(&t0, qos).unwrap();
    assert!(ps[1].wait_for_matched(topic, 1, 1, WAIT).is_ok());
    (ps, w, r)
}

/// Writer batching: single writes join the writer's open pack and go out as one
/// message when the next does not fit, at `flush`, or before another kind of send;
/// readers get each sample alone, numbered as written, in the order written.
#[test]
fn batched_writes_go_out_in_packs_when_full_or_flushed() {
    let (ps, w, r) = writer_and_reader("ddsbw", "batching");
    w.set_batching(Batching::UntilFlushed).unwrap();
    const N: u32 = 100;
    let sent_before = ps[0].group().metrics().sent;
    for n in 0..N {
        assert_eq!(w.write(&msg(0, n)).unwrap(), n as u64 + 1, "numbered as it joins the pack");
    }
    let held = w.unsent();
    assert!(held > 0, "the last pack is still open");
    let sent = (N as usize) - held;
    let early = r.take_n(sent, WAIT);
    assert_eq!(early.len(), sent, "the full packs went out");
    // The open pack goes nowhere until something sends it.
    assert!(r.take_n(1, std::time::Duration::from_millis(300)).is_empty(), "a held sample was delivered");
    w.flush().unwrap();
    assert_eq!(w.unsent(), 0);
    let late = r.take_n(held, WAIT);
    let got: Vec<&Sample<Msg>> = early.iter().chain(&late).collect();
    assert!(got.iter().map(|s| s.data.n).eq(0..N), "each sample once, in the order written");
    assert!(got.iter().all(|s| s.info.seq == s.data.n as u64 + 1 && s.data == msg(0, s.data.n)));
    let messages = ps[0].group().metrics().sent - sent_before;
    assert!(messages <= N as u64 / 4, "{N} batched samples went in {messages} messages");
    // Other sends go out after the open pack: a batch, a sample too large for a
    // pack, and writes once batching is off.
    for n in N..N + 3 {
        w.write(&msg(0, n)).unwrap();
    }
    assert_eq!(w.write_batch(&[msg(0, N + 3), msg(0, N + 4)]).unwrap(), N as u64 + 4..N as u64 + 6);
    w.write(&msg(0, N + 5)).unwrap();
    let big = Msg { from: 0, n: N + 6, text: "y".repeat(3000) };
    assert_eq!(w.write(&big).unwrap(), N as u64 + 7, "a sample larger than a slot goes alone");
    w.write(&msg(0, N + 7)).unwrap();
    w.set_batching(Batching::Off).unwrap();
    assert_eq!(w.unsent(), 0, "turning batching off sends the pack");
    assert_eq!(w.write(&msg(0, N + 8)).unwrap(), N as u64 + 9);
    let rest = r.take_n(9, WAIT);
    assert!(rest.iter().map(|s| s.data.n).eq(N..N + 9), "in the order written");
    assert!(rest.iter().all(|s| s.info.seq == s.data.n as u64 + 1));
    assert_eq!(rest[6].data, big);
}

/// A batching writer's held samples are sent when it waits for delivery and when
/// it is dropped; on a keyed topic its disposals join the pack like its writes.
#[test]
fn a_batching_writer_sends_what_it_holds_when_it_waits_or_drops() {
    let name = format!("ddsbd{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let qos = Qos::volatile(History::KeepAll);
    let t0 = ps[0].keyed_topic::<Reading>("held", qos).unwrap();
    let w = ps[0].create_writer(&t0, qos).unwrap();
    let t1 = ps[1].find_keyed_topic::<Reading>("held").unwrap();
    let r = ps[1].create_reader(&t1, qos).unwrap();
    assert!(ps[1].wait_for_matched("held", 1, 1, WAIT).is_ok());
    w.set_batching(Batching::UntilFlushed).unwrap();
    let reading = |sensor: &str, value| Reading { sensor: sensor.into(), value };
    w.write(&reading("a", 1)).unwrap();
    w.write(&reading("b", 2)).unwrap();
    w.dispose(&reading("a", 0)).unwrap();
    assert_eq!(w.unsent(), 3);
    assert!(w.wait_for_delivery(WAIT), "waiting for delivery sends the held samples");
    let got = r.take_n(3, WAIT);
    assert_eq!(got.len(), 3);
    assert_eq!((got[0].data.value, got[1].data.value), (1, 2));
    assert!(!got[2].info.valid_data && got[2].info.instance == got[0].info.instance, "a's disposal");
    for v in 3..8 {
        w.write(&reading("c", v)).unwrap();
    }
    drop(w);
    let last = r.take_n(5, WAIT);
    assert!(last.iter().map(|s| s.data.value).eq(3..8), "the writer's drop sent what it held");
}

/// With a delay, a pack nothing else sends goes out by itself: samples written and
/// then left alone reach the reader without a flush.
#[test]
fn a_pack_goes_out_by_itself_once_its_delay_has_passed() {
    let (_ps, w, r) = writer_and_reader("ddsbt", "delay");
    w.set_batching(Batching::Within(std::time::Duration::from_millis(20))).unwrap();
    for round in 0..3u32 {
        for n in 0..4 {
            w.write(&msg(round, n)).unwrap();
        }
        let got = r.take_n(4, WAIT);
        assert!(got.iter().map(|s| (s.data.from, s.data.n)).eq((0..4).map(|n| (round, n))), "round {round}");
        assert_eq!(w.unsent(), 0, "round {round}: the pack went out");
    }
    // A delay no clock reaches: the pack waits for a flush.
    w.set_batching(Batching::Within(std::time::Duration::MAX)).unwrap();
    w.write(&msg(3, 0)).unwrap();
    assert!(r.take_n(1, std::time::Duration::from_millis(300)).is_empty());
    w.flush().unwrap();
    assert_eq!(r.take_n(1, WAIT)[0].data, msg(3, 0));
}
