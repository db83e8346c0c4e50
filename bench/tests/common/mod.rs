//! What the multi-process tests share: run one of the programs with a deadline and
//! take its JSON lines.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `bin` with `args`, killing it after `limit`; asserts that it finished and
/// succeeded, sweeps stale shm files, and returns its stdout as JSON lines.
pub fn run_json(bin: &str, args: &[&str], limit: Duration) -> Vec<serde_json::Value> {
    let mut child = Command::new(bin).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let deadline = Instant::now() + limit;
    let finished = loop {
        if child.try_wait().expect("wait").is_some() {
            break true;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("output");
    spindle_sst::transport::shm::remove_stale_files();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(finished, "{bin} {args:?} did not finish within {limit:?}: {stderr}");
    assert!(out.status.success(), "{bin} {args:?} failed: {stdout}\n{stderr}");
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a JSON line ({e}): {l}"))).collect()
}
