//! A `/dev/shm` too small for a group's rings or arenas: the sender's send fails,
//! by name, instead of the process dying of `SIGBUS` at its first write into a
//! page the file system has no room for.
//!
//! `bandwidth` runs in a mount namespace of its own (`unshare -m`) whose `/dev/shm`
//! is a fresh tmpfs of a given size: 1 MiB is less than one sender's 2 MiB ring, 16
//! MiB is plenty for 128 B messages (the control: the same command passes there),
//! 8 MiB is less than a sender's arena of large messages. The namespace, its
//! tmpfs and every file in it end with the processes. Needs root and `unshare`;
//! where they are missing the test says so on stderr and checks nothing.

mod common;

use std::process::Command;
use std::time::Duration;

/// Why this machine cannot run the test, if it cannot.
fn unavailable() -> Option<String> {
    if !testkit::is_root() {
        return Some("needs root to mount a tmpfs in a mount namespace".into());
    }
    let probe = Command::new("unshare").args(["-m", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        return Some("`unshare -m` is not available".into());
    }
    None
}

/// Runs `bandwidth` with a `/dev/shm` of `size` (tmpfs syntax, e.g. `1m`) and
/// `args`; its exit code (`None`: killed by a signal) and stderr.
fn run_with_shm(size: &str, args: &str) -> (Option<i32>, String) {
    run_program(env!("CARGO_BIN_EXE_bandwidth"), size, &format!("--nodes 2 --senders one {args} --json"))
}

/// Runs `program --transport shm args` with a `/dev/shm` of `size`: its exit code
/// and stderr. Fails the test if it does not end within 120 s.
fn run_program(program: &str, size: &str, args: &str) -> (Option<i32>, String) {
    let script = format!("mount -t tmpfs -o size={size} tmpfs /dev/shm && exec \"$0\" --transport shm {args}");
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "sh", "-c", &script, program]);
    let run = common::run_bounded(cmd, Duration::from_secs(120));
    let status = run.status.unwrap_or_else(|| panic!("{program} with a {size} /dev/shm did not end within 120 s"));
    (status.code(), run.stderr)
}

/// True if the machine can run these tests; else says why on stderr.
fn available() -> bool {
    let why = unavailable();
    if let Some(why) = &why {
        eprintln!("shm_full test skipped: {why}");
    }
    why.is_none()
}

/// `program` with `args` in a `/dev/shm` of `size` exits with code 1 and names the
/// reservation that found no room, with `said` (what failed) before it.
fn stops_by_name(program: &str, size: &str, args: &str, said: &str) {
    let (code, err) = run_program(program, size, args);
    assert_eq!(code, Some(1), "{program} {args} with a {size} /dev/shm should stop, not crash: {err}");
    assert!(err.contains(&format!("{said}cannot reserve")), "the reason, by name: {err}");
    assert!(err.contains("no room left") && err.contains("/dev/shm"), "what to enlarge: {err}");
}

#[test]
fn a_dev_shm_too_small_for_the_ring_is_a_send_error_not_a_crash() {
    if !available() {
        return;
    }
    let small = "--size 128 --count 200000";
    // The control: the same run where /dev/shm has room.
    let (code, err) = run_with_shm("16m", small);
    assert_eq!(code, Some(0), "with a 16 MiB /dev/shm: {err}");
    let bandwidth = env!("CARGO_BIN_EXE_bandwidth");
    stops_by_name(bandwidth, "1m", &format!("--nodes 2 --senders one {small}"), "cannot send: ");
}

/// Large messages go through the sender's arena (64 MiB here), which is reserved
/// as payloads first reach its pages: past the room an 8 MiB `/dev/shm` leaves
/// after the ring, a send fails by name instead of the sender dying of `SIGBUS`
/// in the copy of the payload.
#[test]
fn a_full_dev_shm_under_the_arena_is_a_send_error_not_a_crash() {
    if available() {
        let args = "--nodes 2 --senders one --size 65536 --count 2000 --fill";
        stops_by_name(env!("CARGO_BIN_EXE_bandwidth"), "8m", args, "cannot send: ");
    }
}

/// A Tailwind log's buffers are written at its backups by the primary's one-sided
/// writes: a member that holds the log reserves them when the view starts, so a
/// `/dev/shm` without room for its 8 MiB buffers stops that member by name at
/// setup instead of the primary dying of `SIGBUS` in a write into the backup.
#[test]
fn a_full_dev_shm_under_a_logs_buffers_is_a_setup_error_not_a_crash() {
    if available() {
        stops_by_name(env!("CARGO_BIN_EXE_tailwind_bench"), "16m", "--sizes 100 --seconds 1", "");
    }
}
