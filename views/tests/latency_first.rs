//! Latency first: a thread that waits for a delivery runs its node's passes itself.
//! Members as threads of one process over shm on loopback; every wait bounded.

use spindle_views::config::{Config, Transport};
use spindle_views::group::{Group, GroupBuilder};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

mod common;

const WAIT: Duration = Duration::from_secs(30);

/// Who delivered what: (sender, payload, the thread the upcall ran on).
type Log = Arc<Mutex<Vec<(u32, Vec<u8>, ThreadId)>>>;

fn config(name: &str, id: u32, contact: Option<SocketAddr>, latency_first: bool) -> Config {
    common::member_config(name, id, contact, Transport::Shm)
        .window(8)
        .max_msg(64)
        .latency_first(latency_first)
        .build()
        .unwrap()
}

fn member(cfg: Config) -> (Arc<Group>, Log) {
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let g = GroupBuilder::new(cfg)
        .on_deliver(0, move |d| l.lock().unwrap().push((d.sender.0, d.data.to_vec(), std::thread::current().id())))
        .start()
        .unwrap();
    (Arc::new(g), log)
}

#[test]
fn a_waiting_sender_delivers_its_own_messages_on_its_own_thread_in_order() {
    let name = format!("lf{}", std::process::id());
    let (g0, log0) = member(config(&name, 0, None, true));
    let (g1, log1) = member(config(&name, 1, Some(g0.listen_addr()), true));
    assert!(g0.wait_for_members(2, WAIT) && g1.wait_for_members(2, WAIT));
    let me = std::thread::current().id();
    let n = 300usize;
    for i in 0..n {
        g0.send(0, &(i as u32).to_le_bytes()).unwrap();
        let done = g0.wait_running_passes(Instant::now() + WAIT, || log0.lock().unwrap().len() > i);
        assert_eq!(done, Some(true), "message {i} delivered while the sender ran the passes");
    }
    let mine = log0.lock().unwrap().iter().filter(|(_, _, t)| *t == me).count();
    // The first messages may be delivered by the predicate thread before it steps
    // aside; after that the waiting thread delivers.
    assert!(mine >= n / 2, "{mine} of {n} delivered on the waiting thread");
    let want: Vec<Vec<u8>> = (0..n as u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let deadline = Instant::now() + WAIT;
    while log1.lock().unwrap().len() < n {
        assert!(Instant::now() < deadline, "member 1 delivers everything");
        std::thread::sleep(Duration::from_millis(5));
    }
    for log in [&log0, &log1] {
        let got: Vec<Vec<u8>> = log.lock().unwrap().iter().map(|(_, d, _)| d.clone()).collect();
        assert_eq!(got, want, "every message once, in order");
    }
}

#[test]
fn a_wait_goes_on_across_a_view_change_and_the_setting_off_does_not_wait() {
    let name = format!("lv{}", std::process::id());
    let (g0, log0) = member(config(&name, 0, None, true));
    assert!(g0.wait_for_members(1, WAIT));
    let n = 50usize;
    let (w, l) = (g0.clone(), log0.clone());
    let waiter =
        std::thread::spawn(move || w.wait_running_passes(Instant::now() + WAIT, || l.lock().unwrap().len() >= n));
    // A member joins while the wait runs (a new view, new passes), then sends.
    let (g1, _log1) = member(config(&name, 1, Some(g0.listen_addr()), false));
    assert!(g1.wait_for_members(2, WAIT));
    for i in 0..n as u32 {
        g1.send(0, &i.to_le_bytes()).unwrap();
    }
    assert_eq!(waiter.join().unwrap(), Some(true), "the wait saw the messages sent in the next view");
    assert_eq!(g1.wait_running_passes(Instant::now() + WAIT, || true), None, "off: the caller waits its own way");
}
