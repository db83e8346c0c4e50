//! A sharded key-value store's member processes killed with SIGKILL in the
//! middle of live migrations (`kv_chaos`): the primary of the range's new shard
//! in one round, of its old shard in the next, each time started again from its
//! own directory. Every migration must end by itself, every acknowledged put
//! read back, each key's recorded history be linearizable, and the
//! stores of each shard be held by its log's two replicas only and agree once
//! the writes stop (shm and tcp).
//!
//! Bounded: `kv_chaos` waits at most 60 s for each step, and this test kills it
//! after 240 s; its members die with it (parent-death signal) and their /dev/shm
//! files are swept. The longer run: `scripts/kv-chaos.sh`.

mod common;

use std::time::Duration;

fn kills(transport: &str, rounds: usize, seed: &str) {
    let args = ["--transport", transport, "--rounds", &rounds.to_string(), "--seed", seed, "--json"];
    let lines = common::run_json(env!("CARGO_BIN_EXE_kv_chaos"), &args, Duration::from_secs(240));
    let (summary, each) = lines.split_last().expect("JSON lines");
    assert_eq!(each.len(), rounds, "{lines:?}");
    for r in each {
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["lost"], 0, "{r}");
        assert_eq!(r["linearizable"], true, "{r}");
        assert_eq!(r["stores_agree"], true, "{r}");
        assert!(r["history_ops"].as_u64().is_some_and(|n| n > 0), "{r}");
        assert!(r["writes"].as_u64().is_some_and(|n| n > 0), "{r}");
    }
    let roles: Vec<&str> = each.iter().filter_map(|r| r["role"].as_str()).collect();
    assert!(roles.contains(&"source") && roles.contains(&"target"), "both primaries were killed: {roles:?}");
    // The kill waits for the pull's first batch: a pull as fast as the kill is
    // ordered could end first in a round, not in all of them.
    assert!(summary["killed_mid_pull"].as_u64().is_some_and(|n| n >= 1), "{summary}");
    assert_eq!(summary["passed"].as_u64(), Some(rounds as u64), "{summary}");
}

#[test]
fn kills_mid_migration_over_shm_lose_nothing() {
    kills("shm", 4, "1");
}

#[test]
fn kills_mid_migration_over_tcp_lose_nothing() {
    kills("tcp", 2, "2");
}
