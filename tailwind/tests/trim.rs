//! Trimming a log: the segments before a point go at every member, reads from
//! there on go on, reads before report a gap, a failover does not bring trimmed
//! segments back, and a member started again on its directory keeps its floor
//! (over shm). Also the log's figures (`metrics`, `replica_lag`).

use spindle_tailwind::service::{LogService, Lsn, ReadError, TailwindConfig, TailwindLog, LOG_REGIONS};
use spindle_views::config::{Config, Transport};
use std::path::PathBuf;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn cfg(dir: &PathBuf) -> TailwindConfig {
    let mut c = TailwindConfig::new(dir);
    c.buffer = 8 * 1024; // small, so that segments rotate
    c
}

fn member(name: &str, id: u32, contact: Option<std::net::SocketAddr>, dir: &PathBuf) -> TailwindLog {
    let mut b = Config::builder(id, testkit::free_control_addr())
        .name(name)
        .transport(Transport::Shm)
        .timeouts(Duration::from_millis(50), Duration::from_millis(400));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    TailwindLog::start(b.build().unwrap(), cfg(dir)).unwrap()
}

fn record(i: u64) -> Vec<u8> {
    format!("record {i} ").repeat(20).into_bytes()
}

fn files(dir: &PathBuf) -> usize {
    std::fs::read_dir(dir).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".tw")).count()
}

#[test]
fn trimmed_segments_go_everywhere_and_stay_gone() {
    let name = format!("twt{}", std::process::id());
    let dirs = testkit::TempDirs::new(&name, 3);
    let n0 = member(&name, 0, None, &dirs[0]);
    let contact = n0.group().listen_addr();
    let mut logs = vec![Some(n0)];
    for i in 1..3 {
        logs.push(Some(member(&name, i, Some(contact), &dirs[i as usize])));
    }
    let p = logs[0].as_ref().unwrap();
    assert!(p.group().wait_for_members(3, WAIT));
    assert_eq!(p.wait_for_primary(WAIT), Some(p.node()));
    for i in 0..200 {
        assert_eq!(p.append(&record(i)).unwrap(), Lsn(i));
    }
    for l in logs.iter().flatten() {
        assert!(l.wait_flushed(WAIT));
    }
    // The primary's figures, and its backups' commit points (the same: shm).
    let m = p.metrics();
    let bytes: usize = (0..200).map(|i| record(i).len()).sum();
    assert_eq!(
        (m.appended, m.batches, m.bytes, m.committed, m.primary),
        (200, 200, bytes as u64, Some(Lsn(200)), true)
    );
    assert!(m.segments >= 5 && m.segment_bytes > bytes as u64 / 2, "{m:?}");
    assert!(!logs[1].as_ref().unwrap().metrics().primary);
    assert_eq!(p.replica_lag(WAIT).len(), 3);
    assert!(p.replica_lag(WAIT).iter().all(|(_, lag)| *lag == 0), "{:?}", p.replica_lag(WAIT));
    let before: Vec<usize> = dirs.iter().map(files).collect();
    assert!(before.iter().all(|n| *n >= 5), "segments rotated: {before:?}");
    // Past the commit point: refused.
    assert!(p.trim(Lsn(10_000)).is_err());
    // Trimmed at a backup's call: every member drops the segments ending by 100.
    let removed = logs[1].as_ref().unwrap().trim(Lsn(100)).unwrap();
    assert!(removed >= 2, "{removed}");
    for (i, l) in logs.iter().flatten().enumerate() {
        assert_eq!(l.trimmed(), Lsn(100));
        let segs = l.segments();
        assert!(segs.iter().all(|(id, n)| id.segment + n > 100), "member {i}: {segs:?}");
        assert_eq!(files(&dirs[i]), before[i] - removed, "member {i}'s files");
        let first = segs.first().map(|(id, _)| id.segment).unwrap();
        assert!(first <= 100);
        assert!(matches!(l.read_from(Lsn(0)).next(), Some(Err(ReadError::Gap(_)))), "member {i}");
        let rest: Vec<Vec<u8>> = l.read_from(Lsn(first)).map(|r| r.unwrap().1).collect();
        assert_eq!(rest, (first..200).map(record).collect::<Vec<_>>(), "member {i}");
    }
    // The primary fails: the new one recovers without the trimmed segments.
    logs[0].take().unwrap().group().shutdown();
    let n1 = logs[1].as_ref().unwrap();
    assert!(testkit::poll_until(WAIT, Duration::from_millis(10), || n1.is_primary()));
    assert_eq!(n1.append(b"after").unwrap(), Lsn(200));
    for l in logs.iter().flatten() {
        assert!(l.segments().iter().all(|(id, n)| id.segment + n > 100), "{:?}", l.segments());
    }
    // Member 2 stops; its directory, opened again, keeps the floor.
    let segs2 = logs[2].as_ref().unwrap().segments();
    drop(logs.remove(2));
    let again = LogService::new(spindle_sst::transport::NodeId(2), cfg(&dirs[2]), LOG_REGIONS, |_| Vec::new()).unwrap();
    assert_eq!(again.trimmed(), Lsn(100));
    assert_eq!(again.segments(), segs2);
    drop(again);
    drop(logs);
}
