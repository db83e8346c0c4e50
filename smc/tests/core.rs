//! What the core emits for given row states: exact pushes, null runs, delivery order,
//! slot reuse, modes and errors. Driven by hand through `Sim::manual`.

use spindle_smc::sim::Sim;
use spindle_smc::{Mode, SendError, SubgroupSpec};
use spindle_sst::predicate::Pushes;
use spindle_sst::transport::NodeId;

fn spec(n: u32, senders: &[u32], window: usize, max_msg: usize, mode: Mode) -> SubgroupSpec {
    SubgroupSpec {
        members: (0..n).map(NodeId).collect(),
        senders: senders.iter().copied().map(NodeId).collect(),
        window,
        max_msg,
        arena: 0,
        mode,
        relay: false,
    }
}

/// (offset, len, targets) of each push.
fn shape(p: &Pushes) -> Vec<(usize, usize, Vec<u32>)> {
    p.iter().map(|p| (p.offset, p.len, p.targets().map(|t| t.0).collect())).collect()
}

/// One pass at node `i`, returning what it pushed (then posting it).
fn poll(sim: &mut Sim, i: usize) -> Vec<(usize, usize, Vec<u32>)> {
    let mut p = Pushes::default();
    sim.nodes[i].core.poll(&mut p);
    let s = shape(&p);
    sim.post(i, &mut p);
    s
}

/// Delivers at node `i`: (sender, index, payload) in order.
fn deliver(sim: &mut Sim, i: usize) -> Vec<(usize, u64, Vec<u8>)> {
    let Some(d) = sim.nodes[i].core.take_deliverable() else { return Vec::new() };
    let got = d.batch.iter().map(|m| (m.sender(), m.index(), m.to_vec())).collect();
    let mut p = Pushes::default();
    sim.nodes[i].core.finish(d, &mut p);
    sim.post(i, &mut p);
    got
}

/// Passes and flushes until nothing moves.
fn settle(sim: &mut Sim) {
    for _ in 0..10 {
        for i in 0..sim.nodes.len() {
            sim.pass(i).unwrap();
        }
        sim.flush();
    }
}

// Row layout for 1 sender, max_msg 8: sent@0 wedged@8 received@16 delivered@24
// slots@32, each slot 16 (header) + 8 = 24 bytes.
const SLOTS: usize = 32;
const SLOT: usize = 24;

#[test]
fn send_stage_pushes_all_new_slots_in_one_write_then_sent() {
    let mut sim = Sim::manual(spec(3, &[0], 4, 8, Mode::Ordered));
    for k in 0..3u8 {
        assert!(sim.send(0, &[k; 8]).unwrap());
    }
    // Slots 0..3 (header of the first through the payload of the last), then `sent`,
    // then `received`: the own entries count as received in the same pass.
    assert_eq!(
        poll(&mut sim, 0),
        vec![(SLOTS, 2 * SLOT + 16 + 8, vec![1, 2]), (0, 8, vec![1, 2]), (16, 8, vec![1, 2])]
    );
    assert_eq!(sim.nodes[0].core.received(), &[3]);
    assert_eq!(poll(&mut sim, 0), vec![], "nothing new");
    assert_eq!(sim.nodes[0].core.stats().send_batches.max, 3);
}

#[test]
fn a_wrapping_batch_is_two_slot_writes() {
    let mut sim = Sim::manual(spec(2, &[0], 4, 8, Mode::Ordered));
    for k in 0..3u8 {
        sim.send(0, &[k; 8]).unwrap();
    }
    settle(&mut sim);
    assert_eq!(deliver(&mut sim, 1).len(), 0, "settle delivered already");
    for k in 3..6u8 {
        assert!(sim.send(0, &[k; 8]).unwrap(), "slots of delivered messages are free");
    }
    // Entries 3, 4, 5 sit in slots 3, 0, 1.
    assert_eq!(
        poll(&mut sim, 0),
        vec![(SLOTS + 3 * SLOT, 16 + 8, vec![1]), (SLOTS, SLOT + 16 + 8, vec![1]), (0, 8, vec![1]), (16, 8, vec![1])]
    );
}

