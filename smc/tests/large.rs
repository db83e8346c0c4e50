//! Messages larger than a slot: their payload in the sender's arena, a descriptor in
//! the slot, the same total order as small ones; the arena's room and back-pressure;
//! lying entries refused. Driven by hand through `Sim::manual`.

use spindle_smc::sim::Sim;
use spindle_smc::{Mode, SendError, SubgroupSpec};
use spindle_sst::predicate::Pushes;
use spindle_sst::transport::NodeId;

/// `n` members, every one of `senders` sending, slots of 8 bytes, an arena of `arena`.
fn spec(n: u32, senders: &[u32], window: usize, arena: usize) -> SubgroupSpec {
    SubgroupSpec {
        members: (0..n).map(NodeId).collect(),
        senders: senders.iter().copied().map(NodeId).collect(),
        window,
        max_msg: 8,
        arena,
        mode: Mode::Ordered,
        relay: false,
    }
}

fn bytes(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| tag.wrapping_add(i as u8)).collect()
}

/// Receive and send stages everywhere (no delivery), and every write applied.
fn settle(sim: &mut Sim) {
    for _ in 0..10 {
        for i in 0..sim.nodes.len() {
            let mut p = Pushes::default();
            sim.nodes[i].core.poll(&mut p);
            sim.post(i, &mut p);
        }
        sim.flush();
    }
}

/// Delivers at node `i`: (sender, payload, large?) in order.
fn deliver(sim: &mut Sim, i: usize) -> Vec<(usize, Vec<u8>, bool)> {
    let Some(d) = sim.nodes[i].core.take_deliverable() else { return Vec::new() };
    d.batch.iter().for_each(|m| words_agree(&m));
    let got = d.batch.iter().map(|m| (m.sender(), m.to_vec(), m.is_large())).collect();
    let mut p = Pushes::default();
    sim.nodes[i].core.finish(d, &mut p);
    sim.post(i, &mut p);
    got
}

/// Delivers at every node until nothing more comes; each node's sequence.
fn drain(sim: &mut Sim) -> Vec<Vec<(usize, Vec<u8>, bool)>> {
    let mut logs = vec![Vec::new(); sim.nodes.len()];
    for _ in 0..10 {
        settle(sim);
        for (i, log) in logs.iter_mut().enumerate() {
            log.extend(deliver(sim, i));
        }
    }
    logs
}

#[test]
fn large_messages_take_their_place_in_the_round_robin_order() {
    let mut sim = Sim::manual(spec(3, &[0, 1], 4, 256));
    assert!(sim.send(0, &bytes(1, 5)).unwrap());
    assert!(sim.send(0, &bytes(2, 100)).unwrap(), "a large message");
    assert!(sim.send(1, &bytes(3, 200)).unwrap(), "a large message");
    assert!(sim.send(1, &bytes(4, 8)).unwrap());
    let logs = drain(&mut sim);
    let want =
        vec![(0, bytes(1, 5), false), (1, bytes(3, 200), true), (0, bytes(2, 100), true), (1, bytes(4, 8), false)];
    for log in &logs {
        assert_eq!(log, &want, "round robin: 0.0, 1.0, 0.1, 1.1");
    }
}

#[test]
fn the_payload_is_pushed_before_its_descriptor_and_sent() {
    // One sender, 2 members, window 2: sent@0 wedged@8 received@16 delivered@24,
    // slots@32 (2 x 24 bytes), arena@80.
    let mut sim = Sim::manual(spec(2, &[0], 2, 64));
    let mut r = sim.nodes[0].core.reserve(40).unwrap();
    assert!(r.is_large());
    r.write(0, &bytes(9, 40));
    sim.nodes[0].core.commit(r);
    let mut p = Pushes::default();
    sim.nodes[0].core.poll(&mut p);
    let shape: Vec<(usize, usize)> = p.iter().map(|p| (p.offset, p.len)).collect();
    assert_eq!(
        shape,
        vec![(80, 40), (32, 24), (0, 8), (16, 8)],
        "payload, then the descriptor's slot, then sent, then received"
    );
    sim.post(0, &mut p);
    r = sim.nodes[0].core.reserve(24).unwrap();
    assert!(r.is_large());
    r.write(0, &bytes(7, 24));
    sim.nodes[0].core.commit(r);
    let logs = drain(&mut sim);
    assert_eq!(logs[1], vec![(0, bytes(9, 40), true), (0, bytes(7, 24), true)]);
}

