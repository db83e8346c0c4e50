//! The shipped `counter` demo as a new user runs it on a LAN: four hosts (network
//! namespaces on one bridge, each with its own address and a default route), the
//! same command in each with no address, id, port or contact. They must form one
//! group, each member listening on its host's address; a number typed at one is
//! added everywhere; a host cut off by nftables is removed, and once healed it
//! rejoins by itself, gets the counter and takes part again.
//!
//! Needs root, `ip` and `nft`; where the machine cannot make namespaces it says
//! why and skips. Everything is named after the test's pid and removed on drop.

use std::time::Duration;
use testkit::netns::{command_in, Net};
use testkit::LineChild;

const N: usize = 4;
const WAIT: Duration = Duration::from_secs(60);

/// A view line of the demo with `n` members: `== view K: members n0, n1 ==`.
fn view_of(l: &str, n: usize) -> bool {
    l.starts_with("== view ") && l.split("members ").nth(1).is_some_and(|m| m.split(", ").count() == n)
}

#[test]
fn the_counter_demo_forms_one_group_across_hosts_with_no_flags() {
    let tag = format!("lc{}", std::process::id() % 100_000);
    if let Some(why) = testkit::netns::unavailable(&tag) {
        eprintln!("lan counter test skipped: {why}");
        return;
    }
    let net = Net::create_lan(&tag, N).expect("namespaces");
    // Each host's data directory (where the demo keeps its members' state).
    let data = testkit::TempDirs::new(&tag, N);
    let bin = testkit::example_binary("counter");
    let mut hosts: Vec<LineChild> = (0..N)
        .map(|i| {
            let mut c = command_in(&net.ns(i), &bin);
            c.args(["--name", &tag, "--transport", "tcp"]).env("SPINDLE_DATA_DIR", &data[i]);
            LineChild::start(c)
        })
        .collect();
    for (i, h) in hosts.iter_mut().enumerate() {
        let at = h.expect("with its address", WAIT, |l| l.contains(" at ") && l.contains("running"));
        assert!(at.contains(&format!(" at {}:", Net::ip(i))), "host {i} listens on its own address: {at}");
        // A view of all four, before or after that line (the ones that joined
        // early see it later).
        if !h.seen.iter().any(|l| view_of(l, N)) {
            h.expect("of a view of all four", WAIT, |l| view_of(l, N));
        }
    }
    hosts[0].tell("5");
    for h in hosts.iter_mut() {
        h.expect("with counter 5", WAIT, |l| l.ends_with("counter = 5"));
    }
    // Host 3 cut off: the other three go on without it.
    net.partition(&[3]).expect("nftables rules");
    for h in hosts.iter_mut().take(3) {
        h.expect("of a view of three", WAIT, |l| view_of(l, 3));
    }
    net.heal().expect("remove the cut");
    // Healed: it rejoins by itself with the counter, and every host runs a view of four.
    hosts[3].expect("the counter as state", WAIT, |l| l == "received state: counter = 5");
    for h in hosts.iter_mut() {
        h.expect("of a view of all four again", WAIT, |l| view_of(l, N));
    }
    hosts[3].tell("2");
    for h in hosts.iter_mut() {
        h.expect("with counter 7", WAIT, |l| l.ends_with("counter = 7"));
    }
}