#[test]
fn receive_stage_takes_everything_and_pushes_received_once() {
    let mut sim = Sim::manual(spec(2, &[0], 8, 8, Mode::Ordered));
    for k in 0..5u8 {
        sim.send(0, &[k; 8]).unwrap();
    }
    poll(&mut sim, 0);
    sim.flush();
    // Window 8: a row is 32 + 8 * 24 = 224 bytes, padded to 256; node 1's `received` is at 256 + 16.
    assert_eq!(poll(&mut sim, 1), vec![(256 + 16, 8, vec![0])], "one received push, to the others only");
    assert_eq!(sim.nodes[1].core.received(), &[5]);
    assert_eq!(sim.nodes[1].core.stats().recv_batches.max, 5);
}

#[test]
fn delivery_waits_for_every_member_then_delivers_in_order() {
    let mut sim = Sim::manual(spec(3, &[0], 8, 8, Mode::Ordered));
    sim.send(0, b"first!!!").unwrap();
    sim.send(0, b"second!!").unwrap();
    poll(&mut sim, 0); // sends both, and counts them received in the same pass
    sim.flush();
    poll(&mut sim, 1); // node 1 received both
    sim.flush();
    assert!(deliver(&mut sim, 1).is_empty(), "node 2 has not acknowledged them yet");
    poll(&mut sim, 2); // node 2 receives them and pushes received
    sim.flush();
    let got = deliver(&mut sim, 1);
    assert_eq!(got, vec![(0, 0, b"first!!!".to_vec()), (0, 1, b"second!!".to_vec())]);
    assert_eq!(sim.nodes[1].core.delivered(), &[2]);
    assert_eq!(sim.nodes[1].core.stats().deliver_batches.max, 2, "one batch");
}

/// Sends `per` messages from each sender, lets every node receive them (no
/// delivery yet), then delivers at node 1 batch by batch: the batches' sizes.
fn batch_sizes(senders: &[u32], window: usize, per: u64) -> Vec<usize> {
    let mut sim = Sim::manual(spec(3, senders, window, 8, Mode::Ordered));
    let mut expect = Vec::new();
    for k in 0..per {
        for &s in senders {
            assert!(sim.send(s as usize, &k.to_le_bytes()).unwrap());
            expect.push((senders.iter().position(|x| *x == s).unwrap(), k));
        }
    }
    for _ in 0..3 {
        for i in 0..3 {
            poll(&mut sim, i);
        }
        sim.flush();
    }
    let mut sizes = Vec::new();
    let mut got = Vec::new();
    loop {
        let batch = deliver(&mut sim, 1);
        if batch.is_empty() {
            break;
        }
        sizes.push(batch.len());
        got.extend(batch.into_iter().map(|(r, k, _)| (r, k)));
    }
    // Round-robin order over the senders, every message once.
    expect.sort_by_key(|(r, k)| (*k, *r));
    assert_eq!(got, expect, "the batches together deliver the order");
    sizes
}

#[test]
fn an_ordered_batch_holds_at_most_a_quarter_of_the_window() {
    // One sender (its own path): window 2048, batches of 512.
    assert_eq!(batch_sizes(&[0], 2048, 1200), vec![512, 512, 176]);
    // Two senders: the same bound over the round-robin order.
    assert_eq!(batch_sizes(&[0, 2], 2048, 600), vec![512, 512, 176]);
    // A smaller window is not cut below 256 messages.
    assert_eq!(batch_sizes(&[0], 512, 300), vec![256, 44]);
    assert_eq!(batch_sizes(&[0], 256, 256), vec![256]);
}

#[test]
fn a_lagging_sender_owes_one_null_run() {
    // Senders 0 and 1; sender 1 sends five messages, sender 0 nothing.
    let mut sim = Sim::manual(spec(2, &[0, 1], 8, 8, Mode::Ordered));
    for k in 0..5u8 {
        sim.send(1, &[k; 8]).unwrap();
    }
    poll(&mut sim, 1);
    sim.flush();
    // Node 0 (rank 0 < 1) received index 4 of sender 1: it must fill its indices 0..=4.
    let pushes = poll(&mut sim, 0);
    assert_eq!(pushes.len(), 3, "received, one null-run slot write, sent: {pushes:?}");
    let st = sim.nodes[0].core.stats();
    assert_eq!((st.nulls, st.null_runs, st.messages_sent), (5, 1, 0));
    settle(&mut sim);
    for i in 0..2 {
        let st = sim.nodes[i].core.stats();
        assert_eq!(st.messages_delivered, 5, "node {i} delivered sender 1's messages past the nulls");
    }
    // The higher-ranked sender owes nothing for a lower-ranked one's index it matches.
    assert_eq!(sim.nodes[1].core.stats().nulls, 0);
}

