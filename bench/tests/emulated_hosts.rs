//! `bandwidth --link-mbit`: every member a host of its own (a network namespace, its
//! link shaped), large messages relayed and sent directly, ordered and unordered.
//! Every run must end with every message delivered everywhere, digests agreeing,
//! and its namespaces removed; a relayed sender's pushes carry one copy of each
//! payload, a direct one a copy per receiver. Behaviour, not speed. Needs root,
//! `ip`, `tc` and `nft`; skipped, saying why, where namespaces cannot be made or
//! shaped.

use std::process::Command;
use std::time::Duration;
use testkit::LineChild;

const SIZE: usize = 1 << 20;

/// Namespaces whose names start with `prefix`.
fn namespaces(prefix: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(String::from)
        .collect()
}

fn run(mode: &str, relay: bool) -> serde_json::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_bandwidth"));
    cmd.args(["--transport", "tcp", "--nodes", "4", "--senders", "one", "--mode", mode]).args([
        "--size",
        &SIZE.to_string(),
        "--count",
        "40",
        "--link-mbit",
        "1000",
        "--json",
    ]);
    if relay {
        cmd.arg("--relay");
    }
    let mut child = LineChild::start(cmd);
    // The program names its namespaces after its process id.
    let prefix = format!("bw{}", child.id() % 100_000);
    let ok = child.finish(Duration::from_secs(120));
    // A run that hung was killed before it could remove them: do it here.
    let left = namespaces(&prefix);
    for ns in &left {
        let _ = Command::new("ip").args(["netns", "del", ns]).status();
    }
    let all = child.seen.join("\n");
    assert!(ok, "{mode} relay={relay}: bandwidth failed or hung:\n{all}");
    assert!(left.is_empty(), "{mode} relay={relay}: namespaces left behind: {left:?}");
    let line = child.seen.iter().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("no JSON line:\n{all}"));
    serde_json::from_str(line).expect("one JSON line")
}

#[test]
fn members_on_emulated_hosts_deliver_everything_relayed_or_not() {
    if let Some(why) = testkit::netns::unshapable(&format!("eh{}", std::process::id() % 100_000)) {
        eprintln!("emulated hosts test skipped: {why}");
        return;
    }
    for mode in ["ordered", "unordered"] {
        for relay in [true, false] {
            let v = run(mode, relay);
            assert_eq!(v["digest_agree"], true, "{v}");
            assert_eq!(v["complete"], true, "{v}");
            assert_eq!(v["link_mbit"], 1000, "{v}");
            let pushed = v["push_bytes_per_msg"].as_f64().expect("push_bytes_per_msg");
            let copies = pushed / SIZE as f64;
            if relay {
                assert!((1.0..1.5).contains(&copies), "a relayed sender sends one copy: {v}");
            } else {
                assert!(copies >= 3.0, "a direct sender sends a copy per receiver: {v}");
            }
        }
    }
}
