//! The log as a group service, members as threads of this process: appends are
//! acknowledged once every backup holds them, segments rotate when buffers fill,
//! a crashed primary is replaced and its successor's log holds every acknowledged
//! record in order, a member that replaces a failed one is re-seeded, and appends
//! forwarded from a backup land in the same log (over shm and tcp).

use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_sst::transport::{NodeId, RegionId};
use spindle_tailwind::format::{scan, Appender, BufLen};
use spindle_tailwind::service::{
    AppendError, Lsn, ReadError, Recovery, Tail, TailStream, TailwindConfig, TailwindLog, LOG_REGIONS,
};
use spindle_views::config::{Config, Transport};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn record(i: u64) -> Vec<u8> {
    let len = 8 + (i * 53 % 400) as usize;
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect::<Vec<u8>>()
}

fn member(name: &str, id: u32, contact: Option<std::net::SocketAddr>, t: Transport, dir: &PathBuf) -> TailwindLog {
    let mut b = Config::builder(id, testkit::free_control_addr())
        .name(name)
        .transport(t)
        .timeouts(Duration::from_millis(50), Duration::from_millis(400));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let mut cfg = TailwindConfig::new(dir);
    cfg.buffer = 8 * 1024; // small, so that segments rotate
    TailwindLog::start(b.build().unwrap(), cfg).unwrap()
}

fn read_all(log: &TailwindLog) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (i, r) in log.read_from(Lsn(0)).enumerate() {
        let (lsn, bytes) = r.unwrap();
        assert_eq!(lsn, Lsn(i as u64));
        out.push(bytes);
    }
    out
}

/// Pulls `n` more records from a tail (bounded), checking their numbers.
fn pull(tail: &mut Tail, n: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while out.len() < n {
        let want = tail.next_lsn();
        let (lsn, bytes) = tail.next_within(WAIT).expect("a committed record in time").unwrap();
        assert_eq!(lsn, want);
        out.push(bytes);
    }
    out
}

/// Pulls `n` more records from a tail stream within the test's deadline (the
/// stream is polled on a thread of its own, as an executor would), checking
/// their numbers go on from `from`; gives the stream back.
fn pull_stream(stream: TailStream, from: u64, n: usize) -> (TailStream, Vec<Vec<u8>>) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut it = futures::executor::block_on_stream(stream);
        let got: Vec<_> = it.by_ref().take(n).collect();
        let _ = tx.send((it.into_inner(), got));
    });
    let (stream, got) = rx.recv_timeout(WAIT).expect("the stream's records in time");
    let mut out = Vec::new();
    for (i, r) in got.into_iter().enumerate() {
        let (lsn, bytes) = r.unwrap();
        assert_eq!(lsn, Lsn(from + i as u64));
        out.push(bytes);
    }
    (stream, out)
}

