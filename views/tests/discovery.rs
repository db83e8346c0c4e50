//! Self-healing groups in one process: members with no id, no contact and no port
//! find each other by discovery (UDP multicast on loopback); two started at the
//! same moment end in one group; a member left alone (a minority) joins the group
//! again once a member is back at an address it knew, with the state and its id.
//! Every wait has a deadline. (Stalls of a whole process, SIGSTOP/SIGCONT, are in
//! `bench/tests/rejoin.rs`; across hosts in `bench/tests/hosts.rs`.)

use spindle_sst::sync::atomic::{AtomicU64, Ordering};
use spindle_views::config::{Config, Transport};
use spindle_views::group::{Group, GroupBuilder};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn local(name: &str, t: Transport) -> Config {
    Config::local()
        .name(name)
        .transport(t)
        .timeouts(Duration::from_millis(50), Duration::from_millis(400))
        .build()
        .unwrap()
}

fn members(gs: &[&Group], n: usize) -> bool {
    testkit::poll_until(WAIT, Duration::from_millis(5), || {
        let ids: Vec<_> = gs.iter().map(|g| g.view().map(|v| v.id())).collect();
        ids.windows(2).all(|w| w[0] == w[1]) && gs.iter().all(|g| g.members().len() == n)
    })
}

#[test]
fn members_without_id_contact_or_port_find_each_other() {
    let name = format!("disc{}", std::process::id());
    let a = GroupBuilder::new(local(&name, Transport::Tcp)).start().unwrap();
    assert_ne!(a.listen_addr().port(), 0, "the OS gave a port");
    let b = GroupBuilder::new(local(&name, Transport::Tcp)).start().unwrap();
    let c = GroupBuilder::new(local(&name, Transport::Tcp)).start().unwrap();
    assert!(members(&[&a, &b, &c], 3), "one group of three: {:?} {:?} {:?}", a.view(), b.view(), c.view());
    let mut ids: Vec<u32> = [&a, &b, &c].iter().map(|g| g.node().0).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3, "distinct ids {ids:?}");
    // A group of another name is not joined.
    let other = GroupBuilder::new(local(&format!("{name}x"), Transport::Tcp)).start().unwrap();
    assert_eq!(other.members().len(), 1, "{:?}", other.view());
}

#[test]
fn two_members_started_at_once_form_one_group() {
    let name = format!("race{}", std::process::id());
    let (x, y) = std::thread::scope(|s| {
        let x = s.spawn(|| GroupBuilder::new(local(&name, Transport::Shm)).start().unwrap());
        let y = s.spawn(|| GroupBuilder::new(local(&name, Transport::Shm)).start().unwrap());
        (x.join().unwrap(), y.join().unwrap())
    });
    assert!(members(&[&x, &y], 2), "{:?} {:?}", x.view(), y.view());
    // The lower control address started the group (it is node 0).
    let (low, _) = if x.listen_addr() < y.listen_addr() { (&x, &y) } else { (&y, &x) };
    assert_eq!(low.node().0, 0);
}

#[test]
fn a_minority_member_joins_again_when_a_member_is_back() {
    let name = format!("rj{}", std::process::id());
    let cfg = |id: u32, contact: Option<std::net::SocketAddr>, listen: std::net::SocketAddr| {
        let mut b = Config::builder(id, listen)
            .name(&name)
            .transport(Transport::Shm)
            .discovery(false)
            .timeouts(Duration::from_millis(50), Duration::from_millis(400));
        if let Some(c) = contact {
            b = b.contact(c);
        }
        b.build().unwrap()
    };
    let state = Arc::new(AtomicU64::new(0));
    let rejoined = Arc::new(Mutex::new(Vec::<String>::new()));
    let (s1, s2, r) = (state.clone(), state.clone(), rejoined.clone());
    let a = GroupBuilder::new(cfg(5, None, testkit::free_control_addr()))
        .state(
            0,
            move || s1.load(Ordering::SeqCst).to_le_bytes().to_vec(),
            move |b| s2.store(u64::from_le_bytes(b.try_into().unwrap()), Ordering::SeqCst),
        )
        .on_rejoin(move |why| r.lock().unwrap().push(why.to_string()))
        .send_timeout(Duration::from_secs(1))
        .start()
        .unwrap();
    let b_addr = testkit::free_control_addr();
    let b = GroupBuilder::new(cfg(6, Some(a.listen_addr()), b_addr)).start().unwrap();
    assert!(members(&[&a, &b], 2));
    drop(b); // a is now 1 of 2: a minority
    assert!(testkit::poll_until(WAIT, Duration::from_millis(5), || a.rejoining().is_some()), "{:?}", a.stopped());
    assert!(a.rejoining().unwrap().contains("minority"), "{:?}", a.rejoining());
    assert!(a.stopped().is_none(), "it waits to be taken back instead of stopping");
    let e = a.send(0, b"while out").unwrap_err();
    assert!(!e.is_fatal(), "a send while out waits, then times out: {e}");
    // A member is back at an address `a` knew, as a new group with state 42.
    let state_b = Arc::new(AtomicU64::new(42));
    let (sb1, sb2) = (state_b.clone(), state_b.clone());
    let b2 = GroupBuilder::new(cfg(6, None, b_addr))
        .state(
            0,
            move || sb1.load(Ordering::SeqCst).to_le_bytes().to_vec(),
            move |x| sb2.store(u64::from_le_bytes(x.try_into().unwrap()), Ordering::SeqCst),
        )
        .start()
        .unwrap();
    assert!(members(&[&a, &b2], 2), "a joined again: {:?} {:?}", a.view(), a.rejoining());
    assert_eq!(a.node().0, 5, "with its own id");
    assert_eq!(state.load(Ordering::SeqCst), 42, "with the group's state");
    assert_eq!(a.metrics().rejoins, 1);
    assert_eq!(rejoined.lock().unwrap().len(), 1, "on_rejoin ran once");
    assert!(a.rejoining().is_none());
    a.send(0, b"back").unwrap();
}
