//! Safe retries and conditional appends, members as threads of this process:
//! a tagged append tried again lands once (at the primary, forwarded from a
//! backup, and after a failover in which the first try reached every backup
//! without being acknowledged), out-of-order numbers are refused, and
//! `append_if` appends only at the expected number (over shm and tcp).

use spindle_sst::transport::RegionId;
use spindle_tailwind::format::{scan, Appender, BufLen, Tag};
use spindle_tailwind::service::{AppendError, Lsn, TailwindConfig, TailwindLog, LOG_REGIONS};
use spindle_views::config::{Config, Transport};
use std::path::PathBuf;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn member(name: &str, id: u32, contact: Option<std::net::SocketAddr>, t: Transport, dir: &PathBuf) -> TailwindLog {
    let mut b = Config::builder(id, testkit::free_control_addr())
        .name(name)
        .transport(t)
        .timeouts(Duration::from_millis(50), Duration::from_millis(400));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    TailwindLog::start(b.build().unwrap(), TailwindConfig::new(dir)).unwrap()
}

fn read_all(log: &TailwindLog) -> Vec<Vec<u8>> {
    log.read_from(Lsn(0)).map(|r| r.unwrap().1).collect()
}

/// Writes one more valid record, tagged, into `log`'s open buffer, as a primary
/// that died before acknowledging it would have.
fn inject(log: &TailwindLog, data: &[u8], tag: Tag) {
    let (_, t) = log.group().transport().unwrap();
    let open: Vec<_> = (0..2)
        .map(|i| t.region(RegionId(LOG_REGIONS + i)).unwrap().clone())
        .filter(|r| {
            let mut b = vec![0u8; r.len()];
            r.read_bytes(0, &mut b);
            !scan(&b).records.is_empty()
        })
        .collect();
    assert_eq!(open.len(), 1, "one open buffer with records");
    let mut bytes = vec![0u8; open[0].len()];
    open[0].read_bytes(0, &mut bytes);
    let mut a = Appender::resume(BufLen(bytes.len()), &scan(&bytes));
    let at = a.end().0;
    let done = a.append_tagged(&mut bytes, data, Some(tag)).unwrap();
    open[0].write_bytes(at, &bytes[at..done.end.0]);
}

fn retries(t: Transport) {
    let name = format!("twr{}{}", std::process::id(), t as u8);
    let dirs = testkit::TempDirs::new(&name, 3);
    let n0 = member(&name, 0, None, t, &dirs[0]);
    let contact = n0.group().listen_addr();
    let mut logs = vec![Some(n0)];
    for i in 1..3 {
        logs.push(Some(member(&name, i, Some(contact), t, &dirs[i as usize])));
    }
    let p = logs[0].as_ref().unwrap();
    assert!(p.group().wait_for_members(3, WAIT));
    assert_eq!(p.wait_for_primary(WAIT), Some(p.node()));
    let mut want: Vec<Vec<u8>> = Vec::new();
    // Tried three times, at the primary and forwarded from a backup: once.
    let first = p.append_once(7, 0, b"seven-0").unwrap();
    assert_eq!(p.append_once(7, 0, b"seven-0").unwrap(), first);
    assert_eq!(logs[2].as_ref().unwrap().append_once(7, 0, b"seven-0").unwrap(), first);
    want.push(b"seven-0".to_vec());
    // Untagged appends and another producer in between; a batch tried twice.
    p.append(b"plain").unwrap();
    want.push(b"plain".to_vec());
    let batch = p.append_batch_once(8, 10, &[b"eight-10", b"eight-11"]).unwrap();
    assert_eq!(logs[1].as_ref().unwrap().append_batch_once(8, 10, &[b"eight-10", b"eight-11"]).unwrap(), batch);
    want.extend([b"eight-10".to_vec(), b"eight-11".to_vec()]);
    // Out of order: half a batch again, or a number below the newest.
    assert!(matches!(p.append_batch_once(8, 11, &[b"x", b"y"]), Err(AppendError::Sequence(_))));
    assert!(matches!(logs[1].as_ref().unwrap().append_once(8, 3, b"old"), Err(AppendError::Sequence(_))));
    // Conditional appends, at the primary and forwarded.
    let next = Lsn(want.len() as u64);
    match logs[2].as_ref().unwrap().append_if(Lsn(0), &[b"stale view"]) {
        Err(AppendError::Conflict { next: n }) => assert_eq!(n, next),
        other => panic!("{other:?}"),
    }
    assert_eq!(logs[2].as_ref().unwrap().append_if(next, &[b"if"]).unwrap(), vec![next]);
    assert!(matches!(p.append_if(next, &[b"if again"]), Err(AppendError::Conflict { .. })));
    want.push(b"if".to_vec());
    assert_eq!(read_all(p), want);

    // The primary wrote producer 9's record 0 to both backups and died before
    // acknowledging it: the caller saw an error and tries again at the new
    // primary, which finds it in the log it recovered.
    for i in [1, 2] {
        inject(logs[i].as_ref().unwrap(), b"nine-0", Tag { producer: 9, seq: 0 });
    }
    logs[0].take().unwrap().group().shutdown();
    let n1 = logs[1].as_ref().unwrap();
    assert!(testkit::poll_until(WAIT, Duration::from_millis(10), || n1.is_primary()), "{t:?}: no takeover");
    let at = n1.append_once(9, 0, b"nine-0").unwrap();
    assert_eq!(at, Lsn(want.len() as u64), "{t:?}: the first try's record");
    want.push(b"nine-0".to_vec());
    // Producer 7 and 8's numbers survived the failover too.
    assert_eq!(n1.append_once(7, 0, b"seven-0").unwrap(), first);
    assert_eq!(logs[2].as_ref().unwrap().append_batch_once(8, 10, &[b"eight-10", b"eight-11"]).unwrap(), batch);
    let n = n1.append_once(9, 1, b"nine-1").unwrap();
    assert_eq!(n, Lsn(want.len() as u64));
    want.push(b"nine-1".to_vec());
    for l in logs.iter().flatten() {
        assert_eq!(read_all(l), want, "{t:?} at {}", l.node());
    }
}

#[test]
fn retries_land_once_over_shm() {
    retries(Transport::Shm);
}

#[test]
fn retries_land_once_over_tcp() {
    retries(Transport::Tcp);
}
