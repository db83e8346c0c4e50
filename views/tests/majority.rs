//! A member that loses its majority says so at once: the removal callback with the
//! view, its members and the ones lost; `Group::removal`; and every send fails
//! with `SendError::NoMajority` instead of waiting out the send timeout.

use spindle_sst::transport::NodeId;
use spindle_views::config::Transport;
use spindle_views::group::{GroupBuilder, NoMajority, Removal, SendError};
use std::sync::mpsc::channel;
use std::time::Duration;

mod common;

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn the_survivor_of_two_reports_its_lost_majority_and_refuses_sends() {
    let name = format!("gm{}", std::process::id());
    let (tx, removed) = channel();
    let g0 = GroupBuilder::new(common::member_config(&name, 0, None, Transport::Shm).build().unwrap())
        .on_deliver(0, |_| {})
        .on_removed(move |r| {
            let _ = tx.send(r.clone());
        })
        .start()
        .unwrap();
    let g1 =
        GroupBuilder::new(common::member_config(&name, 1, Some(g0.listen_addr()), Transport::Shm).build().unwrap())
            .on_deliver(0, |_| {})
            .start()
            .unwrap();
    assert!(g0.wait_for_members(2, WAIT));
    let view = g0.view().expect("a view").id();
    // Node 1 fails (stops without leaving): one of two is no majority.
    g1.shutdown();
    let got = removed.recv_timeout(WAIT).expect("the removal callback");
    let want = NoMajority { view, members: vec![NodeId(0), NodeId(1)], lost: vec![NodeId(1)] };
    assert_eq!(got, Removal::NoMajority(want.clone()));
    assert_eq!(want.needed(), 1);
    assert!(got.to_string().contains("n1 unreachable"), "{got}");
    assert!(testkit::poll_until(WAIT, Duration::from_millis(5), || g0.removal().is_some()));
    assert_eq!(g0.removal(), Some(got));
    // A send fails with the reason, however many times it is tried.
    for _ in 0..3 {
        assert_eq!(g0.send(0, b"x"), Err(SendError::NoMajority(want.clone())));
    }
    assert!(g0.stopped().is_none(), "not stopped: it works on getting back");
    g0.shutdown();
}