#[test]
fn a_full_arena_waits_until_its_room_is_delivered_everywhere() {
    let mut sim = Sim::manual(spec(2, &[0], 8, 64));
    assert!(sim.send(0, &bytes(1, 40)).unwrap());
    assert_eq!(sim.nodes[0].core.reserve(40), Err(SendError::Full), "24 bytes left: no room for 40");
    assert!(sim.send(0, &bytes(2, 8)).unwrap(), "small messages still go: slots are free");
    // Node 1 delivers message 0, but node 0 has not yet: the room stays taken.
    settle(&mut sim);
    let at1 = deliver(&mut sim, 1);
    assert_eq!(at1.len(), 2);
    sim.flush();
    assert_eq!(sim.nodes[0].core.reserve(40), Err(SendError::Full), "node 0 itself has not delivered it");
    deliver(&mut sim, 0);
    settle(&mut sim);
    let r = sim.nodes[0].core.reserve(40).expect("delivered everywhere: the room is free");
    sim.nodes[0].core.commit(r);
}

#[test]
fn too_large_names_the_largest_message() {
    let mut sim = Sim::manual(spec(2, &[0], 2, 64));
    assert_eq!(sim.nodes[0].core.reserve(65), Err(SendError::TooLarge { len: 65, max: 64 }));
    let mut small = Sim::manual(spec(2, &[0], 2, 0));
    assert_eq!(small.nodes[0].core.reserve(9), Err(SendError::TooLarge { len: 9, max: 8 }), "no arena: max_msg");
}

/// Node 1's copy of sender 0's row gets entry 0 = `entry` and `sent` = 1.
fn refused_after(entry: [u64; 3]) -> Vec<(NodeId, String)> {
    let mut sim = Sim::manual(spec(2, &[0], 2, 64));
    // Sender 0's row starts at 0 of node 1's region: slot 0 at 32, sent at 0.
    sim.forge(1, 32, &entry);
    sim.forge(1, 0, &[1]);
    let mut p = Pushes::default();
    assert!(!sim.nodes[1].core.poll(&mut p), "nothing taken");
    assert!(sim.nodes[1].core.take_deliverable().is_none());
    assert_eq!(sim.nodes[1].core.received(), &[0], "nothing counted as received");
    assert!(!sim.nodes[1].core.has_work(), "a refused sender is not looked at again (no spinning)");
    sim.nodes[1].core.take_refused()
}

#[test]
fn lying_entries_are_refused_and_name_their_sender() {
    const DATA: u64 = 1;
    const NULL: u64 = 2;
    const LARGE: u64 = 3;
    let lies: [([u64; 3], &str); 8] = [
        ([DATA | (9 << 32), 0, 0], "a message longer than a slot"),
        ([NULL, 0, 0], "a null run of nothing"),
        ([LARGE | (40 << 32), 0, 32], "a payload past the arena's end"),
        ([LARGE | (40 << 32), 0, 4], "a payload off a word boundary"),
        ([LARGE | (65 << 32), 0, 0], "a payload longer than the arena"),
        ([LARGE | (8 << 32), 0, 0], "a descriptor of what fits a slot"),
        ([7 | (8 << 32), 0, 0], "an unknown kind"),
        ([DATA | (8 << 32), 5, 0], "an index out of sequence"),
    ];
    for (entry, what) in lies {
        let refused = refused_after(entry);
        assert_eq!(refused.len(), 1, "{what}: {refused:?}");
        assert_eq!(refused[0].0, NodeId(0), "{what}");
    }
    // An honest descriptor passes the same checks.
    let mut sim = Sim::manual(spec(2, &[0], 2, 64));
    sim.forge(1, 80, &[0x0102_0304_0506_0708; 5]);
    sim.forge(1, 32, &[LARGE | (40 << 32), 0, 0]);
    sim.forge(1, 0, &[1]);
    assert!(sim.nodes[1].core.poll(&mut Pushes::default()));
    assert!(sim.nodes[1].core.take_refused().is_empty());
    assert_eq!(sim.nodes[1].core.received(), &[1]);
}

