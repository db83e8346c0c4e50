//! The effects given inputs emit, asserted at the engine with no driver.

use super::record::{Fx, Recorder};
use super::*;
use crate::error::CatchUpError;
use crate::qos::History as Keep;
use crate::sample::pack_bytes;
use crate::table::{Endpoint, TopicEntry};

const A: NodeId = NodeId(0);
const ME: NodeId = NodeId(1);

fn now() -> Now {
    Now::real()
}

/// A member's sample of writer `w`, number `seq`, with an 8-byte payload.
fn member(w: u32, seq: u64) -> Vec<u8> {
    let mut b: Vec<u8> =
        crate::sample::header(w, seq, SystemTime::now()).iter().flat_map(|x| x.to_le_bytes()).collect();
    b.extend_from_slice(&seq.to_le_bytes());
    b
}

/// A client's sample (client `c`, its writer `w`, offering `level`), number `seq`.
fn client(c: u64, w: u32, level: Level, seq: u64) -> Vec<u8> {
    let h = crate::sample::client_header(c, w, level as u8, seq, 0);
    let mut b: Vec<u8> = h.iter().flat_map(|x| x.to_le_bytes()).collect();
    b.extend_from_slice(&seq.to_le_bytes());
    b
}

fn entry(qos: Qos) -> TopicEntry {
    let w = Endpoint { node: A.0, id: 1, level: qos.level };
    TopicEntry { name: "t".into(), type_name: "u64".into(), qos, writers: vec![w], readers: Vec::new() }
}

fn engine(qos: Qos) -> TopicEngine<u32> {
    TopicEngine::open(qos, false, ME, qos.level.eq(&Level::Logged).then_some(&[][..]), now()).unwrap()
}

/// An engine for `qos` with one local reader `id` requesting `level`, and the
/// sink its effects go to.
fn with_reader(qos: Qos, id: u32, level: Level) -> (TopicEngine<u32>, Recorder) {
    let (mut e, mut rec) = (engine(qos), Recorder::default());
    e.add_reader(LocalReader { id, level, handle: id }, now(), &mut rec);
    (e, rec)
}

