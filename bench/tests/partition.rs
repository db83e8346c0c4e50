//! A network partition between namespaces this test creates (see `netns`): the
//! majority side goes on; the minority side finds itself a minority, leaves its
//! view and waits to be taken back; when the partition heals it rejoins by itself.
//! Nothing delivered diverges: the majority delivered one sequence, and each
//! minority member delivered contiguous pieces of it, in order, with a gap only
//! where it rejoined.
//!
//! It needs root, `ip` (iproute2) and `nft` (nftables); where the machine cannot
//! create namespaces it says why and skips. Everything it creates is named after the
//! test's pid and removed on drop, also when it fails.

mod netns;

use netns::{read_log, Members, Net};
use std::time::Duration;

const N: usize = 5;
const MINORITY: [usize; 2] = [3, 4];

fn member_args(net: &Net, i: usize, log: &std::path::Path) -> Vec<String> {
    let mut a: Vec<String> = ["--child", &i.to_string(), "--port", "7100", "--ip", &Net::ip(i), "--name", &net.tag]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(["--transport", "tcp", "--size", "32", "--rate", "300"].map(String::from));
    a.extend(["--nodes".into(), N.to_string(), "--heartbeat-ms".into(), "50".into(), "--failure-ms".into()]);
    a.extend(["400".into(), "--log".into(), log.display().to_string()]);
    if i > 0 {
        a.extend(["--contact".into(), format!("{}:7100", Net::ip(0))]);
    }
    a
}

#[test]
fn majority_goes_on_minority_rejoins_when_healed_nothing_diverges() {
    let Some((net, dir, logs)) = netns::prepare("sp", "partition", N) else { return };
    let mut m = Members::new();
    m.spawn(&net, 0, &member_args(&net, 0, &logs[0]));
    let j = m.expect("JOINED", &[0], Duration::from_secs(30));
    assert!(j[0].1.starts_with("JOINED"), "{j:?}");
    for (i, log) in logs.iter().enumerate().skip(1) {
        m.spawn(&net, i, &member_args(&net, i, log));
    }
    let all: Vec<usize> = (0..N).collect();
    for (i, l) in m.expect("FULL", &all, Duration::from_secs(60)) {
        assert!(l.starts_with("FULL"), "member {i}: {l}");
    }
    for i in 0..N {
        m.tell(i, "GO");
    }
    std::thread::sleep(Duration::from_secs(1));
    net.partition(&MINORITY).expect("nftables rules");
    // The minority side leaves its view on its own, as a minority (majority rule).
    for (i, l) in m.expect("REMOVED", &MINORITY, Duration::from_secs(30)) {
        assert!(l.contains("minority"), "member {i} should leave its view as a minority: {l}");
    }
    // The majority side goes on sending and delivering meanwhile.
    std::thread::sleep(Duration::from_secs(2));
    net.heal().expect("remove the cut");
    // Healed: the minority joins again by itself, and every member runs a view of all.
    let mut latest = vec![Vec::<u64>::new(); N];
    let mut rejoined = [false; N];
    let back = m.watch(Duration::from_secs(60), |i, line| {
        if let Some(rest) = line.strip_prefix("VIEW ") {
            latest[i] = rest.split(',').filter_map(|x| x.parse().ok()).collect();
        }
        rejoined[i] |= line.starts_with("REJOINED");
        assert!(!line.starts_with("FAILED"), "member {i}: {line}");
        MINORITY.iter().all(|j| rejoined[*j]) && latest.iter().all(|v| v.len() == N)
    });
    assert!(back.is_some(), "the minority did not rejoin after the heal: {latest:?} {rejoined:?}");
    std::thread::sleep(Duration::from_secs(1));
    for i in 0..N {
        m.tell(i, "STOP");
    }
    for (i, l) in m.expect("STOPPED", &all, Duration::from_secs(30)) {
        assert!(l.starts_with("STOPPED"), "member {i}: {l}");
    }
    for i in 0..N {
        m.tell(i, "REPORT");
    }
    let results = m.expect("RESULT", &all, Duration::from_secs(60));
    for (i, l) in &results {
        let json = l.strip_prefix("RESULT").unwrap_or_else(|| panic!("member {i}: {l}"));
        let r: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
        assert_eq!(r["members"].as_array().map(|a| a.len()), Some(N), "member {i}: {r}");
        // The minority once at least (a loaded machine can remove a member once
        // more after it came back); the majority never, which its logs check too.
        let rejoins = r["rejoins"].as_u64().unwrap_or(u64::MAX);
        match MINORITY.contains(i) {
            true => assert!((1..u64::MAX).contains(&rejoins), "member {i}: {r}"),
            false => assert_eq!(rejoins, 0, "member {i}: {r}"),
        }
    }
    drop(m);
    let reference = read_log(&logs[0]);
    for i in (0..N).filter(|i| !MINORITY.contains(i)) {
        assert_eq!(read_log(&logs[i]), reference, "member {i} delivered the same sequence");
    }
    for i in MINORITY {
        let skipped = bench::check_segments(&reference, &read_log(&logs[i]))
            .unwrap_or_else(|e| panic!("member {i} diverged: {e}"));
        assert!(skipped > 0, "member {i}: the majority delivered while the minority was cut off");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
