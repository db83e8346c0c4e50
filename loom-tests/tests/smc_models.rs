//! loom models of smc's two concurrency rules, on the real code (see `models.rs` for
//! how to run them). Each has a buggy variant that must be caught.
#![cfg(loom)]
#![forbid(unsafe_code)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use spindle_smc::{Faults, Mode, SmcCore, SmcLayout, SubgroupSpec};
use spindle_sst::transport::{NodeId, RegionId};
use spindle_sst::{LayoutBuilder, Pushes, Region, Table};

const R: RegionId = RegionId(0);

/// Applies pushes from `src` to `dst` as the mem transport does (`copy_to`).
fn post(p: &mut Pushes, src: &Region, dst: &Region) {
    for push in p.drain() {
        src.copy_to(push.offset, dst, push.offset, push.len);
    }
}

// ---------------------------------------------------------------- (a) slot and arena reuse
//
// Two members, one sender, two messages, and room for only one of them: (a) a window
// of ONE slot and 8-byte messages, so message 1 can only go into the slot of message
// 0; (a2) a window of two slots but 16-byte messages through an arena that holds one
// payload, so only the arena rule makes message 1 wait. Node B delivers and checks
// each payload in place (word i is 100 (i + 1) + index); node A may reserve message 1
// only once B has delivered message 0. The buggy variants reuse the slot, or the
// arena's room, without waiting.

/// What one of the two reuse models runs.
#[derive(Clone, Copy)]
struct Reuse {
    window: usize,
    arena: usize,
    /// Message length (8: a slot; 16: past the slot, through the arena).
    len: usize,
    /// What must not be reused early (in the panic messages).
    what: &'static str,
}

const SLOT: Reuse = Reuse { window: 1, arena: 0, len: 8, what: "slot" };
const ARENA: Reuse = Reuse { window: 2, arena: 16, len: 16, what: "arena room" };