fn offers(fx: &[Fx]) -> Vec<(u32, u64, bool)> {
    fx.iter()
        .filter_map(|f| match f {
            Fx::Offer { reader, info, .. } => Some((*reader, info.topic_seq, info.from_history)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_delivered_sample_is_logged_offered_and_counted_as_its_writers() {
    let qos = Qos::logged(Keep::KeepLast(4));
    let (mut e, mut rec) = with_reader(qos, 7, Level::Ordered);
    e.add_writer(3, Level::Logged);
    assert_eq!(e.enter_view(ViewId(1), &entry(qos), &[ME], now(), &mut rec), None, "alone: nothing to catch up");
    rec.take();
    e.deliver(ViewId(1), ME, Src::Bytes(&member(3, 1)), now(), &mut rec);
    e.batch_end(&mut rec);
    let fx = rec.take();
    assert!(matches!(&fx[0], Fx::Append(a) if a.seq == 0 && a.node == ME.0), "{fx:?}");
    assert_eq!(offers(&fx), vec![(7, 0, false)], "readers get it at once");
    assert_eq!(fx[2], Fx::Flush);
    assert_eq!(e.delivered(3), Some(0), "not acknowledged before the log holds it");
    e.durable(1, &mut rec);
    assert_eq!(rec.take(), vec![Fx::DeliveredOwn { writer: 3, seq: 1 }, Fx::Flush]);
    assert_eq!(e.delivered(3), Some(1));
    // Another member's sample: offered and logged, no writer of this node counted.
    e.deliver(ViewId(1), A, Src::Bytes(&member(1, 1)), now(), &mut rec);
    let fx = rec.take();
    assert_eq!(fx.len(), 2, "{fx:?}");
    assert_eq!(offers(&fx), vec![(7, 1, false)]);
    assert_eq!(e.next_seq(), 2);
}

#[test]
fn a_client_resend_is_dropped_everywhere_and_acknowledged_again_by_its_sender() {
    let (mut e, mut rec) = with_reader(Qos::ordered(), 1, Level::Unordered);
    let s = client(9, 0, Level::Ordered, 1);
    e.deliver(ViewId(1), ME, Src::Bytes(&s), now(), &mut rec);
    let fx = rec.take();
    assert_eq!(offers(&fx), vec![(1, 0, false)]);
    assert_eq!(fx.last(), Some(&Fx::Acked { client: 9, writer: 0, seq: 1 }));
    // Sent again through another member after a failover: not a new sample.
    e.deliver(ViewId(2), A, Src::Bytes(&s), now(), &mut rec);
    assert_eq!(rec.take(), Vec::new(), "dropped silently where another member sent it");
    e.deliver(ViewId(2), ME, Src::Bytes(&s), now(), &mut rec);
    assert_eq!(rec.take(), vec![Fx::Acked { client: 9, writer: 0, seq: 1 }]);
    assert_eq!(e.next_seq(), 1, "the resends take no number");
}

#[test]
fn on_an_unordered_topic_a_client_sample_that_comes_after_later_ones_is_delivered_once() {
    let (mut e, mut rec) = with_reader(Qos::unordered(), 1, Level::Unordered);
    let seqs = |fx: Vec<Fx>| -> Vec<u64> {
        fx.iter()
            .filter_map(|f| match f {
                Fx::Offer { info, .. } => Some(info.seq),
                _ => None,
            })
            .collect()
    };
    // Sample 1 came through the member the client left; 2 and 3 through the next
    // one, and came here first; then 1, and then 2 again (a resend).
    for (via, seq) in [(A, 2), (A, 3), (ME, 1), (ME, 2), (A, 1)] {
        e.deliver(ViewId(1), via, Src::Bytes(&client(9, 0, Level::Unordered, seq)), now(), &mut rec);
    }
    assert_eq!(seqs(rec.take()), vec![2, 3, 1], "each once, none lost");
    // On an ordered topic the same arrival order drops the late one: every member
    // sees that order, and a writer's samples stay in its order.
    let (mut o, mut rec) = with_reader(Qos::ordered(), 1, Level::Unordered);
    for (via, seq) in [(A, 2), (A, 3), (ME, 1)] {
        o.deliver(ViewId(1), via, Src::Bytes(&client(9, 0, Level::Ordered, seq)), now(), &mut rec);
    }
    assert_eq!(seqs(rec.take()), vec![2, 3]);
}

#[test]
fn a_reader_whose_request_a_client_writer_does_not_meet_is_told() {
    let (mut e, mut rec) = with_reader(Qos::logged(Keep::KeepLast(1)), 2, Level::Logged);
    e.deliver(ViewId(1), A, Src::Bytes(&client(5, 1, Level::Unordered, 1)), now(), &mut rec);
    let fx = rec.take();
    assert!(offers(&fx).is_empty(), "{fx:?}");
    assert!(fx.iter().any(|f| matches!(f, Fx::Incompatible { reader: 2, offered: Level::Unordered, .. })));
}

#[test]
fn a_short_message_is_rejected_at_every_reader_and_takes_no_number() {
    let mut e = engine(Qos::ordered());
    let mut rec = Recorder::default();
    for id in [1, 2] {
        e.add_reader(LocalReader { id, level: Level::Unordered, handle: id }, now(), &mut rec);
    }
    e.deliver(ViewId(1), A, Src::Bytes(&[0; 9]), now(), &mut rec);
    let why = Rejection::ShortMessage { sender: A.0, len: 9 };
    assert_eq!(rec.take(), vec![Fx::Reject { reader: 1, why: why.clone() }, Fx::Reject { reader: 2, why }]);
    assert_eq!(e.next_seq(), 0);
}

#[test]
fn a_late_joiner_holds_live_samples_until_the_history_lands_then_numbers_them_from_the_seam() {
    let qos = Qos::volatile(Keep::KeepLast(8));
    let (mut e, mut rec) = with_reader(qos, 1, Level::Unordered);
    assert_eq!(e.enter_view(ViewId(4), &entry(qos), &[A, ME], now(), &mut rec), Some(vec![A]));
    assert_eq!(e.serve(ViewId(4), 0, false, 1 << 20, false, now()), Served::New { seam: 0 }, "not complete");
    rec.take();
    e.deliver(ViewId(4), A, Src::Bytes(&member(1, 11)), now(), &mut rec);
    e.deliver(ViewId(4), A, Src::Bytes(&member(1, 12)), now(), &mut rec);
    assert!(offers(&rec.take()).is_empty(), "live samples wait for the history");
    let history: Vec<Entry> =
        [9, 10].iter().map(|n| Entry { seq: n - 1, view: ViewId(3), node: A.0, bytes: member(1, *n) }).collect();
    e.caught_up(history, Some(10), &[], None, now(), &mut rec);
    let fx = rec.take();
    assert_eq!(offers(&fx), vec![(1, 8, true), (1, 9, true), (1, 10, false), (1, 11, false)]);
    assert!(fx.contains(&Fx::Entered), "whoever waits for the join to end is woken");
    assert_eq!(
        e.seam_of(ViewId(4)),
        Some(&Seam { view: ViewId(4), seq: 10, complete: true, joined: true, seen: Vec::new() })
    );
    assert_eq!(e.next_seq(), 12);
}

#[test]
fn a_late_join_without_history_is_reported_and_live_samples_still_flow() {
    let qos = Qos::volatile(Keep::KeepLast(8));
    let (mut e, mut rec) = with_reader(qos, 1, Level::Unordered);
    e.enter_view(ViewId(4), &entry(qos), &[A, ME], now(), &mut rec);
    e.deliver(ViewId(4), A, Src::Bytes(&member(1, 1)), now(), &mut rec);
    rec.take();
    e.caught_up(Vec::new(), None, &[], Some(CatchUpError::NoAnswer), now(), &mut rec);
    let fx = rec.take();
    assert!(fx.contains(&Fx::Reject { reader: 1, why: Rejection::NoHistory(CatchUpError::NoAnswer) }));
    assert!(fx.contains(&Fx::CatchUpFailed(CatchUpError::NoAnswer)));
    assert_eq!(offers(&fx), vec![(1, 0, false)]);
}

#[test]
fn serving_a_joiner_answers_by_what_this_node_knows_of_the_view() {
    let qos = Qos::volatile(Keep::KeepLast(8));
    let mut e = engine(qos);
    let mut rec = Recorder::default();
    e.enter_view(ViewId(2), &entry(qos), &[ME], now(), &mut rec);
    for n in 1..=5 {
        e.deliver(ViewId(2), ME, Src::Bytes(&member(1, n)), now(), &mut rec);
    }
    e.enter_view(ViewId(3), &entry(qos), &[A, ME], now(), &mut rec);
    e.deliver(ViewId(3), ME, Src::Bytes(&member(1, 6)), now(), &mut rec);
    assert_eq!(e.serve(ViewId(9), 0, false, 1 << 20, false, now()), Served::NotBegun);
    assert_eq!(e.serve(ViewId(1), 0, false, 1 << 20, false, now()), Served::TooOld);
    let Served::Entries { seam, entries, more, .. } = e.serve(ViewId(3), 1, false, 1 << 20, false, now()) else {
        panic!("entries")
    };
    assert_eq!((seam, more), (5, false));
    assert_eq!(entries.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4], "from 1, before the seam");
    let Served::Entries { entries, more, .. } = e.serve(ViewId(3), 0, false, 1, false, now()) else { panic!() };
    assert_eq!((entries.len(), more), (1, true), "a page holds one entry at least");
    assert!(matches!(e.serve(ViewId(3), 0, false, 1, true, now()), Served::Entries { .. }), "memory holds it all");
    let mut short = engine(Qos::volatile(Keep::KeepLast(2)));
    short.enter_view(ViewId(2), &entry(qos), &[ME], now(), &mut rec);
    for n in 1..=5 {
        short.deliver(ViewId(2), ME, Src::Bytes(&member(1, n)), now(), &mut rec);
    }
    short.enter_view(ViewId(3), &entry(qos), &[A, ME], now(), &mut rec);
    assert_eq!(
        short.serve(ViewId(3), 0, false, 1, true, now()),
        Served::FromLog { seam: 5, seen: Vec::new() },
        "what memory lacks"
    );
    assert!(matches!(short.serve(ViewId(3), 3, false, 1, true, now()), Served::Entries { .. }));
}

/// A member's sample of writer `w`, number `seq`, written at `at`.
fn member_at(w: u32, seq: u64, at: SystemTime) -> Vec<u8> {
    let mut b: Vec<u8> = crate::sample::header(w, seq, at).iter().flat_map(|x| x.to_le_bytes()).collect();
    b.extend_from_slice(&seq.to_le_bytes());
    b
}

#[test]
fn a_joiner_that_fills_a_log_gets_every_entry_also_those_past_the_lifespan() {
    let life = std::time::Duration::from_secs(60);
    let qos = Qos::logged(Keep::KeepLast(8)).lifespan(life);
    let (mut e, mut rec) = (engine(qos), Recorder::default());
    e.enter_view(ViewId(2), &entry(qos), &[ME], now(), &mut rec);
    // The second sample (topic number 1) was written two minutes ago: past its
    // lifespan; numbers 0 and 2 are not.
    let old = SystemTime::now() - 2 * life;
    for (n, at) in [(1, SystemTime::now()), (2, old), (3, SystemTime::now())] {
        e.deliver(ViewId(2), ME, Src::Bytes(&member_at(1, n, at)), now(), &mut rec);
    }
    e.enter_view(ViewId(3), &entry(qos), &[A, ME], now(), &mut rec);
    let seqs = |s: Served| match s {
        Served::Entries { entries, seam: 3, more: false, .. } => entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(seqs(e.serve(ViewId(3), 0, false, 1 << 20, true, now())), vec![0, 1, 2], "a log has no hole");
    assert_eq!(seqs(e.serve(ViewId(3), 0, false, 1 << 20, false, now())), vec![0, 2], "readers' history: none past it");
}

#[test]
fn client_readers_get_what_is_delivered_from_their_start_and_their_history_in_pages() {
    let qos = Qos::volatile(Keep::KeepLast(3));
    let mut e = engine(qos);
    let mut rec = Recorder::default();
    for n in 1..=5 {
        e.deliver(ViewId(1), A, Src::Bytes(&member(1, n)), now(), &mut rec);
    }
    let start = e.add_client_reader(40, 2, Level::Unordered, Some(0));
    assert_eq!(start, ClientStart { lost: 2, history: (2, 5) }, "resumed at 0: 0 and 1 are gone");
    let page = e.client_history(40, 2, start.history, 1 << 20, now()).unwrap();
    assert_eq!(page.entries.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3, 4]);
    assert_eq!(page.next, 5);
    assert!(e.client_history(40, 9, start.history, 1 << 20, now()).is_none(), "no such reader");
    rec.take();
    e.deliver(ViewId(1), A, Src::Bytes(&member(1, 6)), now(), &mut rec);
    let fx = rec.take();
    assert!(matches!(&fx[..], [Fx::Relay { info, to, .. }] if info.topic_seq == 5 && to == &[(40, 2)]), "{fx:?}");
    assert_eq!(e.client_counts(), (0, 1));
    e.forget_client(40);
    e.deliver(ViewId(1), A, Src::Bytes(&member(1, 7)), now(), &mut rec);
    assert!(rec.take().is_empty(), "a forgotten client gets nothing");
}

/// (writer number, seq, topic_seq) of each offer.
fn offered(fx: &[Fx]) -> Vec<(u32, u64, u64)> {
    fx.iter()
        .filter_map(|f| match f {
            Fx::Offer { info, .. } => Some((info.writer.id, info.seq, info.topic_seq)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_pack_is_delivered_as_its_samples_one_by_one() {
    let (mut e, mut rec) = with_reader(Qos::volatile(Keep::KeepAll), 7, Level::Ordered);
    e.add_writer(3, Level::Volatile);
    // An odd-length payload in the middle: the next sample starts on a whole word.
    let mut odd = member(3, 2);
    odd.extend_from_slice(b"abc");
    e.deliver(ViewId(1), ME, Src::Bytes(&pack_bytes(&[member(3, 1), odd.clone(), member(3, 3)])), now(), &mut rec);
    e.deliver(ViewId(1), A, Src::Bytes(&member(1, 1)), now(), &mut rec);
    let fx = rec.take();
    assert_eq!(offered(&fx), vec![(3, 1, 0), (3, 2, 1), (3, 3, 2), (1, 1, 3)]);
    let bytes: Vec<&Vec<u8>> =
        fx.iter().filter_map(|f| if let Fx::Offer { bytes, .. } = f { Some(bytes) } else { None }).collect();
    assert_eq!(bytes[1], &odd, "each sample's own bytes, without the padding");
    assert_eq!(e.delivered(3), Some(3), "each of this node's samples counted");
    assert_eq!(e.next_seq(), 4);
}

#[test]
fn a_pack_that_does_not_hold_what_it_says_is_refused_where_it_goes_wrong() {
    let (mut e, mut rec) = with_reader(Qos::ordered(), 7, Level::Ordered);
    let bad = BadPackCase::all();
    for (what, bytes, good) in &bad {
        e.deliver(ViewId(1), A, Src::Bytes(bytes), now(), &mut rec);
        let fx = rec.take();
        let before = e.next_seq() - *good as u64;
        let want: Vec<(u32, u64, u64)> = (0..*good as u64).map(|k| (1, k + 1, before + k)).collect();
        assert_eq!(offered(&fx), want, "{what}: the samples before the fault stand");
        assert_eq!(fx.last(), Some(&Fx::Reject { reader: 7, why: Rejection::BadPack { sender: A.0 } }), "{what}");
    }
}

/// Packs that are refused: (what is wrong, the bytes, samples delivered before).
struct BadPackCase;

impl BadPackCase {
    fn all() -> Vec<(&'static str, Vec<u8>, usize)> {
        let ok = || vec![member(1, 1), member(1, 2)];
        let mut past_end = pack_bytes(&ok());
        past_end.truncate(past_end.len() - 8);
        let mut says_more = pack_bytes(&ok());
        says_more[..8].copy_from_slice(&crate::sample::pack_word(3).to_le_bytes());
        let nested = pack_bytes(&[member(1, 1), pack_bytes(&ok())]);
        let with_client = pack_bytes(&[member(1, 1), client(9, 0, Level::Ordered, 1)]);
        let short_part = pack_bytes(&[member(1, 1), vec![0; 8]]);
        let mut huge_len = pack_bytes(&ok());
        huge_len[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        vec![
            ("a length past the end", past_end, 1),
            ("a count past the end", says_more, 2),
            ("a pack in a pack", nested, 1),
            ("a client sample in a pack", with_client, 1),
            ("a part shorter than a header", short_part, 1),
            ("a length that overflows", huge_len, 0),
        ]
    }
}

#[test]
fn a_topic_nobody_reads_here_numbers_every_sample_and_acknowledges_its_own() {
    let qos = Qos::ordered();
    let (mut e, mut rec) = (engine(qos), Recorder::default());
    e.add_writer(3, Level::Ordered);
    assert_eq!(e.enter_view(ViewId(1), &entry(qos), &[ME], now(), &mut rec), None, "first here: no catch-up");
    rec.take();
    // No reader, no client reader, no history: the samples only take their numbers.
    for (from, bytes) in [(ME, member(3, 1)), (A, member(1, 1)), (ME, member(3, 2))] {
        e.deliver(ViewId(1), from, Src::Bytes(&bytes), now(), &mut rec);
    }
    e.batch_end(&mut rec);
    let own = vec![Fx::DeliveredOwn { writer: 3, seq: 1 }, Fx::DeliveredOwn { writer: 3, seq: 2 }, Fx::Flush];
    assert_eq!(rec.take(), own, "its own writer's, in order, and nothing else");
    assert_eq!(e.delivered(3), Some(2));
    // A client's sample still goes through the resend filter: its second copy is
    // not numbered.
    let c = client(9, 1, Level::Ordered, 1);
    e.deliver(ViewId(1), A, Src::Bytes(&c), now(), &mut rec);
    e.deliver(ViewId(1), A, Src::Bytes(&c), now(), &mut rec);
    assert_eq!(e.next_seq(), 4, "three member samples and one client sample");
    // A reader that comes now gets the next sample with the number every member gives it.
    e.add_reader(LocalReader { id: 5, level: Level::Unordered, handle: 5 }, now(), &mut rec);
    rec.take();
    e.deliver(ViewId(1), A, Src::Bytes(&member(1, 2)), now(), &mut rec);
    assert_eq!(offers(&rec.take()), vec![(5, 4, false)]);
}

#[test]
fn a_batch_on_the_lean_path_has_the_effects_of_its_messages_one_by_one() {
    // Writers 3 and 4 here, 7 unknown (deleted); other members' samples, client
    // samples, packs and short messages in between, in runs of every length.
    let pick = |i: u64| -> (NodeId, Vec<u8>) {
        match i % 11 {
            0..=3 => (ME, member(3, i + 1)),
            4 | 5 => (ME, member(4, i + 1)),
            6 => (A, member(1, i + 1)),
            7 => (ME, member(7, i + 1)),
            8 => (A, client(9, 1, Level::Ordered, i + 1)),
            9 => (ME, pack_bytes(&[member(3, 1000 + i), member(4, 1000 + i)])),
            _ => (A, vec![0; 9]),
        }
    };
    let mut seed = 7u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        seed >> 33
    };
    for round in 0..50 {
        let batch: Vec<(NodeId, Vec<u8>)> = (0..1 + next() % 24).map(|_| pick(next())).collect();
        let mut two = [(engine(Qos::ordered()), Recorder::default()), (engine(Qos::ordered()), Recorder::default())];
        for (e, rec) in &mut two {
            e.add_writer(3, Level::Ordered);
            e.add_writer(4, Level::Ordered);
            assert_eq!(e.enter_view(ViewId(1), &entry(Qos::ordered()), &[ME], now(), rec), None);
            rec.take();
        }
        let [(one, r1), (all, r2)] = &mut two;
        for (from, bytes) in &batch {
            one.deliver(ViewId(1), *from, Src::Bytes(bytes), now(), r1);
        }
        all.deliver_all(ViewId(1), batch.iter().map(|(from, b)| (*from, Src::Bytes(b))), now(), r2);
        assert_eq!(r1.take(), r2.take(), "round {round}: {batch:?}");
        assert_eq!(one.next_seq(), all.next_seq(), "round {round}");
        for w in [3, 4, 7] {
            assert_eq!(one.delivered(w), all.delivered(w), "round {round}, writer {w}");
        }
    }
}
