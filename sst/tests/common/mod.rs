//! Test helpers over `testkit`: groups on any transport, in one process or as
//! child processes of the test binary, with deadlines and cleanup.
#![allow(dead_code, missing_docs)]

use spindle_sst::sync::Arc;
use spindle_sst::transport::{NodeId, PeerEvent, RegionSpec, Transport};
use std::process::Command;
use std::time::Duration;
pub use testkit::TransportKind as Kind;
use testkit::{ChildSet, LocalGroup};

pub const SETUP: Duration = Duration::from_secs(20);

pub fn ids(n: usize) -> Vec<NodeId> {
    (0..n as u32).map(NodeId).collect()
}

/// `n` nodes in this process.
pub fn group(kind: Kind, n: usize, regions: &[RegionSpec]) -> LocalGroup {
    testkit::local_group(kind, n, regions, SETUP).expect("group setup")
}

/// Polls `f` until it returns true or `within` passes; returns whether it did.
pub fn eventually(within: Duration, f: impl FnMut() -> bool) -> bool {
    testkit::poll_until(within, Duration::from_micros(200), f)
}

/// Waits for a Broken event about `peer` on `t` (flushing, so tcp acks and errors move).
pub fn wait_broken(t: &dyn Transport, peer: NodeId, within: Duration) -> bool {
    let mut evs = Vec::new();
    eventually(within, || {
        t.flush();
        t.drain_events(&mut evs);
        evs.iter().any(|PeerEvent::Broken { peer: p, .. }| *p == peer)
    })
}

/// Starts `n` children running the ignored test `entry` of this binary.
pub fn children(entry: &str, kind: Kind, n: usize, env: &[(&str, String)], deadline: Duration) -> ChildSet {
    let exe = std::env::current_exe().unwrap();
    let command = |_| {
        let mut c = Command::new(&exe);
        c.args([entry, "--exact", "--ignored", "--nocapture", "--test-threads=1"]);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    };
    ChildSet::start(command, kind, n, deadline).expect("children set up")
}

/// In a child: this node's transport.
pub fn child_transport(regions: &[RegionSpec]) -> (NodeId, usize, Arc<dyn Transport>) {
    testkit::child_transport(regions, SETUP).expect("child transport")
}
