//! Every live member of a log's group out of its view at once: the primary fails
//! while a backup stalls past the failure timeout, so the other two members see two
//! of four gone and the stalled one finds itself cut off. They restore the view
//! among themselves (`spindle_views::restore`), and the log they go on with holds
//! every acknowledged append, although the member that restarts the view holds no
//! copy of the log: the appends were only in the open segment of the two backups.
//! Members are threads of this process over shm.

use spindle_sst::sync::atomic::{AtomicBool, Ordering};
use spindle_sst::transport::NodeId;
use spindle_tailwind::service::{Lsn, TailwindConfig, TailwindLog};
use spindle_views::config::{Config, Transport};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
/// How long the stalled backup holds its predicate thread: several failure timeouts.
const STALL: Duration = Duration::from_secs(3);

fn record(i: u64) -> Vec<u8> {
    let len = 8 + (i * 37 % 300) as usize;
    (0..len).map(|j| (i as usize * 17 + j) as u8).collect()
}

/// A member of the log's group; with `stall`, a delivery of byte 0xFF in subgroup 0
/// (the log's replicas) sets the flag and holds the member's predicate thread.
fn member(
    name: &str,
    id: u32,
    contact: Option<std::net::SocketAddr>,
    dir: &Path,
    stall: Option<Arc<AtomicBool>>,
) -> TailwindLog {
    let mut b = Config::builder(id, testkit::free_control_addr())
        .name(name)
        .transport(Transport::Shm)
        .discovery(false)
        .timeouts(Duration::from_millis(50), Duration::from_millis(400));
    if let Some(c) = contact {
        b = b.contact(c);
    }
    let cfg = TailwindConfig::new(dir);
    TailwindLog::start_with(b.build().unwrap(), cfg, move |g| {
        g.on_deliver(0, move |d| {
            if let (Some(flag), [0xFF]) = (&stall, d.data) {
                flag.store(true, Ordering::SeqCst);
                std::thread::sleep(STALL);
            }
        })
    })
    .unwrap_or_else(|e| panic!("member {id}: {e}"))
}

fn members(log: &TailwindLog) -> Vec<u32> {
    log.group().members().iter().map(|n| n.0).collect()
}

#[test]
fn a_view_restored_among_live_members_keeps_every_acknowledged_append() {
    let name = format!("twrestore{}", std::process::id());
    let dirs = testkit::TempDirs::new(&format!("tw-restore-{}", std::process::id()), 4);
    let stalled = Arc::new(AtomicBool::new(false));
    // Joined in this order, the view is [0, 2, 3, 1]: the log's replicas are 0, 2
    // and 3, and member 1, the lowest id that lives on, holds no copy of the log.
    let m0 = member(&name, 0, None, &dirs[0], None);
    let at = Some(m0.group().listen_addr());
    let m2 = member(&name, 2, at, &dirs[2], None);
    assert!(m0.group().wait_for_members(2, WAIT));
    let m3 = member(&name, 3, at, &dirs[3], Some(stalled.clone()));
    assert!(m0.group().wait_for_members(3, WAIT));
    let m1 = member(&name, 1, at, &dirs[1], None);
    assert!(m0.group().wait_for_members(4, WAIT) && m1.group().wait_for_members(4, WAIT));
    assert_eq!(members(&m1), vec![0, 2, 3, 1]);
    assert_eq!(m1.members(), vec![NodeId(0), NodeId(2), NodeId(3)], "the log's replicas");
    assert_eq!(m0.wait_for_primary(WAIT), Some(NodeId(0)));
    let acked: Vec<Lsn> = (0..300).map(|i| m0.append(&record(i)).expect("an append at the primary")).collect();
    assert_eq!(acked.last(), Some(&Lsn(299)));
    // Member 3 stalls as the primary stops: 1 and 2 see two of four gone, and 3,
    // waking, finds itself cut off. None of them runs a view.
    m0.group().send(0, &[0xFF]).unwrap();
    assert!(testkit::poll_until(WAIT, Duration::from_millis(1), || stalled.load(Ordering::SeqCst)));
    drop(m0);
    let live = [&m1, &m2, &m3];
    let one_view = || {
        let ids: Vec<_> = live.iter().map(|m| m.group().view().map(|v| v.id())).collect();
        live.iter().all(|m| {
            let mut ms = members(m);
            ms.sort();
            m.group().removal().is_none() && ms == [1, 2, 3]
        }) && ids.iter().all(|v| *v == ids[0])
    };
    assert!(
        testkit::poll_until(Duration::from_secs(60), Duration::from_millis(20), one_view),
        "one view of 1, 2 and 3: {:?} {:?} {:?}",
        members(&m1),
        members(&m2),
        members(&m3)
    );
    let primary = m1.wait_for_primary(WAIT).expect("a primary in the restored view");
    let log = live.iter().find(|m| m.node() == primary).expect("a live primary");
    // Every acknowledged append is there, in order, and the log takes appends again.
    let held: Vec<Vec<u8>> = log.read_from(Lsn(0)).take(300).map(|r| r.expect("a record").1).collect();
    assert_eq!(held.len(), 300, "records the restored log holds");
    for (i, r) in held.iter().enumerate() {
        assert_eq!(r, &record(i as u64), "record {i}");
    }
    assert_eq!(log.append(b"after").expect("an append after the restore"), Lsn(300));
}
