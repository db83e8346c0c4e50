//! What the multi-process tests share: run one of the programs with a deadline and
//! take its output (its JSON lines).

#![allow(dead_code)] // each test uses its part

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A program's run under [`run_bounded`].
pub struct Bounded {
    /// `None` if it was killed at the deadline.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` with its stdout and stderr taken (read while it runs, so a chatty
/// program never blocks on a full pipe), killing it after `limit`.
pub fn run_bounded(mut cmd: Command, limit: Duration) -> Bounded {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Bounded { status, stdout: out.join().expect("stdout reader"), stderr: err.join().expect("stderr reader") }
}

/// Runs `bin` with `args`, killing it after `limit`; asserts that it finished and
/// succeeded, sweeps stale shm files, and returns its stdout as JSON lines.
pub fn run_json(bin: &str, args: &[&str], limit: Duration) -> Vec<serde_json::Value> {
    let mut cmd = Command::new(bin);
    cmd.args(args);
    let run = run_bounded(cmd, limit);
    spindle_sst::transport::shm::remove_stale_files();
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    let status = run.status.unwrap_or_else(|| panic!("{bin} {args:?} did not finish within {limit:?}: {stderr}"));
    assert!(status.success(), "{bin} {args:?} failed: {stdout}\n{stderr}");
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a JSON line ({e}): {l}"))).collect()
}