fn failover(t: Transport) {
    let name = format!("tws{}{}", std::process::id(), t as u8);
    let dirs = testkit::TempDirs::new(&name, 4);
    let n0 = member(&name, 0, None, t, &dirs[0]);
    let contact = n0.group().listen_addr();
    let mut logs: Vec<Option<TailwindLog>> = vec![Some(n0)];
    for i in 1..4 {
        logs.push(Some(member(&name, i, Some(contact), t, &dirs[i as usize])));
    }
    assert!(logs[0].as_ref().unwrap().group().wait_for_members(4, WAIT));
    // Who recovered what (a member is primary before its hook runs: wait for it).
    let recovered: Arc<Mutex<Vec<(NodeId, Recovery)>>> = Arc::default();
    for l in logs.iter().flatten() {
        let (r, node) = (recovered.clone(), l.node());
        l.on_recovered(move |rec| r.lock().unwrap().push((node, rec.clone())));
    }
    let p = logs[0].as_ref().unwrap();
    assert_eq!(p.wait_for_primary(WAIT), Some(p.node()));
    // Tailing readers at the primary and both backups, from the start.
    let mut tails: Vec<Tail> = (0..3).map(|i| logs[i].as_ref().unwrap().subscribe(Lsn(0))).collect();
    assert!(tails[1].next_within(Duration::from_millis(20)).is_none(), "nothing committed yet");
    // And one as a futures::Stream at a backup.
    let stream = logs[2].as_ref().unwrap().subscribe(Lsn(0)).into_stream().unwrap();
    // 150 records of up to 400 bytes: several 8 KB segments.
    let mut acked = Vec::new();
    for i in 0..150 {
        let lsn = p.append(&record(i)).unwrap();
        assert_eq!(lsn, Lsn(i), "{t:?}");
        acked.push(record(i));
    }
    let batch: Vec<Vec<u8>> = (150..170).map(record).collect();
    let refs: Vec<&[u8]> = batch.iter().map(|b| b.as_slice()).collect();
    assert_eq!(p.append_batch(&refs).unwrap(), (150..170).map(Lsn).collect::<Vec<_>>());
    acked.extend(batch);
    assert!(p.segments().len() >= 3, "segments rotated: {:?}", p.segments());
    // The primary and its two backups hold it all; member 3 holds nothing.
    for (i, l) in logs.iter().take(3).enumerate() {
        assert_eq!(read_all(l.as_ref().unwrap()), acked, "{t:?} member {i}");
    }
    assert!(logs[3].as_ref().unwrap().segments().is_empty());
    assert_eq!(logs[3].as_ref().unwrap().wait_for_primary(WAIT), Some(p.node()), "told, though outside the log");
    // An append at a backup is forwarded to the primary, which counts it among
    // the appends it took for the others (what a reader there also waits for).
    let before = p.others();
    assert_eq!((before.busy, before.last), (0, None), "nothing forwarded yet");
    assert!(before.views >= 1, "a view started at the primary");
    let lsn = logs[1].as_ref().unwrap().append(b"from a backup").unwrap();
    assert_eq!(lsn, Lsn(170));
    let after = p.others();
    assert_eq!((after.busy, after.last, after.views), (0, Some(lsn), before.views));
    acked.push(b"from a backup".to_vec());
    // Too large for a buffer: a clear error, nothing lost.
    let e = p.append(&vec![7u8; 9000]).unwrap_err();
    assert!(matches!(e, AppendError::TooLarge { .. }), "{e}");

    // Each tail showed every acknowledged record once, in order, across the
    // segments that rotated meanwhile.
    for (i, tail) in tails.iter_mut().enumerate() {
        assert_eq!(pull(tail, acked.len()), acked, "{t:?} tail at member {i}");
    }
    assert_eq!(logs[2].as_ref().unwrap().committed(), Some(Lsn(171)));
    let (stream, got) = pull_stream(stream, 0, acked.len());
    assert_eq!(got, acked, "{t:?} stream at member 2");
    // Not a replica: nothing to tail there.
    let mut outside = logs[3].as_ref().unwrap().subscribe(Lsn(0));
    assert!(matches!(outside.next_within(WAIT), Some(Err(ReadError::NotReplica))));

    // A write that reached one backup only (the primary died between its writes):
    // put one more valid record in member 1's open buffer, as the primary would.
    let n1 = logs[1].as_ref().unwrap();
    assert!(n1.wait_flushed(WAIT));
    let (_, t1) = n1.group().transport().unwrap();
    let open: Vec<_> = (0..2)
        .map(|i| t1.region(RegionId(LOG_REGIONS + i)).unwrap().clone())
        .filter(|r| {
            let mut b = vec![0u8; r.len()];
            r.read_bytes(0, &mut b);
            !scan(&b).records.is_empty()
        })
        .collect();
    assert_eq!(open.len(), 1, "one open buffer with records, the other flushed and zeroed");
    let mut bytes = vec![0u8; open[0].len()];
    open[0].read_bytes(0, &mut bytes);
    let mut a = Appender::resume(BufLen(bytes.len()), &scan(&bytes));
    let at = a.end().0;
    let extra = a.append(&mut bytes, b"never acknowledged").unwrap();
    open[0].write_bytes(at, &bytes[at..extra.end.0]);
    // A read of member 1's buffer shows it; its tail does not (never acknowledged).
    assert_eq!(read_all(n1).len(), acked.len() + 1);
    assert!(tails[1].next_within(Duration::from_millis(200)).is_none(), "{t:?}: an unacknowledged record shown");

    // The primary crashes: member 1 takes over, member 3 joins the log's
    // members and is re-seeded with every committed segment.
    logs[0].take().unwrap().group().shutdown();
    let n1 = logs[1].as_ref().unwrap();
    // Member 1 never says the log takes appends with itself as the primary before
    // it took over (it once did, while it opened its own buffer in its recovery):
    // looked at as often as the loop goes until it is the primary.
    let mut early = None;
    let took_over = testkit::poll_until(WAIT, Duration::from_micros(20), || {
        let named = n1.wait_for_primary(Duration::ZERO) == Some(n1.node());
        let primary = n1.is_primary();
        if named && !primary && early.is_none() {
            early = Some(std::time::Instant::now());
        }
        primary
    });
    assert!(took_over, "{t:?}: member 1 did not take over");
    assert!(early.is_none(), "{t:?}: member 1 was named the primary before it took over");
    let by_n1 = || recovered.lock().unwrap().iter().rev().find(|(n, _)| *n == n1.node()).map(|(_, r)| r.clone());
    assert!(testkit::poll_until(WAIT, Duration::from_millis(10), || by_n1().is_some()), "{t:?}: member 1's recovery");
    let rec = by_n1().unwrap();
    assert_eq!(rec.next, Lsn(171), "{t:?}: every acknowledged record, nothing more");
    assert_eq!(rec.dropped, 1, "{t:?}: the record only member 1 held is not in the log");
    assert!(rec.reseeded >= 1, "{rec:?}");
    for i in 171..260 {
        assert_eq!(n1.append(&record(i)).unwrap(), Lsn(i));
        acked.push(record(i));
    }
    let fwd = logs[3].as_ref().unwrap().append(b"from the new member").unwrap();
    assert_eq!(fwd, Lsn(260));
    acked.push(b"from the new member".to_vec());
    for (i, l) in logs.iter().enumerate().skip(1) {
        let l = l.as_ref().unwrap();
        assert!(l.wait_flushed(WAIT));
        assert_eq!(read_all(l), acked, "{t:?} member {i} after the failover");
    }
    // The tails at the surviving members went on through the failover with the
    // acknowledged records only; one at the re-seeded member reads it all.
    for i in [1, 2] {
        assert_eq!(pull(&mut tails[i], acked.len() - 171), acked[171..], "{t:?} tail at member {i}");
    }
    let (stream, got) = pull_stream(stream, 171, acked.len() - 171);
    assert_eq!(got, acked[171..], "{t:?} stream at member 2 after the failover");
    drop(stream);
    let mut fresh = logs[3].as_ref().unwrap().subscribe(Lsn(0));
    assert_eq!(pull(&mut fresh, acked.len()), acked, "{t:?} tail at the re-seeded member");
    drop(tails);
    for l in logs.iter_mut() {
        drop(l.take());
    }
}

