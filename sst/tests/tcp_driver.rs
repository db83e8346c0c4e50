//! Who receives on `tcp`: the attached driver (the predicate thread) in its passes and
//! in its park, and the fallback thread when no driver is attached or the driver
//! stalls. Writes land and completions come back in every case.

mod common;

use common::{eventually, group, Kind};
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::sync::Arc;
use spindle_sst::transport::{NodeId, RegionId, RegionSpec, Transport, WriteOp};
use std::time::{Duration, Instant};

const R: RegionId = RegionId(0);
const DEADLINE: Duration = Duration::from_secs(30);

fn regions() -> Vec<RegionSpec> {
    vec![RegionSpec { id: R, len: 256 }]
}

/// Posts a signaled write of `v` at `off` from `a` to `b` and flushes.
fn send(a: &dyn Transport, b: NodeId, off: usize, v: u64) -> u64 {
    a.region(R).unwrap().apply_write(off, &[v]);
    let op = WriteOp { signaled: true, ..WriteOp::same(R, off, 8) };
    let seq = a.post_write(b, op).unwrap();
    a.flush();
    seq
}

/// Sends `v` at `off` from `a` to node 1 (`b`), signaled; asserts that it completes
/// and that it landed at `b`.
fn completes_and_lands(a: &dyn Transport, b: &dyn Transport, off: usize, v: u64) {
    let seq = send(a, NodeId(1), off, v);
    assert!(a.wait_completed(NodeId(1), seq, Instant::now() + DEADLINE), "write of {v} completed");
    assert_eq!(b.region(R).unwrap().load(off, Ordering::Acquire), v, "write of {v} landed");
}

#[test]
fn a_driver_receives_in_its_own_passes() {
    let g = group(Kind::Tcp, 2, &regions());
    let (a, b) = (&g.nodes[0], &g.nodes[1]);
    b.attach_driver();
    // Let the fallback thread see the attach and step back.
    std::thread::sleep(Duration::from_millis(50));
    let seq = send(a.as_ref(), NodeId(1), 0, 41);
    // The driver's pass applies the write; its flush sends the ack.
    assert!(eventually(DEADLINE, || {
        b.poll_receive();
        b.flush();
        b.region(R).unwrap().load(0, Ordering::Acquire) == 41
    }));
    assert!(a.wait_completed(NodeId(1), seq, Instant::now() + DEADLINE), "the driver's flush carried the ack");
    b.detach_driver();
}

/// Parks `b`'s attached driver with a 120 s timeout while another thread runs `wake`
/// 30 ms later; asserts that the park ended long before its timeout (a margin no
/// load on the machine comes near).
fn park_until(b: &Arc<dyn Transport>, wake: impl FnOnce() + Send + 'static, what: &str) {
    let ticket = b.doorbell().prepare();
    let waker = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        wake();
    });
    let start = Instant::now();
    b.park(ticket, Some(Duration::from_secs(120)));
    assert!(start.elapsed() < Duration::from_secs(60), "{what} woke the parked driver, not its timeout");
    waker.join().unwrap();
}

#[test]
fn a_parked_driver_wakes_when_data_arrives() {
    let g = group(Kind::Tcp, 2, &regions());
    let (a, b) = (g.nodes[0].clone(), &g.nodes[1]);
    b.attach_driver();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!b.poll_receive(), "nothing has been sent yet");
    park_until(
        b,
        move || {
            send(a.as_ref(), NodeId(1), 8, 7);
        },
        "the arrival",
    );
    assert!(eventually(DEADLINE, || {
        b.poll_receive();
        b.region(R).unwrap().load(8, Ordering::Acquire) == 7
    }));
    b.detach_driver();
}

#[test]
fn a_parked_driver_wakes_when_rung() {
    let g = group(Kind::Tcp, 2, &regions());
    let b = &g.nodes[1];
    b.attach_driver();
    let ringer = b.clone();
    park_until(b, move || ringer.doorbell().ring(), "the ring");
    b.detach_driver();
}

#[test]
fn a_stalled_driver_is_stood_in_for() {
    let g = group(Kind::Tcp, 2, &regions());
    let (a, b) = (&g.nodes[0], &g.nodes[1]);
    // A driver that never passes nor parks (a trigger that runs long): the fallback
    // thread notices and receives for it, so writes land and completions come back.
    b.attach_driver();
    for i in 1..=20u64 {
        completes_and_lands(a.as_ref(), b.as_ref(), 16, i);
    }
    b.detach_driver();
}

#[test]
fn without_a_driver_the_transport_receives_by_itself() {
    let g = group(Kind::Tcp, 2, &regions());
    let (a, b) = (&g.nodes[0], &g.nodes[1]);
    b.attach_driver();
    b.detach_driver();
    completes_and_lands(a.as_ref(), b.as_ref(), 24, 99);
}
