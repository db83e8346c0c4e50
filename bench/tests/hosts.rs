//! Across hosts: three network namespaces joined by a bridge (see `netns`), one
//! member per namespace started with no node id, no contact and no port. They must
//! find each other by discovery and form one group, deliver in one order, bring
//! back a member stalled past the failure timeout (SIGSTOP, then SIGCONT: it
//! rejoins by itself and goes on), and survive a kill -9.
//!
//! It needs root and `ip` (iproute2); where the machine cannot create namespaces
//! it says why and skips. Everything it creates is named after the test's pid and
//! removed on drop, also when it fails.

mod netns;

use netns::{read_log, Members, Net};
use std::collections::HashMap;
use std::time::Duration;

const N: usize = 3;

fn member_args(net: &Net, i: usize, log: &std::path::Path) -> Vec<String> {
    let mut a: Vec<String> =
        ["--child", "0", "--auto", "--ip", &Net::ip(i), "--name", &net.tag].iter().map(|s| s.to_string()).collect();
    a.extend(["--transport", "tcp", "--size", "32", "--rate", "300", "--heartbeat-ms", "50"].map(String::from));
    a.extend(["--failure-ms".into(), "400".into(), "--nodes".into(), N.to_string()]);
    a.extend(["--log".into(), log.display().to_string()]);
    a
}

/// Waits until every member of `from` runs a view of exactly `want` (node ids).
fn wait_view(m: &Members, latest: &mut HashMap<usize, Vec<u64>>, from: &[usize], want: &[u64]) {
    let mut want = want.to_vec();
    want.sort_unstable();
    if from.iter().all(|j| latest.get(j) == Some(&want)) {
        return;
    }
    let ok = m.watch(Duration::from_secs(60), |i, line| {
        assert!(!line.starts_with("FAILED"), "member {i}: {line}");
        if let Some(rest) = line.strip_prefix("VIEW ") {
            let mut ids: Vec<u64> = rest.split(',').filter_map(|x| x.parse().ok()).collect();
            ids.sort_unstable();
            latest.insert(i, ids);
        }
        from.iter().all(|j| latest.get(j) == Some(&want))
    });
    assert!(ok.is_some(), "no view {want:?} at {from:?}: {latest:?}");
}

#[test]
fn members_with_nothing_configured_find_each_other_across_namespaces() {
    let Some((net, dir, logs)) = netns::prepare("sh", "hosts", N) else { return };
    let mut m = Members::new();
    // All at once: discovery decides who starts the group.
    for (i, log) in logs.iter().enumerate() {
        m.spawn(&net, i, &member_args(&net, i, log));
    }
    let all: Vec<usize> = (0..N).collect();
    // Each says its id, then FULL once its view has every member (one watch: a
    // member's FULL may come before another's ID).
    let (mut ids, mut full) = (vec![None::<u64>; N], [false; N]);
    let mut latest: HashMap<usize, Vec<u64>> = HashMap::new();
    let met = m.watch(Duration::from_secs(60), |i, line| {
        assert!(!line.starts_with("FAILED"), "member {i}: {line}");
        if let Some(rest) = line.strip_prefix("VIEW ") {
            let mut v: Vec<u64> = rest.split(',').filter_map(|x| x.parse().ok()).collect();
            v.sort_unstable();
            latest.insert(i, v);
        }
        if let Some(x) = line.strip_prefix("ID ") {
            ids[i] = x.parse().ok();
        }
        full[i] |= line == "FULL";
        ids.iter().all(Option::is_some) && full.iter().all(|f| *f)
    });
    assert!(met.is_some(), "ids {ids:?}, full {full:?}");
    let ids: Vec<u64> = ids.into_iter().flatten().collect();
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), N, "distinct ids {ids:?}");
    // One group: every member's view is the three of them.
    wait_view(&m, &mut latest, &all, &ids);
    for i in 0..N {
        m.tell(i, "GO");
    }
    std::thread::sleep(Duration::from_secs(1));
    // Member 2 stalls past the failure timeout: the others go on without it.
    let pid = m.list[2].child.id();
    testkit::pause_process(pid, true).unwrap();
    let stalled = wait_view_guarded(&m, &mut latest, &[0, 1], &[ids[0], ids[1]]);
    testkit::pause_process(pid, false).unwrap();
    stalled.unwrap_or_else(|e| panic!("{e}"));
    // Continued, it rejoins by itself.
    m.expect("REJOINED", &[2], Duration::from_secs(60));
    wait_view(&m, &mut latest, &all, &ids);
    std::thread::sleep(Duration::from_secs(1));
    // kill -9 of member 1: the other two go on.
    let _ = m.list[1].child.kill();
    let _ = m.list[1].child.wait();
    wait_view(&m, &mut latest, &[0, 2], &[ids[0], ids[2]]);
    std::thread::sleep(Duration::from_secs(1));
    for i in [0, 2] {
        m.tell(i, "STOP");
    }
    m.expect("STOPPED", &[0, 2], Duration::from_secs(30));
    for i in [0, 2] {
        m.tell(i, "REPORT");
    }
    for (i, l) in m.expect("RESULT", &[0, 2], Duration::from_secs(60)) {
        assert!(l.starts_with("RESULT"), "member {i}: {l}");
    }
    drop(m);
    let reference = read_log(&logs[0]);
    assert!(!reference.is_empty());
    let skipped = bench::check_segments(&reference, &read_log(&logs[2])).unwrap_or_else(|e| panic!("member 2: {e}"));
    assert!(skipped > 0, "member 0 delivered while member 2 was out");
    let _ = std::fs::remove_dir_all(&dir);
}

/// [`wait_view`] that returns the failure instead of panicking (so that the caller
/// continues a stopped process first).
fn wait_view_guarded(
    m: &Members,
    latest: &mut HashMap<usize, Vec<u64>>,
    from: &[usize],
    want: &[u64],
) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wait_view(m, latest, from, want)))
        .map_err(|_| format!("no view {want:?} at {from:?} while member 2 was stopped"))
}