#[test]
fn failover_and_reseeding_over_shm() {
    failover(Transport::Shm);
}

#[test]
fn failover_and_reseeding_over_tcp() {
    failover(Transport::Tcp);
}

#[test]
fn a_corrupted_segment_file_stops_the_start_with_its_name() {
    let dirs = testkit::TempDirs::new(&format!("tws-corrupt-{}", std::process::id()), 1);
    let dir = &dirs[0];
    std::fs::create_dir_all(dir).unwrap();
    // A segment as a backup flushes it, then one flipped bit in a record.
    let mut buf = vec![0u8; 1024];
    let mut a = Appender::new(BufLen(buf.len()));
    a.append(&mut buf, b"first").unwrap();
    a.append(&mut buf, b"second").unwrap();
    buf.truncate(a.end().0);
    buf[20] ^= 1;
    let path = dir.join("log0-seg0.tw");
    std::fs::write(&path, &buf).unwrap();
    let cfg = Config::builder(0, testkit::free_control_addr())
        .name(&format!("twc{}", std::process::id()))
        .transport(Transport::Mem)
        .build()
        .unwrap();
    let e = TailwindLog::start(cfg, TailwindConfig::new(dir)).unwrap_err();
    assert!(e.to_string().contains("log0-seg0.tw") && e.to_string().contains("corrupt"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), buf, "the damaged file is left as it was, for inspection");
}

