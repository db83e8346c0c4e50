//! A member answers an operator's status request (what `spindle status` shows): its
//! view, the members with their control addresses, and each member's progress and
//! lag in the subgroups they share; with a secret, only to a caller that holds it.

use spindle_views::auth::{Credentials, Secret};
use spindle_views::config::{Config, Transport};
use spindle_views::group::report::{self, StatusError};
use spindle_views::group::{Group, GroupBuilder};
use std::net::SocketAddr;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn start(name: &str, contact: Option<SocketAddr>, secret: &std::path::Path) -> Group {
    let mut b = Config::local()
        .name(name)
        .transport(Transport::Tcp)
        .discovery(false)
        .secret_file(secret)
        .timeouts(Duration::from_millis(50), Duration::from_millis(600));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    GroupBuilder::new(b.build().unwrap()).on_deliver(0, |_| {}).start().unwrap()
}

#[test]
fn a_member_reports_the_view_its_members_and_their_progress() {
    let name = format!("report{}", std::process::id());
    let dir = testkit::TempDirs::new(&name, 1);
    std::fs::create_dir_all(&dir[0]).unwrap();
    let (key, other) = (dir[0].join("group.key"), dir[0].join("other.key"));
    Secret::generate(&key).unwrap();
    Secret::generate(&other).unwrap();
    let a = start(&name, None, &key);
    let b = start(&name, Some(a.listen_addr()), &key);
    assert!(a.wait_for_members(2, WAIT) && b.wait_for_members(2, WAIT));
    for i in 0..100u32 {
        a.send(0, &i.to_le_bytes()).unwrap();
    }
    let secret: Credentials = Secret::load(&key).unwrap().into();
    // Both have delivered the 100 once the report says so (bounded poll).
    let mut last = None;
    let done = testkit::poll_until(WAIT, Duration::from_millis(10), || {
        let s = report::ask(b.listen_addr(), WAIT, Some(&secret)).unwrap();
        let ok = s.members.len() == 2 && s.members.iter().all(|m| m.delivered >= Some(100) && m.lag == Some(0));
        last = Some(s);
        ok
    });
    let s = last.unwrap();
    assert!(done, "both members delivered the 100 messages: {s:?}");
    assert_eq!(s.node, b.node().0);
    assert_eq!(s.view, b.view().map(|v| v.id().0));
    let nodes: Vec<u32> = s.members.iter().map(|m| m.node).collect();
    assert_eq!(nodes, b.members().iter().map(|n| n.0).collect::<Vec<_>>());
    let a_entry = s.members.iter().find(|m| m.node == a.node().0).unwrap();
    assert_eq!(a_entry.addr, Some(a.listen_addr()));
    assert!(!s.stopped);
    // Without the secret, or with another, there is no report.
    let wrong: Credentials = Secret::load(&other).unwrap().into();
    assert!(matches!(report::ask(a.listen_addr(), WAIT, Some(&wrong)), Err(StatusError::Auth { .. })));
    assert!(report::ask(a.listen_addr(), WAIT, None).is_err());
}
