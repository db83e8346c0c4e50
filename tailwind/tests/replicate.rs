//! The primary's data path over mem, shm and tcp: every acknowledged append is in
//! every backup's buffer, as the same bytes, and a backup's recovery scan returns
//! exactly the acknowledged records; a backup that is cut off fails the append.

use spindle_sst::transport::{NodeId, RegionId, RegionSpec};
use spindle_tailwind::format::scan;
use spindle_tailwind::replicate::{AppendError, Lsn, Replicator};
use std::time::Duration;
use testkit::{local_group, TransportKind};

const BUF: usize = 64 * 1024;
const R: RegionId = RegionId(7);

fn record(i: usize) -> Vec<u8> {
    (0..(i * 37) % 300).map(|j| (i + j) as u8).collect()
}

fn backups_hold(kind: TransportKind) {
    let g = local_group(kind, 3, &[RegionSpec { id: R, len: BUF }], Duration::from_secs(10)).unwrap();
    // The backups run no thread of their own for it on any transport (tcp: the
    // transport's fallback thread, with no predicate thread attached here, applies
    // a write and acknowledges it).
    let mut p = Replicator::new(g.nodes[0].clone(), R, vec![NodeId(1), NodeId(2)], Duration::from_secs(10)).unwrap();
    let mut acked = Vec::new();
    for i in 0..60 {
        assert_eq!(p.append(&record(i)).unwrap(), Lsn(i as u64));
        acked.push(record(i));
        if i % 20 == 19 {
            // Acknowledged means held: read each backup's buffer right now.
            for b in 1..3 {
                let mut buf = vec![0u8; BUF];
                g.nodes[b].region(R).unwrap().read_bytes(0, &mut buf);
                let r = scan(&buf);
                let got: Vec<&[u8]> = (0..r.records.len()).map(|k| r.data(&buf, k)).collect();
                assert_eq!(got, acked.iter().map(|a| a.as_slice()).collect::<Vec<_>>(), "{kind:?} backup {b}");
            }
        }
    }
    let batch: Vec<Vec<u8>> = (60..100).map(record).collect();
    let refs: Vec<&[u8]> = batch.iter().map(|b| b.as_slice()).collect();
    let lsns = p.append_batch(&refs).unwrap();
    assert_eq!(lsns.first(), Some(&Lsn(60)));
    assert_eq!(lsns.last(), Some(&Lsn(99)));
    let mut primary = vec![0u8; BUF];
    g.nodes[0].region(R).unwrap().read_bytes(0, &mut primary);
    for b in 1..3 {
        let mut buf = vec![0u8; BUF];
        g.nodes[b].region(R).unwrap().read_bytes(0, &mut buf);
        assert_eq!(buf, primary, "{kind:?}: backup {b} holds the primary's bytes");
        assert_eq!(scan(&buf).records.len(), 100);
    }
    // A backup cut off: the next append is not acknowledged.
    g.nodes[0].disconnect(NodeId(2));
    match p.append(b"after the cut") {
        Err(AppendError::Backup { node, .. }) | Err(AppendError::Timeout(node)) => assert_eq!(node, NodeId(2)),
        other => panic!("{kind:?}: an append to a cut-off backup returned {other:?}"),
    }
}

#[test]
fn mem_backups_hold_every_acknowledged_append() {
    backups_hold(TransportKind::Mem);
}

#[test]
fn shm_backups_hold_every_acknowledged_append() {
    backups_hold(TransportKind::Shm);
}

#[test]
fn tcp_backups_hold_every_acknowledged_append() {
    backups_hold(TransportKind::Tcp);
}

#[test]
fn a_full_buffer_is_an_error_and_nothing_is_written() {
    let g = local_group(TransportKind::Mem, 2, &[RegionSpec { id: R, len: 256 }], Duration::from_secs(10)).unwrap();
    let mut p = Replicator::new(g.nodes[0].clone(), R, vec![NodeId(1)], Duration::from_secs(10)).unwrap();
    p.append(&[1; 100]).unwrap();
    let end = p.end();
    assert!(matches!(p.append(&[2; 200]), Err(AppendError::Format(_))));
    assert_eq!(p.end(), end);
    assert!(Replicator::new(g.nodes[0].clone(), RegionId(99), vec![NodeId(1)], Duration::from_secs(1)).is_err());
}