/// Three members over shm with member 0 the primary; the logs stop before their
/// directories are removed (fields drop in order).
struct ThreeMembers {
    logs: Vec<TailwindLog>,
    _dirs: testkit::TempDirs,
}

impl ThreeMembers {
    fn new(tag: &str) -> ThreeMembers {
        let t = Transport::Shm;
        let name = format!("{tag}{}", std::process::id());
        let dirs = testkit::TempDirs::new(&name, 3);
        let n0 = member(&name, 0, None, t, &dirs[0]);
        let contact = n0.group().listen_addr();
        let logs: Vec<TailwindLog> =
            std::iter::once(n0).chain((1..3).map(|i| member(&name, i, Some(contact), t, &dirs[i as usize]))).collect();
        assert!(logs[0].group().wait_for_members(3, WAIT));
        assert_eq!(logs[0].wait_for_primary(WAIT), Some(logs[0].node()));
        ThreeMembers { logs, _dirs: dirs }
    }
}

/// Readers at the backups follow the log while the primary appends, through many
/// segment rollovers: each shows every record once, in order, never one past the
/// end of a segment the primary just closed.
#[test]
fn tails_at_backups_follow_appends_across_segment_rollovers() {
    let three = ThreeMembers::new("twr");
    let (logs, p) = (&three.logs, &three.logs[0]);
    const N: u64 = 3000; // ~100 segments of 8 KB
    let readers: Vec<_> = logs[1..]
        .iter()
        .flat_map(|l| [l.subscribe(Lsn(0)), l.subscribe(Lsn(0))])
        .map(|mut tail| {
            std::thread::spawn(move || {
                for i in 0..N {
                    let (lsn, bytes) = match tail.next_within(WAIT) {
                        Some(r) => r.unwrap_or_else(|e| panic!("record {i}: {e}")),
                        None => panic!("record {i} not committed in time"),
                    };
                    assert_eq!((lsn, bytes), (Lsn(i), record(i)));
                }
            })
        })
        .collect();
    for i in 0..N {
        assert_eq!(p.append(&record(i)).unwrap(), Lsn(i));
        // Paced, so that the readers are often caught up when a segment closes.
        std::thread::sleep(Duration::from_micros(100));
    }
    assert!(p.segments().len() >= 50, "segments rotated: {}", p.segments().len());
    for r in readers {
        r.join().expect("a reader at a backup saw every record in order");
    }
}

/// Reads at the backups while the primary appends through many segment rollovers
/// (buffers of 8 KB are closed, written out, zeroed and reused for later segments
/// under the readers): every record a read returns is the one appended at its
/// number, numbered on from where the read began.
#[test]
fn reads_at_backups_during_rollovers_return_each_record_at_its_number() {
    let three = ThreeMembers::new("twf");
    let (logs, p) = (&three.logs, &three.logs[0]);
    const N: u64 = 2000;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for l in &logs[1..] {
            let done = &done;
            s.spawn(move || {
                let mut reads = 0u64;
                // Bounded: it stops with the appends (and the appends are bounded).
                while !done.load(Ordering::Acquire) || reads == 0 {
                    let from = reads * 37 % N;
                    for (k, r) in l.read_from(Lsn(from)).enumerate() {
                        let (lsn, bytes) = r.unwrap_or_else(|e| panic!("read {reads} from {from}: {e}"));
                        let want = from + k as u64;
                        assert_eq!(lsn, Lsn(want), "read {reads} from {from}");
                        assert!(bytes == record(want), "read {reads} from {from}: record {want} holds other bytes");
                    }
                    reads += 1;
                }
            });
        }
        for i in 0..N {
            assert_eq!(p.append(&record(i)).unwrap(), Lsn(i));
        }
        done.store(true, Ordering::Release);
    });
    assert!(p.segments().len() >= 30, "segments rotated: {}", p.segments().len());
}
