//! What a late joiner's reader holds across its seam, driven at the topic with no
//! group: the catch-up is begun by a view, live samples arrive and wait, then the
//! history lands. The promise (see [`crate::InstanceCounts`]): the reader's
//! `KeepLast(n)` keeps the last n of each instance of the one sequence history +
//! live, in the topic's order; what it replaced counts as lost, per instance and
//! in total, and history samples replaced count as `history_lost`.

use super::*;
use crate::instance::{prefix, InstanceHandle, Kind, StateMask};
use crate::qos::History as Keep;
use crate::queue::Raw;
use crate::table::Endpoint;
use std::time::SystemTime;

const RED: InstanceHandle = InstanceHandle(11);
const GREEN: InstanceHandle = InstanceHandle(12);
const BLUE: InstanceHandle = InstanceHandle(13);
const VIEW: ViewId = ViewId(3);
/// The topic's delivery count when `VIEW` began (the seam).
const SEAM: u64 = 40;

/// A keyed sample of writer 1 at node 0: header, prefix, then `(instance, n)`.
fn sample(h: InstanceHandle, n: u8) -> Vec<u8> {
    let mut b = Vec::new();
    let words = crate::sample::header(1, u64::from(n), SystemTime::now());
    let pre = prefix(h, Kind::Data);
    for w in words.iter().chain(&pre) {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b.extend_from_slice(&[h.0 as u8, n]);
    b
}

fn entry_of(name: &str, qos: Qos) -> TopicEntry {
    let w = Endpoint { node: 0, id: 1, level: qos.level };
    TopicEntry { name: name.into(), type_name: "Shape+keyed".into(), qos, writers: vec![w], readers: Vec::new() }
}

/// A topic at node 1 that joined `VIEW` late, with a local reader made before the
/// history came (as an application does right after creating the topic).
fn late_topic(keep: u32) -> (Arc<TopicState>, Arc<ReaderCore>) {
    let qos = Qos::volatile(Keep::KeepLast(keep));
    let t = TopicState::open("Square", qos, true, NodeId(1), None).unwrap();
    let others = t.enter_view(VIEW, &entry_of("Square", qos), &[NodeId(0), NodeId(1)]);
    assert_eq!(others, Some(vec![NodeId(0)]), "a late joiner asks node 0 for the history");
    let r = Arc::new(ReaderCore::new(1, &qos, true, None));
    t.add_reader(r.clone());
    (t, r)
}

/// Live samples of `VIEW` delivered while the catch-up runs.
fn live(t: &TopicState, samples: &[(InstanceHandle, u8)]) {
    t.run(|e, fx| {
        for (h, n) in samples {
            e.deliver(VIEW, NodeId(0), Src::Bytes(&sample(*h, *n)), Now::real(), fx);
        }
        e.batch_end(fx);
    });
}

/// The last five of each colour before the seam, as node 0 serves them (the
/// history keeps holes where other colours' older samples were dropped).
fn history() -> Vec<Entry> {
    let mut out = Vec::new();
    for i in 0..5u8 {
        for (k, h) in [RED, GREEN, BLUE].into_iter().enumerate() {
            let seq = 25 + 3 * u64::from(i) + k as u64;
            out.push(Entry { seq, view: ViewId(2), node: 0, bytes: sample(h, 100 + i) });
        }
    }
    out
}

fn take_all(r: &ReaderCore) -> Vec<Raw> {
    r.collect(usize::MAX, StateMask::ANY, None, true)
}

/// `(instance, n, from_history)` of each taken sample, in order.
fn shown(got: &[Raw]) -> Vec<(u64, u8, bool)> {
    got.iter().map(|r| (r.info.instance.0, r.payload[1], r.info.from_history)).collect()
}

#[test]
fn live_samples_held_during_catch_up_replace_the_oldest_history_of_their_instance() {
    let (t, r) = late_topic(5);
    // Red gets 2 live samples before the history lands, green 7, blue none.
    live(&t, &[(RED, 1), (GREEN, 1), (GREEN, 2), (RED, 2), (GREEN, 3), (GREEN, 4), (GREEN, 5), (GREEN, 6), (GREEN, 7)]);
    assert!(take_all(&r).is_empty(), "live samples wait for the history");
    t.finish_catch_up(history(), Some(SEAM), &[], None);
    let got = take_all(&r);
    let (red, green, blue) = (RED.0, GREEN.0, BLUE.0);
    // History seqs: red 25 + 3i, green 26 + 3i, blue 27 + 3i (i = 0..5).
    let expect = vec![
        (blue, 100, true),
        (blue, 101, true),
        (red, 102, true),
        (blue, 102, true),
        (red, 103, true),
        (blue, 103, true),
        (red, 104, true),
        (blue, 104, true),
        (red, 1, false),
        (red, 2, false),
        (green, 3, false),
        (green, 4, false),
        (green, 5, false),
        (green, 6, false),
        (green, 7, false),
    ];
    assert_eq!(shown(&got), expect, "the last five of each colour, history first");
    assert!(got.windows(2).all(|p| p[0].info.topic_seq < p[1].info.topic_seq), "the topic's order");
    let live_seqs: Vec<u64> = got.iter().filter(|r| !r.info.from_history).map(|r| r.info.topic_seq).collect();
    assert_eq!(
        live_seqs,
        vec![SEAM, SEAM + 3, SEAM + 4, SEAM + 5, SEAM + 6, SEAM + 7, SEAM + 8],
        "numbered from the seam"
    );
    let counts = |h| r.instance_counts(h).unwrap();
    let c = counts(RED);
    assert_eq!((c.received, c.from_history, c.lost, c.history_lost), (7, 5, 2, 2));
    let c = counts(GREEN);
    assert_eq!((c.received, c.from_history, c.lost, c.history_lost), (12, 5, 7, 5));
    let c = counts(BLUE);
    assert_eq!((c.received, c.from_history, c.lost, c.history_lost), (5, 5, 0, 0));
    assert_eq!(r.status().lost, 9, "the total is the instances' sum");
    for h in [RED, GREEN, BLUE] {
        let c = counts(h);
        let handed = got.iter().filter(|r| r.info.instance == h && r.info.from_history).count() as u64;
        assert_eq!(handed + c.history_lost, c.from_history, "history handed out + replaced = history received");
    }
}

#[test]
fn history_taken_before_the_next_live_sample_is_kept_whole() {
    let (t, r) = late_topic(5);
    t.finish_catch_up(history(), Some(SEAM), &[], None);
    let got = take_all(&r);
    assert_eq!(got.len(), 15);
    assert!(got.iter().all(|r| r.info.from_history));
    live(&t, &[(BLUE, 1)]);
    assert_eq!(shown(&take_all(&r)), vec![(BLUE.0, 1, false)]);
    assert_eq!(r.status().lost, 0);
}

#[test]
fn a_live_sample_after_the_history_replaces_its_oldest_if_untaken() {
    let (t, r) = late_topic(5);
    t.finish_catch_up(history(), Some(SEAM), &[], None);
    live(&t, &[(BLUE, 1)]);
    let got = take_all(&r);
    assert_eq!(got.iter().filter(|r| r.info.from_history).count(), 14);
    assert_eq!(shown(&got).last(), Some(&(BLUE.0, 1, false)));
    for h in [RED, GREEN] {
        assert_eq!(r.instance_counts(h).unwrap().lost, 0);
    }
    let blue = r.instance_counts(BLUE).unwrap();
    assert_eq!((blue.from_history, blue.lost, blue.history_lost), (5, 1, 1), "blue's sixth replaced its oldest");
    assert_eq!(got.iter().filter(|r| r.info.instance == BLUE).count(), 5);
}

#[test]
fn a_reader_that_keeps_more_than_the_topic_holds_keeps_history_and_live_alike() {
    let (t, r) = late_topic(5);
    live(&t, &[(RED, 1), (RED, 2)]);
    // A deeper reader beside the topic's own (DDS lets a reader keep more).
    let deep_qos = Qos::volatile(Keep::KeepLast(10));
    let deep = Arc::new(ReaderCore::new(2, &deep_qos, true, None));
    t.add_reader(deep.clone());
    t.finish_catch_up(history(), Some(SEAM), &[], None);
    let got = take_all(&deep);
    assert_eq!(got.len(), 17, "15 from history and 2 live, none replaced");
    assert_eq!(deep.status().lost, 0);
    assert_eq!(r.status().lost, 2);
}
