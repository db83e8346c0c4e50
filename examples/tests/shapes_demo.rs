//! The shapes demo in three processes: two publishers and a late subscriber. The
//! subscriber gets the last five of every colour from the history, and its own
//! KeepLast(5) keeps the last five of history and live samples together: for each
//! colour, the history samples it was handed plus those a live sample replaced
//! before they were taken are exactly five. It sees each publisher's shapes
//! disposed when that publisher ends. Every step waits for what a process prints,
//! with a generous deadline, never for a time.

use std::process::Command;
use std::time::Duration;
use testkit::LineChild;

const WAIT: Duration = Duration::from_secs(60);

fn start(args: &[&str]) -> LineChild {
    let mut cmd = Command::new(testkit::example_binary("shapes"));
    cmd.args(args).args(["--domain", &format!("shapes{}", std::process::id()), "--seconds", "300"]);
    LineChild::start(cmd)
}

/// A publisher's progress line once it wrote at least ten rounds (more than the
/// five of each colour the history keeps).
fn wrote_ten_rounds(l: &str) -> bool {
    l.starts_with("wrote ")
}

#[test]
fn a_late_subscriber_sees_every_colour_then_their_disposal() {
    let port = testkit::free_ports(2).unwrap()[0];
    let contact = format!("127.0.0.1:{port}");
    let mut one = start(&["pub", "red,green", "--port", &port.to_string(), "--period-ms", "20"]);
    one.expect("of ten rounds written", WAIT, wrote_ten_rounds);
    let mut two = start(&["pub", "blue", "--contact", &contact, "--period-ms", "20"]);
    two.expect("of ten rounds written", WAIT, wrote_ten_rounds);
    let mut sub = start(&["sub", "--contact", &contact]);
    for colour in ["red", "green", "blue"] {
        sub.expect(&format!("showing {colour}"), WAIT, |l| l.trim_start().starts_with(&format!("{colour} at")));
    }
    // Each publisher's end disposes its shapes at the subscriber.
    two.tell("");
    sub.expect("blue Disposed", WAIT, |l| l == "blue Disposed");
    assert!(two.finish(WAIT), "the blue publisher: {:?}", two.seen);
    one.tell("");
    for colour in ["red", "green"] {
        let want = format!("{colour} Disposed");
        if !sub.seen.contains(&want) {
            sub.expect(&want, WAIT, |l| l == want);
        }
    }
    assert!(one.finish(WAIT), "the red/green publisher: {:?}", one.seen);
    sub.tell("");
    assert!(sub.finish(WAIT), "the subscriber: {:?}", sub.seen);
    for colour in ["red", "green", "blue"] {
        let line = sub
            .seen
            .iter()
            .find(|l| l.starts_with(&format!("counted {colour}:")))
            .unwrap_or_else(|| panic!("{colour} counted: {:?}", sub.seen));
        // "counted red: 5 from history (3 taken, 2 replaced), 7 lost in all"
        let n: Vec<u64> =
            line.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).map(|w| w.parse().unwrap()).collect();
        let (received, taken, replaced) = (n[0], n[1], n[2]);
        assert_eq!(received, 5, "{colour}: the history holds the last five: {line}");
        assert_eq!(taken + replaced, 5, "{colour}: each history sample handed out or replaced: {line}");
    }
}
