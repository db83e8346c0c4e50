//! Latency first: readers whose waits run the node's passes. Participants as
//! threads of one process over shm (and tcp where said); every wait bounded.

use spindle_dds::{DomainParticipant, Qos};
use spindle_views::config::Transport;
use std::time::Instant;

mod common;
use common::{participant_with, WAIT};

fn pair(name: &str, first_latency: bool, second_latency: bool) -> (DomainParticipant, DomainParticipant) {
    pair_over(name, Transport::Shm, first_latency, second_latency)
}

fn pair_over(name: &str, t: Transport, first: bool, second: bool) -> (DomainParticipant, DomainParticipant) {
    let a = participant_with(name, 0, None, t, |b| b.latency_first(first));
    let contact = Some(a.group().listen_addr());
    let b = participant_with(name, 1, contact, t, |b| b.latency_first(second));
    assert!(a.group().wait_for_members(2, WAIT) && b.group().wait_for_members(2, WAIT));
    (a, b)
}

#[test]
fn ping_pong_between_readers_that_run_the_passes() {
    ping_pong(Transport::Shm);
}

#[test]
fn ping_pong_between_readers_that_run_the_passes_over_tcp() {
    ping_pong(Transport::Tcp);
}

fn ping_pong(t: Transport) {
    let name = format!("dlf{}{}", std::process::id(), t as u8);
    let (a, b) = pair_over(&name, t, true, true);
    assert_eq!(a.group().wait_running_passes(Instant::now() + WAIT, || true), Some(true), "the setting is on");
    let (ping_a, pong_a) =
        (a.pod_topic::<u64>("ping", Qos::ordered()).unwrap(), a.pod_topic::<u64>("pong", Qos::ordered()).unwrap());
    let (ping_b, pong_b) =
        (b.pod_topic::<u64>("ping", Qos::ordered()).unwrap(), b.pod_topic::<u64>("pong", Qos::ordered()).unwrap());
    let (w_ping, r_pong) =
        (a.create_writer(&ping_a, ping_a.qos()).unwrap(), a.create_reader(&pong_a, pong_a.qos()).unwrap());
    let (r_ping, w_pong) =
        (b.create_reader(&ping_b, ping_b.qos()).unwrap(), b.create_writer(&pong_b, pong_b.qos()).unwrap());
    assert!(a.wait_for_matched("ping", 1, 1, WAIT).is_ok() && a.wait_for_matched("pong", 1, 1, WAIT).is_ok());
    assert!(b.wait_for_matched("ping", 1, 1, WAIT).is_ok() && b.wait_for_matched("pong", 1, 1, WAIT).is_ok());
    const N: u64 = 500;
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..N {
                let got = r_ping.take_n(1, WAIT);
                assert_eq!(got.iter().map(|x| x.data).collect::<Vec<_>>(), vec![i], "ping {i}, once, in order");
                w_pong.write(&(i + 1_000_000)).unwrap();
            }
        });
        for i in 0..N {
            w_ping.write(&i).unwrap();
            let got = r_pong.take_n(1, WAIT);
            assert_eq!(got.iter().map(|x| x.data).collect::<Vec<_>>(), vec![i + 1_000_000], "pong {i}");
        }
    });
}

#[test]
fn two_waiting_readers_of_one_participant_both_get_everything() {
    let name = format!("dlt{}", std::process::id());
    let (a, b) = pair(&name, false, true);
    let ta = a.pod_topic::<u64>("t", Qos::ordered()).unwrap();
    let tb = b.pod_topic::<u64>("t", Qos::ordered()).unwrap();
    let w = a.create_writer(&ta, ta.qos()).unwrap();
    let readers = [b.create_reader(&tb, tb.qos()).unwrap(), b.create_reader(&tb, tb.qos()).unwrap()];
    assert!(a.wait_for_matched("t", 1, 2, WAIT).is_ok());
    // Within the readers' KeepLast(1024) queues: a reader whose thread is off the
    // core while the writer runs ahead still holds every sample (with more, a
    // loaded host made the sleeping reader's queue replace some, as it should).
    const N: usize = 1_000;
    std::thread::scope(|s| {
        // One of the two waits runs the passes; the other sleeps as usual.
        let takers: Vec<_> = readers.iter().map(|r| s.spawn(move || r.take_n(N, WAIT))).collect();
        for i in 0..N as u64 {
            w.write(&i).unwrap();
        }
        for t in takers {
            let got: Vec<u64> = t.join().unwrap().iter().map(|x| x.data).collect();
            assert_eq!(got, (0..N as u64).collect::<Vec<_>>());
        }
    });
}

