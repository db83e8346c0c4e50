//! `dds_tool` against a domain of this process: `ls` lists the topics with their
//! types and endpoints, `echo` prints samples (known types decoded, others in
//! hex, keyed ones with their instance). The tool runs as a child with a deadline.

use spindle_dds::DdsConfig;
use spindle_dds::{DomainParticipant, Keyed};
use spindle_dds::{History, Qos};
use spindle_views::config::{Config, Transport};
use std::process::Command;
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_dds_tool"))
        .arg("--connect")
        .arg(addr.to_string())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
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

    let (ok, _, err) = tool(addr, &["echo", "no-such-topic", "--count", "1"]);
    assert!(!ok && err.contains("no-such-topic"), "{err}");
    let (ok, _, err) = tool("127.0.0.1:9".parse().unwrap(), &["--timeout-s", "1", "ls"]);
    assert!(!ok && err.contains("connecting"), "{err}");
}
