//! Layouts that change at run time: a layout edit is a view change with the same
//! members and a new layout document; traffic in flight goes on through it, and a
//! process that joins later learns the document with its view.

mod common;

use spindle_views::config::Transport;
use spindle_views::group::{Group, GroupBuilder};
use spindle_views::layout::{EditError, Layout, LayoutError};
use spindle_views::view::View;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// Subgroup 0: every member. Subgroup 1: the members the document names (a list
/// of 4-byte ids), all sending, once one is named. An edit names one more.
struct Named;

fn named(view: &View) -> Vec<spindle_sst::transport::NodeId> {
    let ids: Vec<u32> =
        view.layout().bytes().chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    view.members().iter().copied().filter(|n| ids.contains(&n.0)).collect()
}

impl Layout for Named {
    fn subgroups(&self, view: &View) -> Result<Vec<spindle_smc::SubgroupSpec>, LayoutError> {
        let spec = |m: Vec<spindle_sst::transport::NodeId>| spindle_smc::SubgroupSpec {
            members: m.clone(),
            senders: m,
            window: 8,
            max_msg: 64,
            arena: 0,
            mode: spindle_smc::Mode::Ordered,
            relay: false,
        };
        let mut out = vec![spec(view.members().to_vec())];
        let one = named(view);
        if !one.is_empty() {
            out.push(spec(one));
        }
        Ok(out)
    }
    fn edit(&self, doc: &[u8], edit: &[u8]) -> Result<Option<Vec<u8>>, EditError> {
        let id: [u8; 4] = edit.try_into().map_err(|_| EditError::Invalid("not a 4-byte id".into()))?;
        if doc.chunks_exact(4).any(|c| c == id) {
            return Ok(None);
        }
        Ok(Some([doc, &id[..]].concat()))
    }
}

type Log = Arc<Mutex<Vec<(usize, u32, Vec<u8>)>>>;

fn member(name: &str, id: u32, contact: Option<SocketAddr>) -> (Group, Log) {
    let b = common::member_config(name, id, contact, Transport::Shm).window(8).max_msg(64);
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let g = GroupBuilder::new(b.build().unwrap())
        .layout(Named)
        .deliver_by(move |_view, k, _spec| {
            let l = l.clone();
            Some(Box::new(move |b: &spindle_views::group::InPlaceBatch<'_>| {
                for d in b.iter() {
                    l.lock().unwrap().push((k, d.sender.0, d.message.to_vec()));
                }
            }))
        })
        .start()
        .unwrap();
    (g, log)
}

fn wait(what: &str, f: impl FnMut() -> bool) {
    assert!(testkit::poll_until(WAIT, Duration::from_millis(5), f), "timed out waiting for {what}");
}

fn of(log: &Log, k: usize) -> Vec<(u32, Vec<u8>)> {
    log.lock().unwrap().iter().filter(|(s, _, _)| *s == k).map(|(_, n, d)| (*n, d.clone())).collect()
}

#[test]
fn a_layout_edit_is_a_view_change_that_loses_nothing_in_flight() {
    let name = format!("lay{}", std::process::id());
    let (g0, log0) = member(&name, 0, None);
    let contact = Some(g0.listen_addr());
    let (g1, log1) = member(&name, 1, contact);
    let (g2, log2) = member(&name, 2, contact);
    assert!(g0.wait_for_members(3, WAIT));
    let before = g0.view().unwrap();
    assert_eq!(before.layout().version(), 0);

    // Traffic in subgroup 0 from node 0 while nodes 1 and 2 edit the layout.
    const N: u32 = 400;
    let edits = std::thread::scope(|s| {
        let sender = s.spawn(|| {
            for i in 0..N {
                g0.send(0, &i.to_le_bytes()).unwrap();
            }
        });
        let e1 = s.spawn(|| g1.edit_layout(&1u32.to_le_bytes(), WAIT));
        let e2 = s.spawn(|| g2.edit_layout(&2u32.to_le_bytes(), WAIT));
        sender.join().unwrap();
        (e1.join().unwrap(), e2.join().unwrap())
    });
    let (v1, v2) = (edits.0.expect("node 1's edit"), edits.1.expect("node 2's edit"));
    assert_eq!(v1.members(), before.members(), "same members, new layout");
    assert!(v1.layout().version() >= 1 && v2.layout().version() >= 1);
    let now = g0.view().unwrap();
    assert_eq!(named(&now), vec![spindle_sst::transport::NodeId(1), spindle_sst::transport::NodeId(2)]);

    // An edit a view already holds returns at once with that view.
    assert_eq!(g1.edit_layout(&1u32.to_le_bytes(), WAIT).unwrap().layout(), now.layout());
    // A malformed edit is the layout's error, and changes nothing.
    assert!(matches!(g1.edit_layout(b"xy", WAIT), Err(EditError::Invalid(_))));

    // The new subgroup works: node 1 sends there; nodes 1 and 2 deliver, node 0 not.
    for i in 0..20u32 {
        g1.send_where(|v| (!named(v).is_empty()).then_some(1), 4, |slot| slot.write(0, &(1000 + i).to_le_bytes()))
            .unwrap();
    }
    wait("subgroup 0 at everyone", || [&log0, &log1, &log2].iter().all(|l| of(l, 0).len() == N as usize));
    wait("subgroup 1 at nodes 1 and 2", || of(&log1, 1).len() == 20 && of(&log2, 1).len() == 20);
    for log in [&log0, &log1, &log2] {
        let got: Vec<u32> = of(log, 0).iter().map(|(_, d)| u32::from_le_bytes(d[..4].try_into().unwrap())).collect();
        assert_eq!(got, (0..N).collect::<Vec<_>>(), "every message of subgroup 0, once, in order");
    }
    assert_eq!(of(&log1, 1), of(&log2, 1));
    assert!(of(&log0, 1).is_empty());

    // A process that joins later learns the layout document with its view.
    let (g3, _log3) = member(&name, 3, contact);
    assert!(g0.wait_for_members(4, WAIT));
    wait("the joiner's view", || g3.view().is_some_and(|v| v.members().len() == 4));
    assert_eq!(g3.view().unwrap().layout(), g0.view().unwrap().layout());
    for g in [g3, g2, g1, g0] {
        g.shutdown();
    }
}