#[test]
fn round_robin_order_across_senders() {
    let mut sim = Sim::manual(spec(3, &[0, 1], 8, 8, Mode::Ordered));
    sim.send(1, b"b0......").unwrap();
    sim.send(0, b"a0......").unwrap();
    sim.send(0, b"a1......").unwrap();
    settle(&mut sim);
    // Node 2 is not a sender: it delivers all the same.
    // Order a0 (seq 0), b0 (seq 1), a1 (seq 2); b1 would be seq 3 and comes after a1,
    // so nobody owes a null.
    assert_eq!(sim.nodes[2].core.delivered(), &[2, 1]);
    assert_eq!(sim.nodes[2].core.stats().messages_delivered, 3);
    assert_eq!(sim.nodes[0].core.stats().nulls + sim.nodes[1].core.stats().nulls, 0);
    // Now sender 0 sends a2: sender 1 received index 2 of rank 0 and must fill its
    // index 1 (seq 3, before a2's seq 4) with one null.
    sim.send(0, b"a2......").unwrap();
    settle(&mut sim);
    assert_eq!(sim.nodes[1].core.stats().nulls, 1);
    assert_eq!(sim.nodes[2].core.delivered(), &[3, 2]);
    assert_eq!(sim.nodes[2].core.stats().messages_delivered, 4);
}

#[test]
fn a_full_window_refuses_until_delivered_everywhere() {
    let mut sim = Sim::manual(spec(2, &[0], 2, 8, Mode::Ordered));
    assert!(sim.send(0, &[1; 8]).unwrap());
    assert!(sim.send(0, &[2; 8]).unwrap());
    assert_eq!(sim.nodes[0].core.reserve(8), Err(SendError::Full));
    assert!(!sim.nodes[0].core.can_reserve());
    // Received everywhere is not enough: delivery reads slots in place.
    poll(&mut sim, 0);
    sim.flush();
    poll(&mut sim, 1);
    sim.flush();
    assert_eq!(sim.nodes[0].core.reserve(8), Err(SendError::Full));
    settle(&mut sim);
    assert!(sim.nodes[0].core.can_reserve());
    assert!(sim.send(0, &[3; 8]).unwrap());
}

#[test]
fn unordered_delivers_on_receipt() {
    let mut sim = Sim::manual(spec(3, &[0, 1], 4, 8, Mode::Unordered));
    sim.send(1, b"b0......").unwrap();
    poll(&mut sim, 1);
    sim.flush();
    poll(&mut sim, 2);
    // Node 2 delivers b0 at once: no stability wait, no nulls from sender 0.
    assert_eq!(deliver(&mut sim, 2), vec![(1, 0, b"b0......".to_vec())]);
    settle(&mut sim);
    assert_eq!(sim.nodes[0].core.stats().nulls, 0);
}

#[test]
fn send_errors() {
    let mut sim = Sim::manual(spec(2, &[0], 2, 8, Mode::Ordered));
    assert_eq!(sim.nodes[1].core.reserve(1), Err(SendError::NotSender));
    assert_eq!(sim.nodes[0].core.reserve(9), Err(SendError::TooLarge { len: 9, max: 8 }));
    // Reservations are independent: two may be open at once, up to the window.
    let r0 = sim.nodes[0].core.reserve(8).unwrap();
    let r1 = sim.nodes[0].core.reserve(8).unwrap();
    assert_eq!((r0.index(), r1.index()), (0, 1));
    assert_eq!(sim.nodes[0].core.reserve(4), Err(SendError::Full));
    r1.write(0, b"second!!");
    sim.nodes[0].core.commit(r1);
    assert_eq!(sim.nodes[0].core.committed_entries(), 0, "taken in only after the entry claimed before it");
    // A reservation given back becomes a null: its index is skipped, nothing is lost.
    sim.nodes[0].core.abandon(r0);
    assert_eq!(sim.nodes[0].core.committed_entries(), 2);
    poll(&mut sim, 0);
    sim.flush();
    poll(&mut sim, 1);
    poll(&mut sim, 0);
    sim.flush();
    assert_eq!(deliver(&mut sim, 1), vec![(0, 1, b"second!!".to_vec())]);
    sim.nodes[0].core.wedge();
    assert_eq!(sim.nodes[0].core.reserve(4), Err(SendError::Wedged));
}

