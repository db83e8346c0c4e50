//! The application's own regions in every view's transport: one member writes into
//! another's with one-sided writes, and the receiver reads them at the end of the
//! view, before the next view's fresh regions replace them (over shm and tcp).

mod common;

use spindle_sst::transport::{NodeId, RegionId, RegionSpec, WriteOp};
use spindle_views::config::{Config, Transport};
use spindle_views::group::{Group, GroupBuilder, StartError, APP_REGIONS};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use testkit::poll_until;

const WAIT: Duration = Duration::from_secs(30);
const R: RegionId = RegionId(APP_REGIONS + 1);

type Seen = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

fn member(name: &str, id: u32, contact: Option<std::net::SocketAddr>, t: Transport, seen: Seen) -> Group {
    let b = common::member_config(name, id, contact, t);
    GroupBuilder::new(b.build().unwrap())
        .regions(vec![RegionSpec { id: R, len: 4096 }])
        .on_view_end(move |view, t| {
            let mut buf = vec![0u8; 64];
            t.region(R).expect("registered in every view").read_bytes(0, &mut buf);
            seen.lock().unwrap().push((view.id().0, buf));
        })
        .start()
        .unwrap()
}

fn one_sided_writes_into_application_regions(t: Transport) {
    let name = format!("apr{}{}", std::process::id(), t as u8);
    let seen: Vec<Seen> = (0..3).map(|_| Arc::new(Mutex::new(Vec::new()))).collect();
    let g0 = member(&name, 0, None, t, seen[0].clone());
    let g1 = member(&name, 1, Some(g0.listen_addr()), t, seen[1].clone());
    assert!(g0.wait_for_members(2, WAIT));
    let (view, tr) = g0.transport().unwrap();
    assert_eq!(view.members().len(), 2);
    let pattern: Vec<u8> = (0..64).map(|i| i as u8 ^ 0x5a).collect();
    tr.region(R).unwrap().write_bytes(0, &pattern);
    let op = WriteOp { region: R, src_offset: 0, dst_offset: 0, len: 64, signaled: true, wake: true, stable: false };
    let seq = tr.post_write(NodeId(1), op).unwrap();
    tr.flush();
    assert!(
        poll_until(WAIT, Duration::from_millis(1), || tr.completed(NodeId(1)) >= seq),
        "the write did not complete"
    );
    // A third member joins: the view ends, and member 1 reads its region first.
    let g2 = member(&name, 2, Some(g0.listen_addr()), t, seen[2].clone());
    assert!(g0.wait_for_members(3, WAIT));
    assert!(
        poll_until(WAIT, Duration::from_millis(5), || !seen[1].lock().unwrap().is_empty()),
        "no view end at member 1"
    );
    assert_eq!(seen[1].lock().unwrap()[0], (view.id().0, pattern.clone()), "{t:?}");
    let own = || seen[0].lock().unwrap().iter().find(|(v, _)| *v == view.id().0).map(|(_, b)| b.clone());
    assert!(poll_until(WAIT, Duration::from_millis(5), || own().is_some()), "no view end at member 0");
    assert_eq!(own(), Some(pattern), "the writer's own copy");
    // The next view's regions are fresh.
    let (_, tr1) = g1.transport().unwrap();
    let mut now = vec![1u8; 64];
    tr1.region(R).unwrap().read_bytes(0, &mut now);
    assert!(now.iter().all(|b| *b == 0));
    for g in [g2, g1, g0] {
        g.shutdown();
    }
}

#[test]
fn shm_application_regions() {
    one_sided_writes_into_application_regions(Transport::Shm);
}

#[test]
fn tcp_application_regions() {
    one_sided_writes_into_application_regions(Transport::Tcp);
}

#[test]
fn region_ids_below_the_application_range_are_refused() {
    let cfg = Config::builder(0, testkit::free_control_addr()).name("aprbad").build().unwrap();
    let r = GroupBuilder::new(cfg).regions(vec![RegionSpec { id: RegionId(3), len: 64 }]).start();
    assert!(matches!(r, Err(StartError::Setup(_))));
}
