//! # testkit: the harness for tests, benchmarks and demos
//!
//! Not part of the product: no product crate depends on it outside its tests. It runs
//! a group of nodes on one host, as threads of this process ([`local_group`]) or as
//! child processes ([`ChildSet`]), and has the small helpers every multi-node test
//! needs: bounded waits ([`poll_until`]), CPU clocks ([`cpu_time`]), free loopback
//! ports ([`free_ports`]) and clean shutdown on Ctrl-C ([`catch_interrupts`]).
//!
//!
//! A parent starts `n` children with [`ChildSet::start`]; each child calls
//! [`child_transport`], which builds its transport from the environment the parent set
//! (`SPINDLE_CHILD_KIND`, `_ME`, `_N`, `_GROUP`). They talk over the children's stdio:
//!
//! ```text
//!   child:  ADDR 127.0.0.1:port   (tcp; it bound port 0)   or   READY   (shm)
//!   parent: addr0,addr1,...       (one line to every child)
//!   child:  JOINED                (its transport is set up)
//!   parent: GO                    (all are: setup is not a barrier by itself)
//!   child:  ... RESULT <text>     (whatever the program reports)
//! ```
//!
//! Markers are found anywhere in a line (a test harness may print before them).
//! Dropping a [`ChildSet`] kills its children and removes the group's `/dev/shm`
//! files; [`interrupted`] lets a parent notice Ctrl-C and clean up the same way, and
//! [`die_with_parent`] makes a child exit if its parent is killed.
#![forbid(unsafe_code)]

mod children;
mod kind;
mod local;
mod net;
mod os;

pub use children::{child_transport, is_child, wait_for_parent, ChildSet, ClusterError};
pub use kind::TransportKind;
pub use local::{local_group, unique_group, LocalGroup};
pub use net::{free_control_addr, free_ports};
pub use os::{catch_interrupts, cpu_time, die_with_parent, interrupted, CpuClock};

use std::time::{Duration, Instant};


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
