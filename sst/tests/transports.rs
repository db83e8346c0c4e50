//! One suite, run on every transport: ordering under a hammer (in-process and across
//! processes), completions, disconnect, pushes driven by predicate threads, and
//! failure detection.

mod common;

use common::{children, eventually, group, wait_broken, Kind};
use spindle_sst::heartbeat::{self, HeartbeatConfig, Reason, Suspicion};
use spindle_sst::predicate::{Kind as PKind, PollConfig, PredicateThread};
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::sync::Arc;
use spindle_sst::transport::{NodeId, RegionId, RegionSpec, Transport, WriteError, WriteOp};
use spindle_sst::{Counter, LayoutBuilder, LocalRow, Table};
use std::time::{Duration, Instant};

const R: RegionId = RegionId(0);
const DEADLINE: Duration = Duration::from_secs(60);

fn regions(len: usize) -> Vec<RegionSpec> {
    vec![RegionSpec { id: R, len }]
}

// ---------------------------------------------------------------- ordering hammer
//
// The writer streams pairs: 8 data words all equal to `v` (one write), then the guard
// word `v` (a second write). A reader loads the guard with Acquire and then the data:
// every data word must be >= the guard, or a guard overtook its data.

const DATA: usize = 0;
const DATA_WORDS: usize = 8;
const GUARD: usize = 64;
/// Reader `i` sets word `READY + 8 * i` at the writer when it starts polling.
const READY: usize = 72;
const HAMMER_BYTES: usize = 128;

fn hammer_iters(kind: Kind) -> u64 {
    match kind {
        Kind::Tcp | Kind::Rdma => 20_000,
        Kind::Mem | Kind::Shm => 200_000,
    }
}

fn hammer_write(t: &dyn Transport, readers: &[NodeId], iters: u64) {
    let r = t.region(R).unwrap().clone();
    // Start once every reader polls, so the stream overlaps their checks.
    let all_ready =
        eventually(DEADLINE, || readers.iter().all(|p| r.load(READY + 8 * (p.0 as usize - 1), Ordering::Acquire) == 1));
    assert!(all_ready, "readers did not start");
    for v in 1..=iters {
        r.apply_write(DATA, &[v; DATA_WORDS]);
        for p in readers {
            t.post_write(*p, WriteOp::same(R, DATA, DATA_WORDS * 8)).unwrap();
        }
        r.store(GUARD, v, Ordering::Release);
        for p in readers {
            t.post_write(*p, WriteOp::same(R, GUARD, 8)).unwrap();
        }
        // Flush in small batches so tcp frames coalesce as they would under load.
        if v % 4 == 0 {
            t.flush();
        }
    }
    t.flush();
}

/// One check: the guard, then the data; `Err` if the data is older than the guard.
fn hammer_check(t: &dyn Transport) -> Result<u64, String> {
    let r = t.region(R).unwrap();
    let g = r.load(GUARD, Ordering::Acquire);
    let mut data = [0u64; DATA_WORDS];
    r.read_words(DATA, &mut data);
    match data.iter().find(|w| **w < g) {
        Some(w) => Err(format!("guard {g} ahead of data word {w} ({data:?})")),
        None => Ok(g),
    }
}

/// Checks until the guard reaches `iters`; returns how many checks saw a new guard.
fn hammer_read(t: &dyn Transport, iters: u64, within: Duration) -> Result<u64, String> {
    let deadline = Instant::now() + within;
    let slot = READY + 8 * (t.local_id().0 as usize - 1);
    t.region(R).unwrap().store(slot, 1, Ordering::Release);
    t.post_write(NodeId(0), WriteOp::same(R, slot, 8)).map_err(|e| e.to_string())?;
    t.flush();
    let (mut last, mut fresh, mut spins) = (0u64, 0u64, 0u64);
    loop {
        let g = hammer_check(t)?;
        if g < last {
            return Err(format!("guard went back from {last} to {g}"));
        }
        if g > last {
            fresh += 1;
            last = g;
        }
        if g == iters {
            return Ok(fresh);
        }
        spins += 1;
        if spins % 64 == 0 {
            if Instant::now() > deadline {
                return Err(format!("timed out at guard {g} of {iters}"));
            }
            std::thread::yield_now();
        }
    }
}

