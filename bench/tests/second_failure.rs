//! A second failure inside a view change: five member processes send; a member is
//! killed and then member 0 (the leader) within 4 ms (shm and tcp), or the leader as
//! soon as a survivor installed the view without the first victim (tcp), so the second
//! kill lands inside the change the first one started. The three survivors must
//! install a view of just themselves, deliver in it, and agree on everything
//! delivered (`chaos` checks all three and exits non-zero otherwise). One run after
//! the other. The timing of a kill against a change varies from run to run; the
//! group simulator replays the failing pattern deterministically (`views::sim`).
//!
//! Bounded: `chaos` has its own deadlines (60 s per phase), and this test kills it
//! after 150 s; its members die with it (parent-death signal) and their /dev/shm files
//! are swept.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn run(transport: &str, how: &[&str]) -> serde_json::Value {
    let mut child = Command::new(env!("CARGO_BIN_EXE_chaos"))
        .args(["--transport", transport, "--nodes", "5", "--kill", "2", "--kill-leader"])
        .args(how)
        .args(["--seconds", "2", "--seed", "12", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run chaos");
    let deadline = Instant::now() + Duration::from_secs(150);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for chaos") {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = child.wait_with_output().expect("chaos output");
    sst::transport::shm::remove_stale_files();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let status = status.unwrap_or_else(|| panic!("{transport}: chaos did not finish within 150 s: {stderr}"));
    assert!(status.success(), "{transport}: chaos failed: {stdout}\n{stderr}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{transport}: one JSON line ({e}): {stdout}"))
}

#[test]
fn survivors_of_a_member_and_then_the_leader_dying_go_on() {
    let burst: &[&str] = &["--burst-ms", "4"];
    let in_change: &[&str] = &["--kill-leader-in-change"];
    for (transport, how) in [("shm", burst), ("tcp", burst), ("tcp", in_change)] {
        let v = run(transport, how);
        assert_eq!(v["digest_agree"], true, "{v}");
        assert_eq!(v["final_view_is_survivors"], true, "{v}");
        assert!(v["delivered_after_last_view"].as_u64().is_some_and(|d| d > 0), "{v}");
        assert_eq!(v["survivors"], 3, "{v}");
    }
}
