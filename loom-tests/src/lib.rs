//! loom models of spindle's lock-free protocols live in `tests/` and compile only with
//! `--cfg loom` (see the README's test section). This library holds what they share.
#![forbid(unsafe_code)]

/// Runs the ignored test `name` of the current test binary in a child process and
/// asserts that it failed with `expect` in its output.
///
/// loom reports some failures (a deadlock, a panic while another model thread is alive)
/// by panicking during unwinding, which aborts the process; `#[should_panic]` cannot
/// catch that, so a buggy variant that must fail runs in its own process.
pub fn expect_failure_in_child(name: &str, expect: &str) {
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([name, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .output()
        .expect("run the buggy variant");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{name} passed: loom did not catch the bug");
    assert!(text.contains(expect), "{name} failed, but not with {expect:?}:\n{text}");
}
