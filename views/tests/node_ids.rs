//! Node ids the group gives: members whose config leaves `node_id` out (AUTO_ID)
//! get one at join, distinct from every id the group has had, over shm and tcp.
//! Members are threads of this process; every wait has a deadline.

use spindle_views::config::{Transport, AUTO_ID};
use spindle_views::group::{Group, GroupBuilder};
use spindle_views::view::ViewId;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

const WAIT: Duration = Duration::from_secs(30);

type Log = Arc<Mutex<Vec<(u32, Vec<u8>)>>>;

fn start(name: &str, id: u32, contact: Option<&Group>, t: Transport) -> (Group, Log) {
    let log: Log = Arc::default();
    let l = log.clone();
    let cfg = common::member_config(name, id, contact.map(|g| g.listen_addr()), t).window(8).max_msg(64);
    let g = GroupBuilder::new(cfg.build().unwrap())
        .on_deliver(0, move |d| l.lock().unwrap().push((d.sender.0, d.data.to_vec())))
        .start()
        .unwrap();
    (g, log)
}

fn same_view(gs: &[&Group]) -> bool {
    testkit::poll_until(WAIT, Duration::from_millis(5), || {
        let v: Vec<Option<ViewId>> = gs.iter().map(|g| g.view().map(|v| v.id())).collect();
        v.windows(2).all(|w| w[0] == w[1]) && gs.iter().all(|g| g.members().len() == gs.len())
    })
}

fn ids_are_given_and_never_given_twice(t: Transport, name: &str) {
    let (a, la) = start(name, AUTO_ID, None, t);
    assert_eq!(a.node().0, 0, "the node that starts the group is 0");
    let (b, _) = start(name, AUTO_ID, Some(&a), t);
    let (c, _) = start(name, 7, Some(&b), t); // an explicit id still works, joining through a non-leader
    let (d, ld) = start(name, AUTO_ID, Some(&c), t);
    assert!(same_view(&[&a, &b, &c, &d]));
    let ids: Vec<u32> = [&a, &b, &c, &d].iter().map(|g| g.node().0).collect();
    assert_eq!(ids[2], 7);
    assert!(ids[1] != 0 && ids[1] != 7, "{ids:?}");
    assert!(ids[3] > 7, "above every id the group had: {ids:?}");
    assert_eq!(d.view().unwrap().next_node(), ids[3] + 1);
    // A member leaves; the next one without an id does not get its id back.
    let gone = b.node().0;
    assert!(b.leave(WAIT));
    drop(b);
    assert!(same_view(&[&a, &c, &d]));
    let (e, le) = start(name, AUTO_ID, Some(&a), t);
    assert!(same_view(&[&a, &c, &d, &e]));
    assert!(e.node().0 > ids[3] && e.node().0 != gone, "{} after {ids:?}", e.node().0);
    // They deliver as one group.
    e.send(0, b"from e").unwrap();
    a.send(0, b"from a").unwrap();
    let all = testkit::poll_until(WAIT, Duration::from_millis(5), || {
        [&la, &ld, &le].iter().all(|l| l.lock().unwrap().len() >= 2)
    });
    assert!(all, "every member delivered both");
    let seqs: Vec<Vec<(u32, Vec<u8>)>> = [&la, &ld, &le].iter().map(|l| l.lock().unwrap()[..2].to_vec()).collect();
    assert!(seqs.windows(2).all(|w| w[0] == w[1]), "one order: {seqs:?}");
}

#[test]
fn ids_are_given_and_never_given_twice_over_shm() {
    ids_are_given_and_never_given_twice(Transport::Shm, &format!("ids{}s", std::process::id()));
}

#[test]
fn ids_are_given_and_never_given_twice_over_tcp() {
    ids_are_given_and_never_given_twice(Transport::Tcp, &format!("ids{}t", std::process::id()));
}