#[test]
fn writes_after_the_last_wait_still_go_out() {
    let name = format!("dlw{}", std::process::id());
    let (a, b) = pair(&name, true, false);
    let (ta, tb) = (a.pod_topic::<u64>("t", Qos::ordered()).unwrap(), b.pod_topic::<u64>("t", Qos::ordered()).unwrap());
    let (ua, ub) = (a.pod_topic::<u64>("u", Qos::ordered()).unwrap(), b.pod_topic::<u64>("u", Qos::ordered()).unwrap());
    let (r, w) = (a.create_reader(&ta, ta.qos()).unwrap(), b.create_writer(&tb, tb.qos()).unwrap());
    let (wa, rb) = (a.create_writer(&ua, ua.qos()).unwrap(), b.create_reader(&ub, ub.qos()).unwrap());
    assert!(b.wait_for_matched("t", 1, 1, WAIT).is_ok() && b.wait_for_matched("u", 1, 1, WAIT).is_ok());
    w.write(&7).unwrap();
    assert_eq!(r.take_n(1, WAIT).len(), 1, "a's reader ran the passes and got its sample");
    // a no longer waits: its predicate thread takes the passes back and sends.
    for i in 0..100u64 {
        wa.write(&i).unwrap();
    }
    let got: Vec<u64> = rb.take_n(100, WAIT).iter().map(|x| x.data).collect();
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

#[test]
fn a_waitset_of_a_latency_first_reader_wakes_for_every_sample() {
    use spindle_dds::instance::StateMask;
    use spindle_dds::waitset::WaitSet;
    let name = format!("dlws{}", std::process::id());
    let (a, b) = pair(&name, false, true);
    let (ta, tb) = (a.pod_topic::<u64>("t", Qos::ordered()).unwrap(), b.pod_topic::<u64>("t", Qos::ordered()).unwrap());
    let (aa, ab) =
        (a.pod_topic::<u64>("ack", Qos::ordered()).unwrap(), b.pod_topic::<u64>("ack", Qos::ordered()).unwrap());
    let (w, r) = (a.create_writer(&ta, ta.qos()).unwrap(), b.create_reader(&tb, tb.qos()).unwrap());
    let (w_ack, r_ack) = (b.create_writer(&ab, ab.qos()).unwrap(), a.create_reader(&aa, aa.qos()).unwrap());
    assert!(a.wait_for_matched("t", 1, 1, WAIT).is_ok() && a.wait_for_matched("ack", 1, 1, WAIT).is_ok());
    assert!(b.wait_for_matched("t", 1, 1, WAIT).is_ok() && b.wait_for_matched("ack", 1, 1, WAIT).is_ok());
    const N: u64 = 300;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut ws = WaitSet::new();
            ws.attach(r.read_condition(StateMask::ANY));
            let mut next = 0;
            while next < N {
                assert_eq!(ws.wait(WAIT), vec![0], "sample {next} woke the wait");
                for x in r.take() {
                    assert_eq!(x.data, next);
                    w_ack.write(&next).unwrap();
                    next += 1;
                }
            }
        });
        for i in 0..N {
            w.write(&i).unwrap();
            assert_eq!(r_ack.take_n(1, WAIT).iter().map(|x| x.data).collect::<Vec<_>>(), vec![i]);
        }
    });
}
