//! Keyed topics over several participants: instances, per-instance history at a
//! late joiner, disposals, unregistration, instances without writers when their
//! writer's participant leaves (at the same point of the order everywhere), read
//! and view states, and bad instance calls.

mod common;
use common::{domain, WAIT};
use serde::{Deserialize, Serialize};
use spindle_dds::{
    DdsError, InstanceHandle, InstanceState, Keyed, Sample, SampleState, StateMask, TopicError, ViewState,
};
use spindle_dds::{History, Qos};
use spindle_views::config::Transport;
use std::time::Duration;
use testkit::poll_until;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Shape {
    colour: String,
    x: i32,
    y: i32,
}

impl Keyed for Shape {
    type Key = String;
    fn key(&self) -> String {
        self.colour.clone()
    }
}

fn shape(colour: &str, x: i32) -> Shape {
    Shape { colour: colour.into(), x, y: -x }
}

fn xs(got: &[Sample<Shape>], colour: &str) -> Vec<i32> {
    got.iter().filter(|s| s.data.colour == colour && s.info.valid_data).map(|s| s.data.x).collect()
}

#[test]
fn a_late_joiner_gets_the_last_n_of_every_instance_and_disposals() {
    let name = format!("ddsk{}", std::process::id());
    let ps = domain(&name, 3, Transport::Shm);
    let qos = Qos::volatile(History::KeepLast(2));
    let t0 = ps[0].keyed_topic::<Shape>("shapes", qos).unwrap();
    assert!(t0.is_keyed() && t0.type_name().starts_with("serde+keyed:Shape#"), "{}", t0.type_name());
    let w = ps[0].create_writer(&t0, qos).unwrap();
    let t1 = ps[1].find_keyed_topic::<Shape>("shapes").unwrap();
    let early = ps[1].create_reader(&t1, qos.history(History::KeepAll)).unwrap();
    for i in 0..10 {
        w.write(&shape("red", i)).unwrap();
        if i % 3 == 0 {
            w.write(&shape("green", i)).unwrap();
        }
    }
    w.write(&shape("blue", 1)).unwrap();
    w.write(&shape("blue", 2)).unwrap();
    w.write(&shape("blue", 3)).unwrap();
    w.dispose(&shape("blue", 0)).unwrap();
    assert!(w.wait_for_delivery(WAIT));

    // The late joiner: the last two of each instance, in the topic's order.
    let t2 = ps[2].find_keyed_topic::<Shape>("shapes").unwrap();
    let late = ps[2].create_reader(&t2, qos).unwrap();
    let got = late.take_n(6, WAIT);
    assert!(late.take_n(1, Duration::from_millis(200)).is_empty(), "six in all");
    assert_eq!(xs(&got, "red"), vec![8, 9]);
    assert_eq!(xs(&got, "green"), vec![6, 9]);
    assert_eq!(xs(&got, "blue"), vec![3], "blue's last two: 3 and its disposal");
    let disposal = got.iter().find(|s| !s.info.valid_data).expect("the disposal");
    assert_eq!(disposal.data.colour, "blue");
    assert_eq!(disposal.info.instance_state, InstanceState::Disposed);
    assert!(got.windows(2).all(|p| p[0].info.topic_seq < p[1].info.topic_seq), "in the topic's order");
    assert!(got.iter().all(|s| s.info.from_history));
    let blue = late.lookup_instance(&"blue".to_string()).unwrap().expect("blue is known");
    assert_eq!(blue, w.instance_of(&shape("blue", 77)).unwrap(), "the key alone names the instance");
    assert_eq!(late.instance_state(blue).unwrap(), InstanceState::Disposed);
    assert_eq!(late.lookup_instance(&"mauve".to_string()).unwrap(), None);
    assert_eq!(late.status().instances, 3);

    // The early reader kept everything; per instance it is the same order.
    let all = early.take_n(18, WAIT);
    assert_eq!(xs(&all, "red"), (0..10).collect::<Vec<_>>());
    assert_eq!(all.iter().filter(|s| s.info.instance == blue).count(), 4);

    // Dispose by key alone: readers show it with their last sample of red.
    w.dispose_key(&"red".to_string()).unwrap();
    let by_key = late.take_n(1, WAIT);
    assert_eq!((by_key[0].data.x, by_key[0].info.valid_data), (9, false), "red's last sample stands for it");
    assert_eq!(by_key[0].info.instance_state, InstanceState::Disposed);
    // One this reader never saw changes the state only (no sample to show).
    w.write(&shape("mauve", 1)).unwrap();
    w.dispose_key(&"teal".to_string()).unwrap();
    assert_eq!(xs(&late.take_n(1, WAIT), "mauve"), vec![1]);
    let teal = late.instance_of(&shape("teal", 0)).unwrap();
    assert!(
        poll_until(WAIT, Duration::from_millis(5), || late.instance_state(teal).ok() == Some(InstanceState::Disposed))
    );
    assert!(late.take().is_empty(), "no sample for teal: its state changed alone");
    let plain = ps[0].topic::<Shape>("plain shapes", Qos::ordered()).unwrap();
    let pw = ps[0].create_writer(&plain, plain.qos()).unwrap();
    assert!(matches!(pw.dispose_key(&"red".to_string()), Err(DdsError::NotKeyed(_))));

    // A disposed instance written again is alive and new again.
    w.write(&shape("blue", 4)).unwrap();
    let again = late.take_n(1, WAIT);
    assert_eq!(again[0].info.instance_state, InstanceState::Alive);
    assert_eq!(again[0].info.view_state, ViewState::New, "reborn");
}

