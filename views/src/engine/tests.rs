//! The engine tested by what it emits, a few members over real tables with pushes
//! delivered by hand (no subgroups: the trim is exercised by the simulator).

use super::*;
use crate::membership::MembershipLayout;
use crate::view::ViewId;
use spindle_sst::{Region, RegionId};

struct Net {
    engines: Vec<Engine>,
    regions: Vec<Arc<Region>>,
}

fn net(n: u32, majority: bool) -> Net {
    let view = View::initial((0..n).map(NodeId).collect());
    let lay = MembershipLayout::new(&[]);
    let mut engines = Vec::new();
    let mut regions = Vec::new();
    for me in 0..n {
        let region = Arc::new(Region::new(lay.table_bytes(n as usize)));
        let row =
            Table::create(lay.table_layout().clone(), view.members(), NodeId(me), RegionId(0), region.clone()).unwrap();
        engines.push(Engine::new(view.clone(), Vec::new(), row, majority, &[]));
        regions.push(region);
    }
    Net { engines, regions }
}

impl Net {
    /// One step of node `i`; its pushes land at the nodes in `to` (and nowhere else).
    fn step(&mut self, i: usize, to: &[usize]) -> Vec<Action> {
        let mut pushes = Pushes::default();
        let mut out = Vec::new();
        let mut cores: Vec<Option<SmcCore>> = Vec::new();
        self.engines[i].step(&mut cores, &mut pushes, &mut out);
        for p in pushes.drain() {
            let mut words = vec![0u64; p.len / 8];
            self.regions[i].read_words(p.offset, &mut words);
            for t in p.targets() {
                if to.contains(&(t.0 as usize)) {
                    self.regions[t.0 as usize].apply_write(p.offset, &words);
                }
            }
        }
        out
    }
}

fn disconnects(actions: &[Action]) -> Vec<NodeId> {
    actions.iter().filter_map(|a| if let Action::Disconnect(n) = a { Some(*n) } else { None }).collect()
}

#[test]
fn one_failure_of_two_members_stops_the_survivor_as_a_minority() {
    let mut n = net(2, true);
    n.engines[0].suspect(NodeId(1));
    let out = n.step(0, &[]);
    assert_eq!(disconnects(&out), vec![NodeId(1)], "the suspected node is cut off first");
    assert!(
        matches!(out.last(), Some(Action::Stop(StopReason::Minority { live: 1, members: 2, ref lost })) if *lost == [NodeId(1)]),
        "{out:?}"
    );
    assert!(n.engines[0].is_done());
    // With the rule off the survivor goes on alone: it proposes, holds and commits
    // its own proposal and installs in one step.
    let mut n = net(2, false);
    n.engines[0].suspect(NodeId(1));
    let out = n.step(0, &[]);
    let Some(Action::Install(next)) = out.last() else { panic!("{out:?}") };
    assert_eq!(next.view.members(), &[NodeId(0)]);
    assert_eq!(next.failed, vec![NodeId(1)]);
}

#[test]
fn the_leader_proposes_and_commits_once_every_live_member_holds_the_proposal() {
    let mut n = net(3, true);
    n.engines[0].suspect(NodeId(2));
    let out = n.step(0, &[1]);
    assert_eq!(disconnects(&out), vec![NodeId(2)]);
    assert!(n.engines[0].is_wedged(), "a pending change wedges");
    assert_eq!((n.engines[0].my_proposal_no(), n.engines[0].committed()), (1, 0), "proposed, not committed");
    // Node 1 copies the proposal (its ack) and wedges; it learns the suspicion by gossip.
    let out = n.step(1, &[0]);
    assert_eq!(disconnects(&out), vec![NodeId(2)]);
    assert_eq!(n.engines[1].my_proposal_no(), 1);
    assert_eq!(n.engines[1].committed(), 0, "a follower never commits on its own");
    // Now every live member holds it: the leader commits, and with no subgroup to
    // trim it installs at once.
    let out = n.step(0, &[1]);
    assert_eq!(n.engines[0].committed(), 1);
    let Some(Action::Install(next)) = out.last() else { panic!("{out:?}") };
    assert_eq!(next.view.id(), ViewId(1));
    assert_eq!(next.view.members(), &[NodeId(0), NodeId(1)]);
    assert_eq!((next.failed.clone(), next.left.clone()), (vec![NodeId(2)], vec![]));
    let out = n.step(1, &[]);
    let Some(Action::Install(next1)) = out.last() else { panic!("{out:?}") };
    assert_eq!(next1.view, next.view, "the follower installs the same view");
}

#[test]
fn a_new_leader_waits_until_every_live_member_suspects_the_old_one() {
    let mut n = net(4, true);
    n.engines[1].suspect(NodeId(0));
    n.step(1, &[2, 3]);
    assert_eq!(n.engines[1].my_proposal_no(), 0, "nodes 2 and 3 may still follow node 0");
    // Nodes 2 and 3 learn the suspicion by gossip; node 1 hears back from node 2 only.
    n.step(2, &[1, 3]);
    n.step(1, &[2, 3]);
    assert_eq!(n.engines[1].my_proposal_no(), 0, "node 3 has not said it suspects node 0");
    n.step(3, &[1, 2]);
    n.step(1, &[2, 3]);
    assert_eq!(n.engines[1].my_proposal_no(), 1, "now node 1 leads");
}

#[test]
fn joins_go_to_the_leader_and_others_redirect() {
    let mut n = net(3, true);
    let j = Joiner { node: NodeId(7), addr: None };
    assert_eq!(n.engines[1].request_join(j), Err(JoinRefusal::Redirect(NodeId(0))));
    assert_eq!(n.engines[0].request_join(Joiner { node: NodeId(2), addr: None }), Err(JoinRefusal::Duplicate));
    assert_eq!(n.engines[0].request_join(j), Ok(()));
    n.step(0, &[1, 2]);
    n.step(1, &[0]);
    n.step(2, &[0]);
    let out = n.step(0, &[1, 2]);
    let Some(Action::Install(next)) = out.last() else { panic!("{out:?}") };
    assert_eq!(next.view.members(), &[NodeId(0), NodeId(1), NodeId(2), NodeId(7)]);
    assert_eq!(next.joins, vec![j]);
}

#[test]
fn a_member_that_others_suspect_is_removed() {
    let mut n = net(3, true);
    n.engines[0].suspect(NodeId(2));
    n.step(0, &[1, 2]);
    let out = n.step(2, &[]);
    assert!(matches!(out.last(), Some(Action::Stop(StopReason::Removed))), "{out:?}");
}
