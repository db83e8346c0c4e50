#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod certs;
mod children;
mod kind;
mod lines;
mod local;
mod net;
pub mod netns;
mod os;
mod temp;

pub use children::{
    child_transport, child_transport_with, is_child, wait_for_parent, ChildSet, ClusterError, BIND_VAR,
};
pub use kind::TransportKind;
pub use lines::LineChild;
pub use local::{local_group, unique_group, LocalGroup};
pub use net::{free_control_addr, free_ports};
pub use os::{catch_interrupts, cpu_time, die_with_parent, interrupted, pause_process, CpuClock};
pub use temp::TempDirs;

use std::time::{Duration, Instant};

/// True if this process runs as root (effective uid 0): what tests that create
/// namespaces or mount file systems need.
pub fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(2));
    euid == Some("0")
}

/// Polls `f` every `step` until it returns true or `within` passes; returns whether
/// it did. The bounded wait that tests, benchmarks and demos use instead of spinning.
pub fn poll_until(within: Duration, step: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(step);
    }
}

/// A number from environment variable `name` (the simulators' seed counts and
/// replays), if set; panics, naming it, if it is set to something else.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name} must be a number")))
}

/// The path of example `name` of the package under test: `cargo test` builds a
/// package's examples beside its tests (`target/<profile>/examples`). Panics,
/// saying how to build it, if it is not there.
pub fn example_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("the test runs from target/<profile>/deps");
    let path = dir.join("examples").join(name);
    assert!(path.exists(), "{} is missing: `cargo test` of its package builds it", path.display());
    path
}
