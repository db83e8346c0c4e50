//! `Ack::Disk`, members as threads of this process over shm: appends are
//! acknowledged once a majority has them on disk, then every member stops at once
//! (its group shut down, nothing flushed or closed), and the log started again on
//! the same directories holds every acknowledged append, in order, and goes on.
//! Also: the log does not take appends while fewer than a majority of its
//! replicas are back. (The kill -9 version: `bench/tests/tailwind_restart.rs`.)

use spindle_tailwind::service::{Ack, Lsn, TailwindConfig, TailwindLog};
use spindle_views::config::{Config, Transport};
use std::path::PathBuf;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn member(name: &str, id: u32, contact: Option<std::net::SocketAddr>, dir: &PathBuf) -> TailwindLog {
    let mut b = Config::builder(id, testkit::free_control_addr())
        .name(name)
        .transport(Transport::Shm)
        .timeouts(Duration::from_millis(50), Duration::from_millis(500));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let mut cfg = TailwindConfig::new(dir);
    cfg.buffer = 16 * 1024; // segments rotate: some records in .tw files, the last ones in .open files
    cfg.ack = Ack::Disk;
    TailwindLog::start(b.build().unwrap(), cfg).unwrap()
}

fn record(i: u64) -> Vec<u8> {
    format!("durable record {i} ").repeat(1 + (i % 7) as usize).into_bytes()
}

#[test]
fn a_restart_of_every_member_keeps_every_acknowledged_append() {
    let name = format!("twd{}", std::process::id());
    let dirs = testkit::TempDirs::new(&name, 3);
    let n0 = member(&name, 0, None, &dirs[0]);
    let contact = n0.group().listen_addr();
    let logs = vec![n0, member(&name, 1, Some(contact), &dirs[1]), member(&name, 2, Some(contact), &dirs[2])];
    assert!(logs[0].group().wait_for_members(3, WAIT));
    assert!(logs[0].wait_for_primary(WAIT).is_some());
    let mut acked = Vec::new();
    for i in 0..250u64 {
        let at = if i % 5 == 0 { &logs[1] } else { &logs[0] }; // some forwarded
        assert_eq!(at.append(&record(i)).unwrap(), Lsn(i));
        acked.push(record(i));
    }
    let batch: Vec<Vec<u8>> = (250..300).map(record).collect();
    let refs: Vec<&[u8]> = batch.iter().map(|b| b.as_slice()).collect();
    logs[0].append_batch(&refs).unwrap();
    acked.extend(batch);
    // A reader sees acknowledged records only; here all of them.
    assert_eq!(logs[2].committed(), Some(Lsn(300)));
    // Every member stops at once: no segment is closed, nothing more is written.
    for l in &logs {
        l.group().shutdown();
    }
    drop(logs);
    spindle_sst::transport::shm::remove_stale_files();

    // Started again (another group name: the old one's files are gone). Member 0
    // alone does not take appends: a majority of the replicas must be back.
    let name = format!("{name}b");
    let n0 = member(&name, 0, None, &dirs[0]);
    assert_eq!(n0.wait_for_primary(Duration::from_millis(500)), None, "a third of the replicas recovered the log");
    let contact = n0.group().listen_addr();
    let logs = vec![n0, member(&name, 1, Some(contact), &dirs[1])];
    assert!(logs[0].wait_for_primary(WAIT).is_some(), "two of three recover it");
    let mut got: Vec<Vec<u8>> = logs[0].read_from(Lsn(0)).map(|r| r.unwrap().1).collect();
    assert!(got.len() >= acked.len());
    got.truncate(acked.len());
    assert_eq!(got, acked, "every acknowledged append, in order");
    let next = logs[1].append(b"after the restart").unwrap();
    assert_eq!(next, Lsn(300));
    let logs = {
        let mut l = logs;
        l.push(member(&name, 2, Some(contact), &dirs[2]));
        l
    };
    assert!(logs[0].group().wait_for_members(3, WAIT));
    acked.push(b"after the restart".to_vec());
    assert!(testkit::poll_until(WAIT, Duration::from_millis(20), || {
        logs[2].wait_for_primary(Duration::from_millis(100)).is_some()
            && logs[2].read_from(Lsn(0)).map_while(Result::ok).map(|r| r.1).collect::<Vec<_>>() == acked
    }));
    drop(logs);
}