std::thread_local! {
    /// Executions in which the sender got to reuse the room (the model must reach it).
    static REUSES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Payload word `i` of message `index`.
fn word(i: usize, index: u64) -> u64 {
    100 * (i as u64 + 1) + index
}

/// One pass of a node: receive, nulls, send, deliver (checking payloads in place),
/// then post to the peer. Deliveries are counted in `delivered` before the post, so
/// the count is never behind what the peer can learn from the pushed column.
fn pass(core: &mut SmcCore, from: &Region, to: &Region, delivered: &AtomicU64, r: Reuse) {
    let mut p = Pushes::default();
    core.poll(&mut p);
    if let Some(d) = core.take_deliverable() {
        for m in d.batch.iter() {
            assert_eq!(m.is_large(), r.arena > 0);
            for i in 0..r.len / 8 {
                assert_eq!(m.word(i), word(i, m.index()), "{} overwritten before delivery", r.what);
            }
        }
        delivered.fetch_add(d.batch.len() as u64, Ordering::Release);
        core.finish(d, &mut p);
    }
    post(&mut p, from, to);
}

fn reuse(r: Reuse, faults: Faults) -> u64 {
    REUSES.with(|c| c.set(0));
    loom::model(move || {
        let members = [NodeId(0), NodeId(1)];
        let spec = SubgroupSpec {
            members: members.to_vec(),
            senders: vec![NodeId(0)],
            window: r.window,
            max_msg: 8,
            arena: r.arena,
            mode: Mode::Ordered,
            relay: false,
        };
        let lay = SmcLayout::new(&spec);
        let (ra, rb) = (Arc::new(Region::new(lay.table_bytes())), Arc::new(Region::new(lay.table_bytes())));
        let table =
            |me, r: &Arc<Region>| Table::create(lay.table_layout().clone(), &members, me, R, r.clone()).unwrap();
        let mut a = SmcCore::new(spec.clone(), table(NodeId(0), &ra));
        a.set_faults(faults);
        let mut b = SmcCore::new(spec, table(NodeId(1), &rb));
        let b_delivered = Arc::new(AtomicU64::new(0));

        let (ra2, rb2, bd) = (ra.clone(), rb.clone(), b_delivered.clone());
        let node_b = thread::spawn(move || {
            for _ in 0..3 {
                pass(&mut b, &rb2, &ra2, &bd, r);
            }
        });

        let send = |a: &mut SmcCore, k: u64| -> bool {
            match a.reserve(r.len) {
                Ok(res) => {
                    if k > 0 {
                        assert!(
                            b_delivered.load(Ordering::Acquire) >= k,
                            "{} of an undelivered message reused",
                            r.what
                        );
                    }
                    for i in 0..r.len / 8 {
                        res.write_word(i, word(i, res.index()));
                    }
                    a.commit(res);
                    true
                }
                Err(_) => false,
            }
        };
        let a_delivered = AtomicU64::new(0);
        assert!(send(&mut a, 0));
        for _ in 0..4 {
            pass(&mut a, &ra, &rb, &a_delivered, r);
            if send(&mut a, 1) {
                REUSES.with(|c| c.set(c.get() + 1));
                pass(&mut a, &ra, &rb, &a_delivered, r);
                break;
            }
        }
        node_b.join().unwrap();
    });
    REUSES.with(|c| c.get())
}

#[test]
fn smc_slot_never_reused_before_delivery() {
    let reuses = reuse(SLOT, Faults::default());
    assert!(reuses > 0, "no execution reached the reuse of the slot: the model checks nothing");
}

/// The buggy variant (run in a child: loom aborts on this panic, see
/// `loom_tests::expect_failure_in_child`).
#[test]
#[ignore = "run by smc_early_slot_reuse_is_caught in a child process"]
fn smc_early_slot_reuse_variant() {
    let _ = reuse(SLOT, Faults { reuse_early: true, ..Faults::default() });
}

#[test]
fn smc_early_slot_reuse_is_caught() {
    loom_tests::expect_failure_in_child("smc_early_slot_reuse_variant", "slot of an undelivered message reused");
}

#[test]
fn smc_arena_room_never_reused_before_delivery() {
    let reuses = reuse(ARENA, Faults::default());
    assert!(reuses > 0, "no execution reached the reuse of the arena: the model checks nothing");
}

#[test]
#[ignore = "run by smc_early_arena_reuse_is_caught in a child process"]
fn smc_early_arena_reuse_variant() {
    let _ = reuse(ARENA, Faults { arena_early: true, ..Faults::default() });
}

#[test]
fn smc_early_arena_reuse_is_caught() {
    loom_tests::expect_failure_in_child("smc_early_arena_reuse_variant", "arena room of an undelivered message reused");
}

// ---------------------------------------------------------------- (b) lock release before post
//
// The predicate thread computes a push under the state lock, releases the lock, then
// posts, copying the row's live words (Spindle §3.4). Another thread advances the same
// monotonic state meanwhile. With one poster, every post carries a state at least as
// new as the one computed under its lock, and the peer ends with the newest value any
// post carried. The buggy variant lets the other thread post too: two posters can
// land out of order and leave the peer with an older state.

fn lock_release_before_post(two_posters: bool) {
    loom::model(move || {
        let mut lb = LayoutBuilder::new();
        let c = lb.counter("state");
        let layout = lb.build();
        let local = Arc::new(Region::new(layout.table_bytes(1)));
        let peer = Arc::new(Region::new(layout.table_bytes(1)));
        let row = Arc::new(Table::create(layout, &[NodeId(0)], NodeId(0), R, local.clone()).unwrap());
        let lock = Arc::new(Mutex::new(()));
        let newest_posted = Arc::new(AtomicU64::new(0));
        let off = c.range().off;
        // A post: copy the live word (what `copy_to` does), remembering what it carried.
        let post = {
            let (local, peer, newest) = (local.clone(), peer.clone(), newest_posted.clone());
            move || {
                let v = local.load(off, Ordering::Relaxed);
                peer.apply_write(off, &[v]);
                newest.fetch_max(v, Ordering::Relaxed);
                v
            }
        };
        let (row2, lock2, post2) = (row.clone(), lock.clone(), post.clone());
        let other = thread::spawn(move || {
            let g = lock2.lock().unwrap();
            row2.advance(c, 2).ok();
            drop(g);
            if two_posters {
                post2();
            }
        });
        // The predicate thread: two passes, each computing under the lock, posting after.
        for target in [1, 1] {
            let g = lock.lock().unwrap();
            row.advance(c, target).ok();
            let computed = row.get(c);
            drop(g);
            let carried = post();
            assert!(carried >= computed, "a post carried {carried}, older than {computed} computed under the lock");
        }
        other.join().unwrap();
        assert_eq!(
            peer.load(off, Ordering::Acquire),
            newest_posted.load(Ordering::Relaxed),
            "stale state: the peer holds an older value than one already posted"
        );
    });
}

#[test]
fn one_poster_after_lock_release_carries_fresh_state() {
    lock_release_before_post(false);
}

#[test]
#[should_panic(expected = "stale state")]
fn two_posters_after_lock_release_are_caught() {
    lock_release_before_post(true);
}

// ---------------------------------------------------------------- (c) lock-free reservation
//
// A sender thread claims a slot without the core's lock (a CAS on the lease word) and
// publishes a message while the predicate thread runs passes that insert nulls (the
// `endless_nulls` fault keeps nulls owed on every pass). One member, window 2. Every
// published message must be delivered, intact, at its index. The buggy variant looks
// at the lease and then writes its null without the revoking CAS: a claim that falls
// in between takes the same entry, and the message is lost or overwritten.

std::thread_local! {
    /// Executions where the message went out and nulls were inserted around it.
    static RACED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A pass of a one-member subgroup: receive, nulls, send, deliver; returns the
/// delivered (index, first payload word) pairs. Pushes go nowhere (no peers).
fn solo_pass(core: &mut SmcCore, out: &mut Vec<(u64, u64)>) {
    let mut p = Pushes::default();
    core.poll(&mut p);
    if let Some(d) = core.take_deliverable() {
        out.extend(d.batch.iter().map(|m| (m.index(), m.word(0))));
        core.finish(d, &mut p);
    }
}

/// The core of a one-member subgroup whose member sends: window 2, 8-byte messages.
fn solo_core() -> SmcCore {
    let spec = SubgroupSpec {
        members: vec![NodeId(0)],
        senders: vec![NodeId(0)],
        window: 2,
        max_msg: 8,
        arena: 0,
        mode: Mode::Ordered,
        relay: false,
    };
    let lay = SmcLayout::new(&spec);
    let region = Arc::new(Region::new(lay.table_bytes()));
    let row = Table::create(lay.table_layout().clone(), &[NodeId(0)], NodeId(0), R, region).unwrap();
    SmcCore::new(spec, row)
}

fn lease_race(faults: Faults) -> u64 {
    RACED.with(|c| c.set(0));
    loom::model(move || {
        let mut core = solo_core();
        core.set_faults(faults);
        let sender = core.sender().expect("a sender");
        let app = thread::spawn(move || match sender.try_reserve(8) {
            Ok(r) => {
                r.write_word(0, 100 + r.index());
                Some(r.publish())
            }
            Err(_) => None,
        });
        let mut delivered = Vec::new();
        solo_pass(&mut core, &mut delivered);
        let sent = app.join().unwrap();
        for _ in 0..3 {
            solo_pass(&mut core, &mut delivered);
        }
        for &(index, word) in &delivered {
            assert_eq!(word, 100 + index, "lease violated: message {index} overwritten");
        }
        if let Some(index) = sent {
            assert!(
                delivered.iter().any(|&(i, _)| i == index),
                "lease violated: message {index} lost (delivered {delivered:?})"
            );
            if core.stats().nulls > 0 {
                RACED.with(|c| c.set(c.get() + 1));
            }
        }
    });
    RACED.with(|c| c.get())
}

#[test]
fn smc_claims_and_nulls_never_share_an_entry() {
    let raced = lease_race(Faults { endless_nulls: true, ..Faults::default() });
    assert!(raced > 0, "no execution sent the message among nulls: the model checks nothing");
}

#[test]
#[ignore = "run by smc_nulls_without_revoking_the_lease_are_caught in a child process"]
fn smc_nulls_without_revoke_variant() {
    let _ = lease_race(Faults { endless_nulls: true, null_without_revoke: true, ..Faults::default() });
}

#[test]
fn smc_nulls_without_revoking_the_lease_are_caught() {
    loom_tests::expect_failure_in_child("smc_nulls_without_revoke_variant", "lease violated");
}

// ---------------------------------------------------------------- (d) a claim across a wedge
//
// A sender that takes no lock of the view's (views' `Group::send_cached`) may claim
// its entry just before the wedge and publish it just after. The view change then
// sends again, in the next view, this node's messages the trim cut; it reads them
// once every claim has settled (`SmcCore::claims_settled`). One member, window 2: a
// sender thread claims and publishes one message while the main thread wedges the
// core, waits for the claims to settle and takes its own messages. A message whose
// claim succeeded must be among them. The buggy variant takes them without waiting.

std::thread_local! {
    /// Executions where the claim came before the wedge but its publish after it.
    static LATE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn claim_across_wedge(settle: bool) -> u64 {
    LATE.with(|c| c.set(0));
    loom::model(move || {
        let mut core = solo_core();
        let sender = core.sender().expect("a sender");
        let app = thread::spawn(move || match sender.try_reserve(8) {
            Ok(r) => {
                r.write_word(0, 7);
                Some(r.publish())
            }
            Err(_) => None,
        });
        core.wedge();
        let mut waited = false;
        while settle && !core.claims_settled() {
            waited = true;
            thread::yield_now();
        }
        let mine = core.own_messages_from(0);
        let sent = app.join().unwrap();
        if sent.is_some() {
            assert_eq!(mine, vec![7u64.to_le_bytes().to_vec()], "claim lost across the wedge");
            if waited {
                LATE.with(|c| c.set(c.get() + 1));
            }
        } else {
            assert!(mine.is_empty(), "a message from a claim that failed: {mine:?}");
        }
    });
    LATE.with(|c| c.get())
}

#[test]
fn smc_a_claim_before_the_wedge_is_among_the_messages_sent_again() {
    let late = claim_across_wedge(true);
    assert!(late > 0, "no execution published the message after the wedge: the model checks nothing");
}

#[test]
#[ignore = "run by smc_taking_messages_before_claims_settle_is_caught in a child process"]
fn smc_unsettled_claims_variant() {
    let _ = claim_across_wedge(false);
}

#[test]
fn smc_taking_messages_before_claims_settle_is_caught() {
    loom_tests::expect_failure_in_child("smc_unsettled_claims_variant", "claim lost across the wedge");
}
