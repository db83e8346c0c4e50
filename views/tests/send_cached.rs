//! `Group::send_cached` across a view change: its sends take no lock of the
//! view's, so one can claim its slot before the view wedges and publish it after.
//! That message must be sent again in the next view, once, in its sender's order.

use spindle_sst::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spindle_views::config::Transport;
use spindle_views::group::{Group, GroupBuilder, SendCache};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

const WAIT: Duration = Duration::from_secs(30);

type Log = Arc<Mutex<Vec<(u32, u32)>>>;

/// A member over shm whose deliveries of subgroup 0 are logged as (sender, number)
/// and whose wedges are counted.
fn member(name: &str, id: u32, contact: Option<SocketAddr>, wedges: Arc<AtomicU64>) -> (Group, Log) {
    // A failure timeout well past the stall below: the view change it holds up is
    // not to be taken for a failure of node 0.
    let cfg = common::member_config(name, id, contact, Transport::Shm)
        .timeouts(Duration::from_millis(50), Duration::from_secs(5))
        .window(8)
        .max_msg(64)
        .build()
        .unwrap();
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let g = GroupBuilder::new(cfg)
        .on_deliver(0, move |d| {
            let n = u32::from_le_bytes(d.data[..4].try_into().expect("4 bytes"));
            l.lock().unwrap().push((d.sender.0, n));
        })
        .on_wedge(move |_| {
            wedges.fetch_add(1, Ordering::SeqCst);
        })
        .start()
        .unwrap();
    (g, log)
}

fn wait(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_send_claimed_before_a_wedge_is_sent_again_in_the_next_view() {
    const N: u32 = 200;
    const STALLED: u32 = 100;
    let name = format!("sc{}", std::process::id());
    let wedges: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let (g0, log0) = member(&name, 0, None, wedges[0].clone());
    let contact = Some(g0.listen_addr());
    let (g1, log1) = member(&name, 1, contact, wedges[1].clone());
    assert!(g0.wait_for_members(2, WAIT), "two members: {:?}", g0.view());
    let stalling = AtomicBool::new(false);
    let stall_timed_out = AtomicBool::new(false);
    let g2 = std::thread::scope(|s| {
        s.spawn(|| {
            let mut cache = SendCache::default();
            for i in 0..N {
                let before = wedges[0].load(Ordering::SeqCst);
                let stalls = i == STALLED;
                let build = |slot: &mut spindle_smc::runtime::SendSlot<'_>| {
                    slot.write(0, &i.to_le_bytes());
                    if !stalls {
                        return;
                    }
                    // Claimed, not yet published: hold it until this node has
                    // wedged for the join, and 300 ms more, time for the trim and
                    // the install that follow a wedge (a few ms here), so that it
                    // is published well into the view change.
                    stalling.store(true, Ordering::SeqCst);
                    let deadline = Instant::now() + WAIT;
                    while wedges[0].load(Ordering::SeqCst) == before {
                        if Instant::now() > deadline {
                            stall_timed_out.store(true, Ordering::SeqCst);
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    std::thread::sleep(Duration::from_millis(300));
                };
                if let Err(e) = g0.send_cached(&mut cache, |_| Some(0), 4, build, None, None) {
                    panic!("send {i}: {e}; {:?}", g0.view());
                }
            }
        });
        wait("the stalled send to claim its slot", || stalling.load(Ordering::SeqCst));
        // A third member joins while that send holds its slot.
        member(&name, 2, contact, wedges[2].clone())
    });
    let (g2, log2) = g2;
    assert!(!stall_timed_out.load(Ordering::SeqCst), "node 0 never wedged for the join");
    assert!(g0.wait_for_members(3, WAIT), "three members: {:?}", g0.view());
    let want: Vec<(u32, u32)> = (0..N).map(|i| (0, i)).collect();
    let deadline = Instant::now() + WAIT;
    while [&log0, &log1].iter().any(|l| l.lock().unwrap().len() < N as usize) {
        let missing = |l: &Log| want.iter().filter(|m| !l.lock().unwrap().contains(m)).count();
        assert!(
            Instant::now() < deadline,
            "timed out waiting for every message at the first two members: missing {} and {}; {:?}",
            missing(&log0),
            missing(&log1),
            g0.metrics()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(*log0.lock().unwrap(), want, "node 0: each message once, in order");
    assert_eq!(*log1.lock().unwrap(), want, "node 1: each message once, in order");
    // The joiner delivers the same messages a little later: its log is read once
    // it holds the last one.
    wait("the joiner to deliver the last message", || log2.lock().unwrap().last() == want.last());
    let tail = log2.lock().unwrap().clone();
    assert!(want.ends_with(&tail), "the joiner's deliveries are the last ones: {tail:?}");
    // Nobody could have received the stalled message before the wedge (it was not
    // published), so the trim cut it and the next view carried it.
    let m = g0.metrics();
    assert!(m.resent >= 1, "the stalled message was sent again: {m:?}");
    assert_eq!(m.sent, N as u64, "each message counted once: {m:?}");
    for g in [g0, g1, g2] {
        g.shutdown();
    }
}
