//! The shipped `sensors` demo as a new user runs it on a LAN: three hosts (network
//! namespaces on one bridge, each with its own address and a default route), a
//! publisher and two subscribers (the second late) started with no address, id,
//! port or contact. They must form one domain, each participant on its host's
//! address; the first subscriber prints live readings, the late one first the
//! history, then live readings.
//!
//! Needs root, `ip` and `nft`; where the machine cannot make namespaces it says
//! why and skips. Everything is named after the test's pid and removed on drop.

use std::time::Duration;
use testkit::netns::{command_in, Net};
use testkit::LineChild;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn the_sensors_demo_forms_one_domain_across_hosts_with_no_flags() {
    let tag = format!("ls{}", std::process::id() % 100_000);
    if let Some(why) = testkit::netns::unavailable(&tag) {
        eprintln!("lan sensors test skipped: {why}");
        return;
    }
    let net = Net::create_lan(&tag, 3).expect("namespaces");
    let bin = testkit::example_binary("sensors");
    let start = |i: usize, role: &str| {
        let mut c = command_in(&net.ns(i), &bin);
        c.args([role, "--domain", &tag, "--transport", "tcp", "--period-ms", "50"]);
        LineChild::start(c)
    };
    let at = |h: &mut LineChild, i: usize| {
        let l = h.expect("with its address", WAIT, |l| l.starts_with("participant "));
        assert!(l.contains(&format!(" at {}:", Net::ip(i))), "host {i} listens on its own address: {l}");
    };
    let mut publisher = start(0, "publish");
    at(&mut publisher, 0);
    let mut first = start(1, "subscribe");
    at(&mut first, 1);
    for _ in 0..5 {
        first.expect("of a live reading", WAIT, |l| l.starts_with("live "));
    }
    let mut late = start(2, "subscribe");
    at(&mut late, 2);
    // It joined the one domain the other two run: its view lists all three.
    let topic = late.expect("of the topic and members", WAIT, |l| l.starts_with("topic `temperature`"));
    let members = topic.split("members [").nth(1).and_then(|m| m.strip_suffix(']')).unwrap_or_default();
    assert_eq!(members.split(", ").count(), 3, "one domain of three: {topic}");
    late.expect("of the history", WAIT, |l| l.starts_with("history "));
    late.expect("of a live reading after it", WAIT, |l| l.starts_with("live "));
}