#[test]
fn checker_catches_a_guard_ahead_of_its_data() {
    // Negative control: apply the guard before the data and the check must object.
    let g = group(Kind::Mem, 2, &regions(HAMMER_BYTES));
    let (w, r) = (&g.nodes[0], &g.nodes[1]);
    w.region(R).unwrap().apply_write(DATA, &[5; DATA_WORDS]);
    w.region(R).unwrap().store(GUARD, 5, Ordering::Release);
    w.post_write(NodeId(1), WriteOp::same(R, GUARD, 8)).unwrap();
    assert!(hammer_check(r.as_ref()).is_err());
    w.post_write(NodeId(1), WriteOp::same(R, DATA, DATA_WORDS * 8)).unwrap();
    assert_eq!(hammer_check(r.as_ref()), Ok(5));
}

fn ordering_hammer(kind: Kind, n: usize) {
    let iters = hammer_iters(kind);
    let g = group(kind, n, &regions(HAMMER_BYTES));
    let readers: Vec<NodeId> = (1..n as u32).map(NodeId).collect();
    let results: Vec<Result<u64, String>> = std::thread::scope(|s| {
        let hs: Vec<_> =
            g.nodes[1..].iter().map(|t| s.spawn(move || hammer_read(t.as_ref(), iters, DEADLINE))).collect();
        hammer_write(g.nodes[0].as_ref(), &readers, iters);
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in results {
        let fresh = r.unwrap();
        assert!(fresh > 0, "reader never observed a guard");
    }
}

fn ordering_hammer_2_nodes(kind: Kind) {
    ordering_hammer(kind, 2)
}

fn ordering_hammer_3_nodes(kind: Kind) {
    ordering_hammer(kind, 3)
}

fn ordering_hammer_across_processes(kind: Kind) {
    let n = 3;
    let iters = hammer_iters(kind);
    let mut kids = children("child_hammer", kind, n, &[("SST_HAMMER_ITERS", iters.to_string())], DEADLINE);
    let out = kids.expect_lines("RESULT ", &[0, 1, 2]).unwrap();
    assert!(kids.wait_all_but(&[]).unwrap(), "a child failed");
    assert_eq!(out[0], "writer done");
    for r in &out[1..] {
        let fresh: u64 = r.strip_prefix("ok fresh=").unwrap_or_else(|| panic!("reader failed: {r}")).parse().unwrap();
        assert!(fresh > 0);
    }
}

/// A node process of `ordering_hammer_across_processes` (run by the parent test only).
#[test]
#[ignore = "child process entry point; run by the multi-process tests"]
fn child_hammer() {
    let iters: u64 = std::env::var("SST_HAMMER_ITERS").unwrap().parse().unwrap();
    let (me, n, t) = common::child_transport(&regions(HAMMER_BYTES));
    if me == NodeId(0) {
        let readers: Vec<NodeId> = (1..n as u32).map(NodeId).collect();
        hammer_write(t.as_ref(), &readers, iters);
        // Exiting is safe: shm readers keep our file mapped, and tcp delivers what
        // was flushed before the connection closes.
        println!("RESULT writer done");
    } else {
        match hammer_read(t.as_ref(), iters, DEADLINE) {
            Ok(fresh) => println!("RESULT ok fresh={fresh}"),
            Err(e) => println!("RESULT failed: {e}"),
        }
    }
}

// ---------------------------------------------------------------- basic writes

fn writes_land_and_complete(kind: Kind) {
    let g = group(kind, 3, &regions(256));
    let (a, b, c) = (&g.nodes[0], &g.nodes[1], &g.nodes[2]);
    let pattern: Vec<u64> = (100..116).collect();
    a.region(R).unwrap().apply_write(64, &pattern);
    let op =
        WriteOp { region: R, src_offset: 64, dst_offset: 128, len: 128, signaled: true, wake: true, stable: false };
    let sb = a.post_write(NodeId(1), op).unwrap();
    let sc = a.post_write(NodeId(2), op).unwrap();
    a.flush();
    assert!(eventually(DEADLINE, || {
        b.flush();
        c.flush();
        a.completed(NodeId(1)) >= sb && a.completed(NodeId(2)) >= sc
    }));
    assert!(a.wait_completed(NodeId(1), sb, Instant::now() + DEADLINE), "completed is waited for");
    assert!(
        !a.wait_completed(NodeId(2), sc + 1000, Instant::now() + Duration::from_millis(50)),
        "a write never posted never completes: the wait ends at its deadline"
    );
    for t in [b, c] {
        let mut got = [0u64; 16];
        t.region(R).unwrap().read_words(128, &mut got);
        assert_eq!(got.to_vec(), pattern);
        assert_eq!(t.region(R).unwrap().load(64, Ordering::Relaxed), 0, "only the destination range is written");
    }
    // Bad writes are refused without effect.
    assert_eq!(a.post_write(NodeId(9), op), Err(WriteError::UnknownPeer(NodeId(9))));
    assert!(matches!(a.post_write(NodeId(1), WriteOp::same(R, 248, 16)), Err(WriteError::Range(_))));
    assert!(matches!(a.post_write(NodeId(1), WriteOp::same(R, 4, 8)), Err(WriteError::Range(_))));
    assert_eq!(a.post_write(NodeId(1), WriteOp::same(RegionId(5), 0, 8)), Err(WriteError::UnknownRegion(RegionId(5))));
    assert_eq!(a.peers(), vec![NodeId(1), NodeId(2)]);
}

fn quiet_writes_land_without_ringing(kind: Kind) {
    let g = group(kind, 2, &regions(64));
    let (a, b) = (&g.nodes[0], &g.nodes[1]);
    // B announces it may sleep: from now on a ring must reach it.
    let ticket = b.doorbell().prepare();
    let before = b.doorbell().rings();
    a.region(R).unwrap().apply_write(0, &[9]);
    a.post_write(NodeId(1), WriteOp { wake: false, ..WriteOp::same(R, 0, 8) }).unwrap();
    a.flush();
    assert!(eventually(DEADLINE, || b.region(R).unwrap().load(0, Ordering::Acquire) == 9));
    std::thread::sleep(Duration::from_millis(20)); // a wrongful ring would come right after
    assert_eq!(b.doorbell().rings(), before, "a quiet write does not ring the doorbell");
    a.region(R).unwrap().apply_write(8, &[10]);
    a.post_write(NodeId(1), WriteOp::same(R, 8, 8)).unwrap();
    a.flush();
    assert!(eventually(DEADLINE, || b.doorbell().rings() > before), "a normal write rings");
    assert_eq!(b.region(R).unwrap().load(8, Ordering::Acquire), 10, "the ring comes after the write landed");
    b.doorbell().cancel(ticket);
}

fn disconnect_stops_writes(kind: Kind) {
    let g = group(kind, 3, &regions(64));
    let (a, b, c) = (&g.nodes[0], &g.nodes[1], &g.nodes[2]);
    b.disconnect(NodeId(0));
    a.region(R).unwrap().apply_write(0, &[77]);
    let _ = a.post_write(NodeId(1), WriteOp::same(R, 0, 8));
    a.post_write(NodeId(2), WriteOp::same(R, 0, 8)).unwrap();
    a.flush();
    assert!(eventually(DEADLINE, || c.region(R).unwrap().load(0, Ordering::Acquire) == 77), "other links keep working");
    assert!(wait_broken(a.as_ref(), NodeId(1), DEADLINE), "the cut-off writer learns of it");
    assert_eq!(b.region(R).unwrap().load(0, Ordering::Acquire), 0, "no write from a cut-off peer is applied");
    assert_eq!(b.post_write(NodeId(0), WriteOp::same(R, 0, 8)), Err(WriteError::Disconnected(NodeId(0))));
    // b and c still talk.
    b.region(R).unwrap().apply_write(8, &[5]);
    b.post_write(NodeId(2), WriteOp::same(R, 8, 8)).unwrap();
    b.flush();
    assert!(eventually(DEADLINE, || c.region(R).unwrap().load(8, Ordering::Acquire) == 5));
}

// ---------------------------------------------------------------- one-copy publication
//
// `Transport::publish` copies a range once into the writer's own memory (mem, shm),
// where peers read it through `peer_view`; tcp (the default method) writes it to each
// peer. Same hammer as above: data, then guard, each one publication.

/// Where this node reads what `writer` published at `off`: the writer's memory in
/// place where the transport maps it, else this node's copy.
fn published(t: &dyn Transport, writer: NodeId, off: usize) -> u64 {
    match t.peer_view(writer, R) {
        Some(v) => v.region().load(PUB + off, Ordering::Acquire),
        None => t.region(R).unwrap().load(off, Ordering::Acquire),
    }
}

/// The publication row's offset in the hammer region.
const PUB: usize = HAMMER_BYTES;

fn publish_op(off: usize, len: usize) -> WriteOp {
    WriteOp { dst_offset: PUB + off, ..WriteOp::same(R, off, len) }
}

fn publish_hammer(kind: Kind) {
    let g = group(kind, 3, &regions(2 * HAMMER_BYTES));
    let (w, readers) = (&g.nodes[0], &g.nodes[1..]);
    let iters = hammer_iters(kind);
    let r = w.region(R).unwrap().clone();
    std::thread::scope(|s| {
        for t in readers {
            s.spawn(move || {
                let deadline = Instant::now() + DEADLINE;
                let mut last = 0;
                while last < iters && Instant::now() < deadline {
                    let guard = published(t.as_ref(), NodeId(0), GUARD);
                    for i in 0..DATA_WORDS {
                        let d = published(t.as_ref(), NodeId(0), DATA + 8 * i);
                        assert!(d >= guard, "guard {guard} ahead of data word {d}");
                    }
                    last = guard;
                }
                assert_eq!(last, iters, "reader saw every publication");
            });
        }
        let peers = [NodeId(1), NodeId(2)];
        for v in 1..=iters {
            r.apply_write(DATA, &[v; DATA_WORDS]);
            assert_eq!(w.publish(publish_op(DATA, DATA_WORDS * 8), &mut peers.iter().copied()), (2, 0));
            r.store(GUARD, v, Ordering::Release);
            assert_eq!(w.publish(publish_op(GUARD, 8), &mut peers.iter().copied()), (2, 0));
            if v % 4 == 0 {
                w.flush();
            }
        }
        w.flush();
    });
}

fn disconnect_freezes_published_rows(kind: Kind) {
    let g = group(kind, 3, &regions(2 * HAMMER_BYTES));
    let (a, b, c) = (&g.nodes[0], &g.nodes[1], &g.nodes[2]);
    let peers = [NodeId(1), NodeId(2)];
    let ra = a.region(R).unwrap();
    ra.apply_write(0, &[77]);
    a.publish(publish_op(0, 8), &mut peers.iter().copied());
    a.flush();
    for t in [b, c] {
        assert!(eventually(DEADLINE, || published(t.as_ref(), NodeId(0), 0) == 77), "published to both");
    }
    b.disconnect(NodeId(0));
    ra.apply_write(0, &[78]);
    let (ok, refused) = a.publish(publish_op(0, 8), &mut peers.iter().copied());
    if kind != Kind::Tcp {
        // tcp learns of the cut-off from the connection, asynchronously.
        assert_eq!((ok, refused), (1, 1), "the peer that cut us off is refused");
    }
    a.flush();
    assert!(eventually(DEADLINE, || published(c.as_ref(), NodeId(0), 0) == 78), "the other peer keeps reading");
    assert!(wait_broken(a.as_ref(), NodeId(1), DEADLINE), "the cut-off writer learns of it");
    assert_eq!(published(b.as_ref(), NodeId(0), 0), 77, "a cut-off peer's row is frozen");
    if let Some(v) = b.peer_view(NodeId(0), R) {
        assert!(v.is_frozen());
    }
}

/// Posts a table push as the predicate thread does: one publication on a shared table,
/// a write per target otherwise.
fn post_push(t: &dyn Transport, p: &spindle_sst::Push) {
    let op = WriteOp { wake: p.wake, ..WriteOp::same(p.region, p.offset, p.len) };
    match p.publish_at {
        Some(at) => {
            t.publish(WriteOp { dst_offset: at, ..op }, &mut p.targets());
        }
        None => {
            for peer in p.targets() {
                t.post_write(peer, op).unwrap();
            }
        }
    }
    t.flush();
}

fn in_place_bytes_need_no_copy(kind: Kind) {
    let mut b = LayoutBuilder::new();
    let data = b.bytes_in_place("data", 64);
    let guard = b.counter("guard");
    let l = b.build();
    let g = group(kind, 2, &regions(l.table_bytes(2)));
    let members = common::ids(2);
    let rows: Vec<LocalRow> = g
        .nodes
        .iter()
        .map(|t| Table::create_shared(l.clone(), &members, t.local_id(), R, t.as_ref()).unwrap())
        .collect();
    let (owner, reader) = (&rows[0], &rows[1]);
    assert_eq!(owner.table().reads_in_place(data), kind != Kind::Tcp);
    for v in 1..=50u8 {
        owner.write_bytes(data, 0, &[v; 64]);
        owner.advance(guard, v as u64).unwrap();
        if !owner.table().reads_in_place(data) {
            post_push(g.nodes[0].as_ref(), &owner.push(data.sub_range(0, 64)));
        }
        post_push(g.nodes[0].as_ref(), &owner.push(guard.range()));
        assert!(eventually(DEADLINE, || reader.table().counter(0, guard) == v as u64), "guard {v} arrives");
        let mut out = [0u8; 64];
        reader.table().read_bytes(0, data, 0, &mut out);
        assert_eq!(out, [v; 64], "the data the guard publishes is there");
    }
}

// ---------------------------------------------------------------- table + predicates

struct Node {
    row: LocalRow,
    ping: Counter,
    pong: Counter,
    target: u64,
    suspects: Vec<Suspicion>,
}

fn layout() -> (spindle_sst::table::Layout, Counter, Counter, Counter) {
    let mut b = LayoutBuilder::new();
    let ping = b.counter("ping");
    let pong = b.counter("pong");
    let beat = b.counter("heartbeat");
    (b.build(), ping, pong, beat)
}

fn start_nodes(kind: Kind, n: usize, hb: Option<HeartbeatConfig>) -> (testkit::LocalGroup, Vec<PredicateThread<Node>>) {
    let (l, ping, pong, beat) = layout();
    let g = group(kind, n, &regions(l.table_bytes(n)));
    let members = common::ids(n);
    let pts = g
        .nodes
        .iter()
        .map(|t| {
            let row = Table::create_shared(l.clone(), &members, t.local_id(), R, t.as_ref()).unwrap();
            assert_eq!(row.table().is_shared(), kind != Kind::Tcp, "mem and shm read peers' rows in place");
            let node = Node { row, ping, pong, target: 0, suspects: Vec::new() };
            let cfg = PollConfig { name: format!("pred-{}", t.local_id().0), ..PollConfig::default() };
            let pt = PredicateThread::spawn(node, t.clone(), cfg).unwrap();
            if let Some(hb) = hb {
                heartbeat::install(&pt, hb, |s: &Node| &s.row, beat, |s, sus, _| s.suspects.push(sus));
            }
            pt
        })
        .collect();
    (g, pts)
}

fn table_ping_pong(kind: Kind) {
    let (_g, pts) = start_nodes(kind, 3, None);
    // Node 0 pings when node 1 has answered the last ping; node 1 echoes.
    pts[0].register(
        PKind::Recurrent,
        |s: &Node| {
            let t = s.row.table();
            s.row.get(s.ping) < s.target && t.counter(1, s.pong) == s.row.get(s.ping)
        },
        |s, pushes| {
            s.row.increment(s.ping);
            pushes.push(s.row.push(s.ping.range()));
        },
    );
    pts[1].register(
        PKind::Recurrent,
        |s: &Node| s.row.table().counter(0, s.ping) > s.row.get(s.pong),
        |s, pushes| {
            let v = s.row.table().counter(0, s.ping);
            s.row.advance(s.pong, v).unwrap();
            pushes.push(s.row.push(s.pong.range()));
        },
    );
    // A one-time predicate and a transition predicate on node 2, which only watches.
    let seen = Arc::new(spindle_sst::sync::atomic::AtomicU64::new(0));
    let s2 = seen.clone();
    pts[2].register(
        PKind::OneTime,
        |s: &Node| s.row.table().counter(1, s.pong) >= 100,
        move |_, _| {
            s2.fetch_add(1, Ordering::SeqCst);
        },
    );
    pts[0].with_state(|s| s.target = 500);
    pts[0].notify();
    assert!(eventually(DEADLINE, || pts[0].with_state(|s| s.row.table().counter(1, s.pong)) == 500), "500 round trips");
    assert!(eventually(DEADLINE, || pts[2].with_state(|s| s.row.table().counter(0, s.ping)) == 500));
    assert!(eventually(DEADLINE, || seen.load(Ordering::SeqCst) == 1));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(seen.load(Ordering::SeqCst), 1, "a one-time predicate fires once");
    assert!(pts[0].stats().writes >= 1000, "node 0 pushed each ping to two peers: {:?}", pts[0].stats());
}

fn heartbeat_suspects_stopped_node(kind: Kind) {
    // Generous: a busy CI machine must not starve a live node into suspicion.
    let hb = HeartbeatConfig { period: Duration::from_millis(20), timeout: Duration::from_secs(3) };
    let (mut g, mut pts) = start_nodes(kind, 3, Some(hb));
    // Let heartbeats flow, then stop node 2 entirely.
    std::thread::sleep(Duration::from_millis(200));
    let mut dead = pts.pop().unwrap();
    dead.stop();
    drop(dead);
    drop(g.nodes.pop());
    for pt in &pts {
        assert!(
            eventually(DEADLINE, || pt.with_state(|s| s.suspects.iter().any(|x| x.peer == NodeId(2)))),
            "node 2 suspected"
        );
    }
    for pt in &pts {
        pt.with_state(|s| {
            assert_eq!(s.suspects.len(), 1, "only node 2 is suspected: {:?}", s.suspects);
            if kind == Kind::Tcp {
                assert!(matches!(s.suspects[0].reason, Reason::Broken(_)), "tcp reports the closed socket at once");
            }
        });
    }
}

fn heartbeat_across_processes(kind: Kind) {
    let mut kids = children("child_heartbeat", kind, 3, &[], DEADLINE);
    kids.expect_lines("RUNNING", &[0, 1, 2]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    kids.kill(2);
    let out = kids.expect_lines("RESULT ", &[0, 1]).unwrap();
    kids.tell(0, "EXIT").unwrap();
    kids.tell(1, "EXIT").unwrap();
    assert!(kids.wait_all_but(&[2]).unwrap(), "a survivor failed");
    for r in out {
        assert!(r.starts_with("suspect=n2 "), "survivor reported {r}");
    }
}

/// A node process of `heartbeat_across_processes`.
#[test]
#[ignore = "child process entry point; run by the multi-process tests"]
fn child_heartbeat() {
    let (l, ping, pong, beat) = layout();
    let (me, n, t) = common::child_transport(&regions(l.table_bytes(3)));
    let row = Table::create_shared(l, &common::ids(n), me, R, t.as_ref()).unwrap();
    let node = Node { row, ping, pong, target: 0, suspects: Vec::new() };
    let pt = PredicateThread::spawn(node, t.clone(), PollConfig::default()).unwrap();
    let hb = HeartbeatConfig { period: Duration::from_millis(20), timeout: Duration::from_millis(1500) };
    heartbeat::install(&pt, hb, |s: &Node| &s.row, beat, |s, sus, _| s.suspects.push(sus));
    println!("RUNNING");
    let found = eventually(DEADLINE, || pt.with_state(|s| !s.suspects.is_empty()));
    let report = pt
        .with_state(|s| s.suspects.iter().map(|x| format!("{} {:?}", x.peer, x.reason)).collect::<Vec<_>>().join(";"));
    if found {
        println!("RESULT suspect={report}");
    } else {
        println!("RESULT nothing suspected");
    }
    testkit::wait_for_parent();
}

macro_rules! per_transport {
    ($kind:ident: $($name:ident),* $(,)?) => {
        $( #[test] fn $name() { super::$name(super::Kind::$kind) } )*
    };
}

mod mem {
    per_transport!(Mem: writes_land_and_complete, quiet_writes_land_without_ringing, ordering_hammer_2_nodes, ordering_hammer_3_nodes, disconnect_stops_writes, table_ping_pong, heartbeat_suspects_stopped_node, publish_hammer, disconnect_freezes_published_rows, in_place_bytes_need_no_copy);
}
mod shm {
    per_transport!(Shm: writes_land_and_complete, quiet_writes_land_without_ringing, ordering_hammer_2_nodes, ordering_hammer_3_nodes, disconnect_stops_writes, table_ping_pong, heartbeat_suspects_stopped_node, ordering_hammer_across_processes, heartbeat_across_processes, publish_hammer, disconnect_freezes_published_rows, in_place_bytes_need_no_copy);
}
mod tcp {
    per_transport!(Tcp: writes_land_and_complete, quiet_writes_land_without_ringing, ordering_hammer_2_nodes, ordering_hammer_3_nodes, disconnect_stops_writes, table_ping_pong, heartbeat_suspects_stopped_node, ordering_hammer_across_processes, heartbeat_across_processes, publish_hammer, disconnect_freezes_published_rows, in_place_bytes_need_no_copy);
}

/// The suite over `rdma` where this build and this machine can open an RDMA device
/// (`--features rdma`, rdma-core, a device or a soft-RoCE link); elsewhere each test
/// says on stderr why it ran nothing. `quiet_writes_land_without_ringing` is left
/// out: the rdma transport rings its own doorbell on a timer (see its docs).
macro_rules! over_rdma {
    ($($name:ident),* $(,)?) => {
        $( #[test] fn $name() {
            match spindle_sst::transport::rdma::available() {
                Ok(_) => super::$name(super::Kind::Rdma),
                Err(why) => eprintln!("skipped {} over rdma: {why}", stringify!($name)),
            }
        } )*
    };
}

mod rdma {
    over_rdma!(
        writes_land_and_complete,
        ordering_hammer_2_nodes,
        ordering_hammer_3_nodes,
        disconnect_stops_writes,
        table_ping_pong,
        heartbeat_suspects_stopped_node,
        publish_hammer,
        disconnect_freezes_published_rows,
        in_place_bytes_need_no_copy
    );
}
