//! The bandwidth program on every transport, with 2 and 3 nodes, all/half/one senders,
//! ordered and unordered, 1 B and 10 KB messages: every node must deliver every message
//! and the delivery digests must agree. Short runs: behaviour, not speed.

use std::process::Command;

fn run(transport: &str, nodes: usize, senders: &str, mode: &str, size: usize) -> serde_json::Value {
    let (nodes, size) = (nodes.to_string(), size.to_string());
    let head = ["--transport", transport, "--nodes", &nodes, "--senders", senders, "--mode", mode];
    let tail = ["--size", &size, "--count", "300", "--window", "16", "--subgroups", "2", "--json"];
    bandwidth(&[&head[..], &tail[..]].concat())
}

/// One run of the bandwidth program with `args` (which hold `--json`): it must
/// succeed; its one JSON line.
fn bandwidth(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_bandwidth")).args(args).output().expect("run bandwidth");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{args:?} failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.trim()).expect("one JSON line")
}

/// Asserts that every node delivered every message in the same order.
fn assert_agreed(v: &serde_json::Value) {
    assert_eq!((v["digest_agree"].as_bool(), v["complete"].as_bool()), (Some(true), Some(true)), "{v}");
}

fn matrix(transport: &str) {
    for nodes in [2, 3] {
        for senders in ["all", "half", "one"] {
            for mode in ["ordered", "unordered"] {
                for size in [1, 10240] {
                    let v = run(transport, nodes, senders, mode, size);
                    assert_eq!(v["digest_agree"], true, "{v}");
                    assert_eq!(v["complete"], true, "{v}");
                    if mode == "unordered" || senders == "one" {
                        assert_eq!(v["nulls"], 0.0, "nulls only serve round-robin order with several senders: {v}");
                    }
                    if size == 10240 && senders == "one" {
                        // What a sender's pushes copy per message: nothing of the
                        // payload where peers read its slots in place (mem, shm), a
                        // copy per peer over tcp.
                        let pushed = v["push_bytes_per_msg"].as_f64().expect("push_bytes_per_msg");
                        if transport == "tcp" {
                            assert!(pushed >= ((nodes - 1) * size) as f64, "{v}");
                        } else {
                            assert!(pushed < 256.0, "payload copied on {transport}: {v}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn mem() {
    matrix("mem");
}

#[test]
fn shm() {
    matrix("shm");
}

#[test]
fn tcp() {
    matrix("tcp");
}

/// `--fill --read full` (every byte written and copied out) delivers what the
/// Derecho-shaped run does: the same delivery digest, read from the copy.
#[test]
fn full_reads_deliver_the_same_sequence() {
    let base = ["--transport", "shm", "--nodes", "2", "--senders", "one", "--size", "1024", "--count", "2000"];
    let digests: Vec<serde_json::Value> = [&[][..], &["--fill", "--read", "full"][..]]
        .iter()
        .map(|extra| {
            let v = bandwidth(&[&base[..], &["--window", "16", "--json"][..], *extra].concat());
            assert_agreed(&v);
            v["digests"].clone()
        })
        .collect();
    assert!(digests[0].is_array(), "{digests:?}");
    assert_eq!(digests[0], digests[1]);
}

/// With a group secret every tcp link is sealed: small and large (arena) messages,
/// three nodes, digests agree. A secret is refused by name on shm, where nothing is
/// sealed, and a missing file is a bad argument.
#[test]
fn tcp_sealed_and_the_secret_flag_checked() {
    let dir = std::env::temp_dir().join(format!("bw-key-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("group.key");
    spindle_views::auth::Secret::generate(&key).unwrap();
    let key_s = key.to_str().unwrap();
    for (size, extra) in [(64, vec![]), (200_000, vec!["--slot", "1024"])] {
        let size = size.to_string();
        let args = ["--transport", "tcp", "--nodes", "3", "--senders", "all", "--size", &size, "--count", "200"];
        assert_agreed(&bandwidth(&[&args[..], &["--json", "--secret-file", key_s][..], &extra[..]].concat()));
    }
    for (args, says) in [
        (vec!["--transport", "shm", "--secret-file", key_s], "only tcp links are sealed"),
        (vec!["--transport", "tcp", "--secret-file", "/nonexistent/group.key"], "--secret-file"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_bandwidth")).args(args).output().expect("run bandwidth");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(says), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