#[test]
fn keyed_reader_queues_keep_the_last_n_per_instance_and_instances_can_be_taken_alone() {
    let name = format!("ddsq{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let t0 = ps[0].keyed_topic::<Shape>("q", Qos::ordered()).unwrap();
    let t1 = ps[1].keyed_topic::<Shape>("q", Qos::ordered()).unwrap();
    let r = ps[1].create_reader(&t1, Qos::ordered().history(History::KeepLast(3))).unwrap();
    let w = ps[0].create_writer(&t0, t0.qos()).unwrap();
    for i in 0..20 {
        w.write(&shape(if i % 2 == 0 { "a" } else { "b" }, i)).unwrap();
    }
    w.write(&shape("c", 100)).unwrap();
    assert!(w.wait_for_delivery(WAIT));
    assert!(poll_until(WAIT, Duration::from_millis(5), || r.status().received == 21));
    let b = r.instance_of(&shape("b", 0)).unwrap();
    let only_b = r.take_instance(b).unwrap();
    assert_eq!(xs(&only_b, "b"), vec![15, 17, 19], "the last three of b");
    assert!(only_b.iter().all(|s| s.info.instance == b));
    let rest = r.take();
    assert_eq!(xs(&rest, "a"), vec![14, 16, 18]);
    assert_eq!(xs(&rest, "c"), vec![100]);
    assert_eq!(r.status().lost, 14, "seven of a and seven of b pushed out");

    // Bad instance calls are errors, not panics.
    let nobody = InstanceHandle(12345);
    assert!(matches!(r.take_instance(nobody), Err(DdsError::UnknownInstance { .. })));
    assert!(matches!(r.read_instance(nobody), Err(DdsError::UnknownInstance { .. })));
    assert!(matches!(r.instance_state(nobody), Err(DdsError::UnknownInstance { .. })));
    let plain = ps[0].topic::<u32>("plain", Qos::ordered()).unwrap();
    let pw = ps[0].create_writer(&plain, plain.qos()).unwrap();
    assert!(matches!(pw.dispose(&1), Err(DdsError::NotKeyed(_))));
    assert_eq!(pw.instance_of(&1).unwrap(), InstanceHandle::NIL);
    // A keyed type is another type: the unkeyed topic of the same name is refused.
    let keyed = ps[1].topic::<Shape>("q", Qos::ordered());
    assert!(matches!(keyed, Err(DdsError::Topic { why: TopicError::TypeMismatch { .. }, .. })), "{keyed:?}");
}

#[test]
fn read_marks_samples_read_and_masks_pick_by_state() {
    let name = format!("ddsr{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let t0 = ps[0].keyed_topic::<Shape>("r", Qos::ordered()).unwrap();
    let t1 = ps[1].keyed_topic::<Shape>("r", Qos::ordered()).unwrap();
    let r = ps[1].create_reader(&t1, t1.qos()).unwrap();
    let w = ps[0].create_writer(&t0, t0.qos()).unwrap();
    w.write(&shape("a", 1)).unwrap();
    w.write(&shape("b", 1)).unwrap();
    assert!(w.wait_for_delivery(WAIT));
    assert!(poll_until(WAIT, Duration::from_millis(5), || r.status().received == 2));
    let first = r.read();
    assert_eq!(first.len(), 2);
    assert!(first.iter().all(|s| s.info.sample_state == SampleState::NotRead && s.info.view_state == ViewState::New));
    let second = r.read();
    assert_eq!(second.len(), 2, "read leaves them");
    assert!(second.iter().all(|s| s.info.sample_state == SampleState::Read && s.info.view_state == ViewState::NotNew));
    w.write(&shape("a", 2)).unwrap();
    assert!(w.wait_for_delivery(WAIT));
    assert!(poll_until(WAIT, Duration::from_millis(5), || r.status().received == 3));
    let fresh = r.take_matching(10, StateMask::not_read());
    assert_eq!(xs(&fresh, "a"), vec![2], "only the unread one");
    assert_eq!(fresh[0].info.view_state, ViewState::NotNew, "a was seen before");
    assert_eq!(r.take_n(5, Duration::from_millis(50)).len(), 2, "the two read ones are still there");
    assert!(r.take().is_empty());
}

#[test]
fn instances_lose_their_writers_when_the_writer_goes_at_the_same_point_everywhere() {
    let name = format!("ddsn{}", std::process::id());
    let ps = domain(&name, 3, Transport::Shm);
    let ts: Vec<_> = ps.iter().map(|p| p.keyed_topic::<Shape>("n", Qos::ordered()).unwrap()).collect();
    let readers: Vec<_> = (1..3).map(|i| ps[i].create_reader(&ts[i], ts[i].qos()).unwrap()).collect();
    // Node 1 writes "kept" (and keeps writing it); node 0 writes "gone" and leaves.
    let stays = ps[1].create_writer(&ts[1], ts[1].qos()).unwrap();
    let leaves = ps[0].create_writer(&ts[0], ts[0].qos()).unwrap();
    leaves.write(&shape("gone", 1)).unwrap();
    stays.write(&shape("kept", 1)).unwrap();
    leaves.write(&shape("both", 1)).unwrap();
    stays.write(&shape("both", 2)).unwrap();
    assert!(leaves.wait_for_delivery(WAIT) && stays.wait_for_delivery(WAIT));
    for r in &readers {
        assert!(poll_until(WAIT, Duration::from_millis(5), || r.status().received == 4));
        assert_eq!(r.status().liveliness.alive_count, 2);
    }
    // Node 0 leaves with its writer still open: membership, not the writer's end,
    // takes it out.
    assert!(ps[0].leave(WAIT).is_ok());
    drop(leaves);
    stays.write(&shape("kept", 2)).unwrap();
    let gone = readers[0].instance_of(&shape("gone", 0)).unwrap();
    let mut seen = Vec::new();
    for r in &readers {
        let got = r.take_n(6, WAIT);
        // What each reader got, in its order: the same at both.
        seen.push(got.iter().map(|s| (s.data.colour.clone(), s.data.x, s.info.valid_data)).collect::<Vec<_>>());
        assert_eq!(r.instance_state(gone).unwrap(), InstanceState::NoWriters);
        let notices: Vec<&Sample<Shape>> = got.iter().filter(|s| !s.info.valid_data).collect();
        assert_eq!(notices.len(), 1, "only `gone` lost every writer: {got:?}");
        assert_eq!(notices[0].data.colour, "gone");
        assert_eq!(notices[0].info.instance_state, InstanceState::NoWriters);
        let kept = r.instance_of(&shape("kept", 0)).unwrap();
        let both = r.instance_of(&shape("both", 0)).unwrap();
        assert_eq!(r.instance_state(kept).unwrap(), InstanceState::Alive);
        assert_eq!(r.instance_state(both).unwrap(), InstanceState::Alive, "node 1 still writes it");
        assert_eq!(r.status().liveliness.alive_count, 1);
        assert_eq!(r.status().liveliness.not_alive_count, 1, "node 0's writer left with its participant");
    }
    assert_eq!(seen[0], seen[1], "the notice came at the same point of the order at both readers");
    let notice = seen[0].iter().position(|s| !s.2).unwrap();
    assert_eq!((notice, seen[0].len()), (4, 6), "after the four samples, before the one written after: {:?}", seen[0]);
    stays.unregister(&shape("both", 0)).unwrap();
    assert!(stays.wait_for_delivery(WAIT));
    let both = readers[0].instance_of(&shape("both", 0)).unwrap();
    for r in &readers {
        assert!(poll_until(WAIT, Duration::from_millis(5), || r.instance_state(both).ok()
            == Some(InstanceState::NoWriters)));
        let got = r.take();
        assert_eq!(got.len(), 1, "the unregistration: {got:?}");
        assert!(!got[0].info.valid_data);
    }
}

#[test]
fn clients_write_and_read_instances_through_members() {
    use spindle_dds::{ClientConfig, DomainClient};
    let name = format!("ddskc{}", std::process::id());
    let ps = domain(&name, 2, Transport::Shm);
    let t0 = ps[0].keyed_topic::<Shape>("kc", Qos::volatile(History::KeepLast(1))).unwrap();
    let member = ps[0].create_reader(&t0, Qos::volatile(History::KeepAll)).unwrap();
    let connect = |p: &spindle_dds::DomainParticipant| {
        let mut cfg = ClientConfig::new(vec![p.group().listen_addr()]);
        cfg.failover_timeout = WAIT;
        DomainClient::connect(cfg).unwrap()
    };
    let (cw, cr) = (connect(&ps[0]), connect(&ps[1]));
    let tw = cw.keyed_topic::<Shape>("kc", Qos::volatile(History::KeepLast(1))).unwrap();
    let w = cw.create_writer(&tw, tw.qos()).unwrap();
    for i in 0..3 {
        w.write(&shape("red", i)).unwrap();
        w.write(&shape("blue", i)).unwrap();
    }
    w.dispose(&shape("blue", 0)).unwrap();
    assert!(w.wait_for_delivery(WAIT));
    let got = member.take_n(7, WAIT);
    assert_eq!(xs(&got, "red"), vec![0, 1, 2]);
    let blue = member.instance_of(&shape("blue", 0)).unwrap();
    assert_eq!(member.instance_state(blue).unwrap(), InstanceState::Disposed);
    // A client reader that comes late gets the last sample of each instance.
    let tr = cr.find_keyed_topic::<Shape>("kc").unwrap();
    let r = cr.create_reader(&tr, Qos::volatile(History::KeepAll)).unwrap();
    let late = r.take_n(2, WAIT);
    assert_eq!(xs(&late, "red"), vec![2]);
    assert!(late.iter().any(|s| s.data.colour == "blue" && !s.info.valid_data));
    assert_eq!(r.instance_state(blue).unwrap(), InstanceState::Disposed);
    w.dispose_key(&"red".to_string()).unwrap();
    let red = r.take_n(1, WAIT);
    assert_eq!((red[0].data.x, red[0].info.valid_data), (2, false));
    assert_eq!(red[0].info.instance_state, InstanceState::Disposed);
    let keyed = cw.topic::<Shape>("kc", Qos::ordered());
    assert!(matches!(keyed, Err(DdsError::Topic { why: TopicError::TypeMismatch { .. }, .. })), "{keyed:?}");
}
