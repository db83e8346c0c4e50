use super::*;

fn view(n: u32) -> View {
    View::with_id(ViewId(5), (0..n).map(NodeId).collect())
}

#[test]
fn a_candidate_counts_members_of_its_view_and_restarts_with_a_strict_majority() {
    let mut r = Restore::new(NodeId(1), view(4));
    r.begin_round();
    assert_eq!(r.next_ask(), Some(NodeId(0)), "a candidate asks the members below it");
    assert_eq!(r.next_ask(), None, "one request at a time");
    r.answer(Answer::Unreachable);
    assert_eq!(r.next_ask(), None, "the round is over");
    assert_eq!(r.on_request(NodeId(9), ViewId(5)), Reply::Outsider);
    assert_eq!(r.on_request(NodeId(1), ViewId(5)), Reply::Outsider, "itself");
    assert_eq!(r.on_request(NodeId(2), ViewId(6)), Reply::Stale, "the group went on without this member");
    assert_eq!(r.on_request(NodeId(2), ViewId(5)), Reply::Counted);
    assert_eq!(r.restart(), None, "two of four is no majority");
    assert_eq!(r.on_request(NodeId(3), ViewId(4)), Reply::Counted, "a member whose last view is older counts");
    assert_eq!(r.on_request(NodeId(3), ViewId(5)), Reply::Counted, "asking again counts once");
    assert_eq!(r.counted(), &[NodeId(2), NodeId(3)]);
    let v = r.restart().expect("three of four");
    assert_eq!(
        (v.id(), v.members()),
        (ViewId(6), &[NodeId(1), NodeId(2), NodeId(3)][..]),
        "itself and the counted, in the order of the last view"
    );
    assert_eq!(r.stand(), Stand::Restarted);
    assert_eq!(r.restarted(), Some(&v));
    assert_eq!(r.restart(), None, "once");
    assert_eq!(r.on_request(NodeId(2), ViewId(5)), Reply::Restored, "a counted member starts the view it is in");
    assert_eq!(r.on_request(NodeId(0), ViewId(5)), Reply::Running, "one not counted joins it");
    r.restart_failed();
    assert_eq!((r.stand(), r.restarted()), (Stand::Candidate, None));
}

#[test]
fn no_restart_while_a_request_is_out_and_never_once_counted() {
    let mut r = Restore::new(NodeId(2), view(4));
    r.on_request(NodeId(3), ViewId(5));
    r.on_request(NodeId(1), ViewId(5));
    r.begin_round();
    assert_eq!(r.next_ask(), Some(NodeId(0)));
    assert_eq!(r.restart(), None, "asking: no restart although three of four are here");
    r.answer(Answer::Counted);
    assert_eq!(r.stand(), Stand::Bound(NodeId(0)));
    assert_eq!(r.next_ask(), None, "bound: the round ends (n1 is not asked)");
    assert_eq!(r.restart(), None, "bound for good");
    assert_eq!(r.on_request(NodeId(3), ViewId(5)), Reply::Redirect(NodeId(0)), "askers are sent on");
    r.begin_round();
    assert_eq!(r.next_ask(), Some(NodeId(0)), "a bound member asks its counter again");
    assert_eq!(r.next_ask(), None);
}

#[test]
fn a_lost_answer_binds_and_a_certain_no_frees() {
    let mut r = Restore::new(NodeId(3), view(5));
    r.begin_round();
    assert_eq!(r.next_ask(), Some(NodeId(0)));
    r.answer(Answer::Unreachable);
    assert_eq!(r.stand(), Stand::Candidate, "never reached");
    assert_eq!(r.next_ask(), Some(NodeId(1)));
    r.answer(Answer::Refused);
    assert_eq!(r.stand(), Stand::Candidate, "refused for certain");
    assert_eq!(r.next_ask(), Some(NodeId(2)));
    r.answer(Answer::Lost);
    assert_eq!(r.stand(), Stand::Bound(NodeId(2)), "it may have been counted");
}

#[test]
fn redirects_lead_lower_only_and_a_bound_member_stays_bound_when_one_fails() {
    let mut r = Restore::new(NodeId(4), view(5));
    r.begin_round();
    for n in 0..3 {
        assert_eq!(r.next_ask(), Some(NodeId(n)));
        r.answer(Answer::Unreachable);
    }
    assert_eq!(r.next_ask(), Some(NodeId(3)));
    r.answer(Answer::Redirect(NodeId(1)));
    assert_eq!(r.stand(), Stand::Asking { bound: None, to: NodeId(1) });
    assert_eq!(r.restart(), None, "the request stays out while the redirect is followed");
    assert_eq!(r.next_ask(), Some(NodeId(1)), "follow the chain down");
    assert_eq!(r.next_ask(), None, "once");
    r.answer(Answer::Counted);
    assert_eq!(r.stand(), Stand::Bound(NodeId(1)));
    r.begin_round();
    assert_eq!(r.next_ask(), Some(NodeId(1)));
    assert_eq!(r.on_request(NodeId(2), ViewId(5)), Reply::Redirect(NodeId(1)), "bound while asking again");
    r.answer(Answer::Redirect(NodeId(0)));
    assert_eq!(r.next_ask(), Some(NodeId(0)));
    r.answer(Answer::Unreachable);
    assert_eq!(r.stand(), Stand::Bound(NodeId(1)), "still bound to the one that counted it");
    r.begin_round();
    assert_eq!(r.next_ask(), Some(NodeId(1)));
    r.answer(Answer::Redirect(NodeId(3)));
    assert_eq!(r.stand(), Stand::Bound(NodeId(1)), "a redirect upward ends the chain");
    assert_eq!(r.next_ask(), None);
    r.begin_round();
    assert_eq!(r.next_ask(), Some(NodeId(1)));
    r.answer(Answer::Welcomed);
    assert_eq!(r.stand(), Stand::Joined);
    assert_eq!(r.on_request(NodeId(2), ViewId(5)), Reply::Running);
    r.begin_round();
    assert_eq!(r.next_ask(), None, "a member that runs a view asks no one");
}

#[test]
fn the_restarted_view_keeps_the_order_of_the_last_one() {
    // A layout puts a log's primary and replicas first: they must stay first.
    let last = View::with_id(ViewId(8), vec![NodeId(3), NodeId(0), NodeId(2), NodeId(1), NodeId(4)]);
    let mut r = Restore::new(NodeId(1), last);
    assert_eq!(r.on_request(NodeId(2), ViewId(8)), Reply::Counted);
    assert_eq!(r.on_request(NodeId(3), ViewId(8)), Reply::Counted);
    let v = r.restart().expect("three of five");
    assert_eq!((v.id(), v.members()), (ViewId(9), &[NodeId(3), NodeId(2), NodeId(1)][..]));
}