/// A message's words read at once (`Message::words`, from any first word) are its
/// bytes, as `word` reads them one by one.
fn words_agree(m: &spindle_smc::Message<'_>) {
    let bytes = m.to_vec();
    let n = m.len().div_ceil(8);
    for first in 0..n.min(3) {
        let mut got = vec![0u64; n - first];
        m.words(first, &mut got);
        for (i, w) in got.iter().enumerate() {
            let mut b = [0u8; 8];
            let at = (first + i) * 8;
            let end = (at + 8).min(bytes.len());
            b[..end - at].copy_from_slice(&bytes[at..end]);
            assert_eq!(*w, u64::from_le_bytes(b), "word {} of a {}-byte message", first + i, m.len());
            assert_eq!(*w, m.word(first + i));
        }
    }
}

#[test]
fn a_burst_of_large_messages_goes_out_a_few_megabytes_per_pass() {
    // Three payloads of 2.5 MB committed at once: the first pass pushes two (5 MB,
    // past the 4 MiB a pass takes) with their slots, `sent` and `received`, the next
    // the third.
    let mut sim = Sim::manual(spec(2, &[0], 4, 8 << 20));
    for k in 0..3u8 {
        assert!(sim.send(0, &bytes(k, 2_500_000)).unwrap(), "a large message");
    }
    let mut p = Pushes::default();
    sim.nodes[0].core.poll(&mut p);
    let lens: Vec<usize> = p.iter().map(|p| p.len).collect();
    assert_eq!(lens[..2], [2_500_000, 2_500_000], "two payloads first: {lens:?}");
    assert_eq!(lens.len(), 5, "then one slot write, `sent` and `received`: {lens:?}");
    sim.post(0, &mut p);
    sim.flush();
    let mut p = Pushes::default();
    sim.nodes[1].core.poll(&mut p);
    assert_eq!(sim.nodes[1].core.received(), &[2], "`sent` covered the first two only");
    sim.post(1, &mut p);
    let mut p = Pushes::default();
    sim.nodes[0].core.poll(&mut p);
    let lens: Vec<usize> = p.iter().map(|p| p.len).collect();
    assert_eq!(lens.iter().filter(|l| **l == 2_500_000).count(), 1, "the next pass pushes the third: {lens:?}");
    sim.post(0, &mut p);
    let logs = drain(&mut sim);
    let want: Vec<_> = (0..3u8).map(|k| (0, bytes(k, 2_500_000), true)).collect();
    assert_eq!(logs[1], want);
}

#[test]
fn lies_right_after_an_honest_message_are_refused_too() {
    const DATA: u64 = 1;
    // The receive stage lengthens a run of plain messages without building an
    // entry: the checks must hold there as well. Window 2, max_msg 8: slot 1 at
    // 32 + 24.
    let lies: [([u64; 2], &str); 3] = [
        ([DATA | (9 << 32), 1], "a message longer than a slot"),
        ([DATA | (8 << 32), 5], "an index out of sequence"),
        ([DATA | (8 << 32), 0], "an index taken again"),
    ];
    for (entry, what) in lies {
        let mut sim = Sim::manual(spec(2, &[0], 2, 64));
        sim.forge(1, 32, &[DATA | (8 << 32), 0]);
        sim.forge(1, 32 + 24, &entry);
        sim.forge(1, 0, &[2]);
        assert!(sim.nodes[1].core.poll(&mut Pushes::default()), "{what}: the honest message is taken");
        assert_eq!(sim.nodes[1].core.received(), &[1], "{what}: only the honest message is received");
        let refused = sim.nodes[1].core.take_refused();
        assert_eq!(refused.len(), 1, "{what}: {refused:?}");
        assert_eq!(refused[0].0, NodeId(0), "{what}");
    }
}
