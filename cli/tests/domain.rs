//! `spindle ls`, `echo` and `pub` against a domain of this process: `ls` lists the
//! topics with their types and endpoints, `echo` prints samples (known types
//! decoded, others in hex, keyed ones with their instance), `pub` writes JSON
//! values from stdin; bad targets give one line and their exit code. The command
//! runs as a child with a deadline.

use spindle::dds::{DdsConfig, DomainParticipant, History, Keyed, Qos};
use spindle::views::config::{Config, Transport};
mod common;
use common::spindle;
use std::time::Duration;

#[derive(serde::Serialize, serde::Deserialize)]
struct Shape {
    colour: String,
    x: i32,
}

impl Keyed for Shape {
    type Key = String;
    fn key(&self) -> String {
        self.colour.clone()
    }
}

fn tool(addr: std::net::SocketAddr, args: &[&str]) -> (bool, String, String) {
    let addr = addr.to_string();
    let mut all = args.to_vec();
    all.extend(["--connect", &addr]);
    let (code, out, err) = spindle(&all, "");
    (code == 0, out, err)
}

#[test]
fn ls_lists_topics_and_echo_prints_samples() {
    let name = format!("ddstool{}", std::process::id());
    let cfg = Config::builder(0, testkit::free_control_addr()).name(&name).transport(Transport::Shm).build().unwrap();
    let p = DomainParticipant::new(DdsConfig::new(cfg)).unwrap();
    let text = p.topic::<String>("chat", Qos::volatile(History::KeepAll)).unwrap();
    let shapes = p.keyed_topic::<Shape>("shapes", Qos::volatile(History::KeepLast(1))).unwrap();
    let tw = p.create_writer(&text, text.qos()).unwrap();
    let sw = p.create_writer(&shapes, shapes.qos()).unwrap();
    for i in 0..3 {
        tw.write(&format!("hello {i}")).unwrap();
    }
    sw.write(&Shape { colour: "red".into(), x: 7 }).unwrap();
    sw.dispose(&Shape { colour: "blue".into(), x: 0 }).unwrap();
    assert!(tw.wait_for_delivery(Duration::from_secs(30)) && sw.wait_for_delivery(Duration::from_secs(30)));
    let addr = p.group().listen_addr();

    let (ok, out, err) = tool(addr, &["ls"]);
    assert!(ok, "{err}");
    assert!(out.contains("members [0]"), "{out}");
    assert!(out.contains("chat  type serde:String#") && out.contains("volatile keep all"), "{out}");
    assert!(out.contains("shapes  type serde+keyed:Shape#") && out.contains("keep last 1"), "{out}");
    assert!(out.contains(&format!("n0/w{} volatile", tw.id())), "{out}");

    let (ok, out, err) = tool(addr, &["echo", "chat", "--count", "3"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].contains("#0 ") && lines[0].ends_with("history: \"hello 0\""), "{out}");

    let (ok, out, err) = tool(addr, &["echo", "shapes", "--count", "2"]);
    assert!(ok, "{err}");
    assert!(out.contains("valid_data=true") && out.contains("valid_data=false") && out.contains("Disposed"), "{out}");
    assert!(out.contains("bytes)"), "a type the tool does not know is shown in hex: {out}");

    let a = addr.to_string();
    let (code, _, err) = spindle(&["echo", "no-such-topic", "--count", "1", "--connect", &a], "");
    assert_eq!(code, 4, "no such topic: {err}");
    assert!(err.starts_with("spindle: ") && err.contains("no-such-topic") && err.lines().count() == 1, "{err}");
    let (code, _, err) = spindle(&["ls", "--timeout", "1", "--connect", "127.0.0.1:9"], "");
    assert_eq!(code, 3, "nothing listens there: {err}");
    assert!(err.starts_with("spindle: ") && err.lines().count() == 1, "one line: {err}");

    // pub: JSON values from stdin, one per line; then echo sees them after the three.
    let (code, out, err) = spindle(&["pub", "chat", "--connect", &a], "\"from pub\"\n\n\"again\"\n");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "one line per sample written: {out}");
    let (code, out, err) = spindle(&["echo", "chat", "--count", "5", "--json", "--connect", &a], "");
    assert_eq!(code, 0, "{err}");
    let values: Vec<serde_json::Value> =
        out.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["value"].clone()).collect();
    assert_eq!(values[3], "from pub", "{out}");
    assert_eq!(values[4], "again", "{out}");
    // A value of the wrong type, and a topic of a type pub cannot write from JSON.
    let (code, _, err) = spindle(&["pub", "chat", "--connect", &a], "42\n");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("line 1") && err.contains("not a string"), "{err}");
    let (code, _, err) = spindle(&["pub", "shapes", "--connect", &a], "{}\n");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--hex"), "{err}");
    drop(p);
}
