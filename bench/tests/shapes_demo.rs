//! The shapes demo in three processes: two publishers and a late subscriber. The
//! subscriber gets the last five of every colour first, then live samples, and
//! sees each publisher's shapes disposed when it ends. Every process has its own
//! deadline (`--seconds`) and is killed if it overruns.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn start(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_shapes"))
        .args(args)
        .args(["--domain", &format!("shapes{}", std::process::id())])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(mut c: Child, limit: Duration) -> (bool, String) {
    let deadline = Instant::now() + limit;
    while c.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = c.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = c.wait_with_output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_late_subscriber_sees_every_colour_then_their_disposal() {
    let port = testkit::free_ports(2).unwrap()[0];
    let contact = format!("127.0.0.1:{port}");
    let one = start(&["pub", "red,green", "--port", &port.to_string(), "--seconds", "4", "--period-ms", "20"]);
    std::thread::sleep(Duration::from_millis(700));
    let two = start(&["pub", "blue", "--contact", &contact, "--seconds", "3", "--period-ms", "20"]);
    std::thread::sleep(Duration::from_millis(1200));
    let sub = start(&["sub", "--contact", &contact, "--seconds", "5"]);
    let (ok1, out1) = finish(one, Duration::from_secs(60));
    let (ok2, out2) = finish(two, Duration::from_secs(60));
    let (ok3, out3) = finish(sub, Duration::from_secs(60));
    assert!(ok1 && ok2 && ok3, "{out1}\n{out2}\n{out3}");
    for colour in ["red", "green", "blue"] {
        assert!(out3.contains(&format!("{colour} Disposed")), "{colour} disposed: {out3}");
        let last = out3.lines().rfind(|l| l.trim_start().starts_with(&format!("{colour} at")));
        assert!(last.is_some_and(|l| l.contains("(5 from history)")), "{colour}: the last 5 came first: {out3}");
    }
}