#[test]
fn words_written_together_are_the_message_and_none_past_it() {
    let mut sim = Sim::manual(spec(2, &[0], 4, 16, Mode::Ordered));
    let r = sim.nodes[0].core.reserve(16).unwrap();
    r.write_words(0, &[u64::from_le_bytes(*b"two word"), u64::from_le_bytes(*b"s at one")]);
    sim.nodes[0].core.commit(r);
    // A 12-byte message holds two words (its last one padded): a third is refused.
    let r = sim.nodes[0].core.reserve(12).unwrap();
    let past = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.write_words(1, &[0, 0])));
    assert!(past.is_err(), "a word past the message's end is refused");
    r.write_words(0, &[u64::from_le_bytes(*b"twelve b"), u64::from_le_bytes(*b"ytes\0\0\0\0")]);
    sim.nodes[0].core.commit(r);
    // Not through the simulator's sends (it checks deliveries against those): by hand.
    poll(&mut sim, 0);
    sim.flush();
    poll(&mut sim, 1);
    sim.flush();
    assert_eq!(deliver(&mut sim, 1), vec![(0, 0, b"two words at one".to_vec()), (0, 1, b"twelve bytes".to_vec())]);
}

#[test]
fn delivery_up_to_a_cut_discards_the_rest() {
    let mut sim = Sim::manual(spec(2, &[0, 1], 8, 8, Mode::Ordered));
    for k in 0..3u8 {
        sim.send(0, &[k; 8]).unwrap();
        sim.send(1, &[10 + k; 8]).unwrap();
    }
    poll(&mut sim, 0);
    poll(&mut sim, 1);
    sim.flush();
    poll(&mut sim, 0);
    poll(&mut sim, 1);
    // Node 0 has everything; deliver exactly sender 0's 0..2 and sender 1's 0..1.
    for i in 0..2 {
        sim.nodes[i].core.wedge();
    }
    let core = &mut sim.nodes[0].core;
    assert!(core.take_up_to_cut(&[2]).is_err(), "one count per sender");
    assert!(core.take_up_to_cut(&[9, 1]).is_err(), "cannot cut beyond what was received");
    let d = core.take_up_to_cut(&[2, 1]).unwrap();
    let got: Vec<(usize, u64)> = d.batch.iter().map(|m| (m.sender(), m.index())).collect();
    assert_eq!(got, vec![(0, 0), (1, 0), (0, 1)]);
    let mut p = Pushes::default();
    core.finish(d, &mut p);
    assert_eq!(core.delivered(), &[2, 1]);
}

#[test]
fn a_run_that_grows_while_its_batch_is_out_is_delivered_once() {
    for mode in [Mode::Unordered, Mode::Ordered] {
        let mut sim = Sim::manual(spec(2, &[0], 8, 8, mode));
        let both = |sim: &mut Sim| {
            for _ in 0..2 {
                poll(sim, 0);
                poll(sim, 1);
                sim.flush();
            }
        };
        for k in 0..2u8 {
            sim.send(0, &[k; 8]).unwrap();
        }
        both(&mut sim);
        // Node 1 holds messages 0 and 1 as one run and hands them out...
        let d = sim.nodes[1].core.take_deliverable().expect("two messages");
        let first: Vec<u64> = d.batch.iter().map(|m| m.index()).collect();
        assert_eq!(first, vec![0, 1], "{mode:?}");
        // ... and takes message 2 into that run while the batch is out.
        sim.send(0, &[2; 8]).unwrap();
        both(&mut sim);
        let mut p = Pushes::default();
        sim.nodes[1].core.finish(d, &mut p);
        sim.post(1, &mut p);
        both(&mut sim);
        assert_eq!(deliver(&mut sim, 1), vec![(0, 2, vec![2; 8])], "{mode:?}: the run's rest, once");
    }
}
