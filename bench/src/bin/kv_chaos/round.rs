//! One round of `kv_chaos`: a move, a kill in the middle of its pull, the
//! killed member started again, and the checks.

use super::load::{key, Acked, Recorder, Writer};
use super::member::REPLICAS;
use super::{pick_move, Args, Members, N, WAIT};
use bench::err;
use serde_json::{json, Value};
use spindle_kv::shard::client::ShardClient;
use spindle_kv::shard::ShardMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Whether `f` held within [`WAIT`], asked every `step` (false at once on an
/// interrupt).
fn poll(step: Duration, mut f: impl FnMut() -> bool) -> bool {
    testkit::poll_until(WAIT, step, || testkit::interrupted() || f()) && !testkit::interrupted()
}

fn ms(d: Duration) -> f64 {
    bench::round(d.as_secs_f64() * 1e3, 1)
}

pub(crate) fn one_round(
    args: &Args,
    m: &mut Members,
    contacts: &[SocketAddr],
    round: usize,
    acked: &mut Acked,
    connect: &dyn Fn() -> Result<ShardClient, String>,
) -> Result<Value, String> {
    // A fresh client learns the map of the last round's end.
    let control = connect()?;
    let route = control.route().ok_or("no route table")?;
    let map = ShardMap::decode(&route.map).map_err(|e| format!("the route's map: {e}"))?;
    let known: Vec<Option<u32>> = route.primaries.iter().map(|p| p.map(|(n, _)| n)).collect();
    let target_role = (round as u64 + args.seed) % 2 == 0;
    let want = ((round / 2) as u64 + args.seed) % N as u64;
    let (range, from, to) = pick_move(&map, &known, target_role, want as u32);
    let primary = |s: u16| route.primaries[usize::from(s)].ok_or(format!("shard {s} has no primary"));
    let (src, dst) = (primary(from)?, primary(to)?);
    let victim = if target_role { dst.0 } else { src.0 } as usize;
    let role = match (src.0 == dst.0, target_role) {
        (true, _) => "both",
        (false, true) => "target",
        (false, false) => "source",
    };
    let before = control.status_of(&[dst.1]).map_err(|e| format!("status of the target: {e}"))?.pulled.0;

    let errors_before = acked.errors;
    let writer = Writer::start(connect()?, args.keys, round, std::mem::take(acked));
    let history = Recorder::start(contacts, args.clients, round)?;
    std::thread::sleep(Duration::from_millis(100));
    let began = Instant::now();
    let version = control.migrate(range, to).map_err(|e| format!("round {round}: the move was not taken: {e}"))?;
    // The kill lands once the target's primary logged a first batch, plus up to
    // 40 ms more (from the seed).
    let begun = poll(Duration::from_millis(1), || {
        let s = control.status_of(&[dst.1]);
        s.is_ok_and(|s| s.version >= version && (s.pulled.0 > before || s.migrations.is_empty()))
    });
    if !begun {
        return Err(format!("round {round}: the pull did not begin"));
    }
    let extra = spindle_views::layout::mix(args.seed ^ ((round as u64) << 32)) % 40;
    std::thread::sleep(Duration::from_millis(extra));
    let at_kill = control.status_of(&[dst.1]).ok();
    let mid_pull = at_kill.as_ref().is_some_and(|s| !s.migrations.is_empty());
    let pulled_at_kill = at_kill.map_or(0, |s| s.pulled.0.saturating_sub(before));
    let kill_after = began.elapsed();
    m.kill(victim);
    let killed = Instant::now();
    let survivors: Vec<SocketAddr> = m.live().into_iter().map(|i| m.addr(i)).collect();
    let ended = poll(Duration::from_millis(20), || control.status_of(&survivors).is_ok_and(|s| s.moves_ended(version)));
    let end_after_kill = killed.elapsed();
    if !ended {
        err(&format!("round {round}: the migration did not end within {WAIT:?} of the kill"));
    }
    let restarted = Instant::now();
    let (start_ms, synced_ms) = m.start(args, victim, Some(survivors[0]))?;
    m.wait_all()?;
    let rejoin = restarted.elapsed();
    std::thread::sleep(Duration::from_millis(300));
    let (writes, now_acked) = writer.stop();
    let history = history.check();

    // Every acknowledged put reads back.
    let reader = connect()?;
    let mut lost = Vec::new();
    for i in 0..args.keys {
        let k = key(i);
        if now_acked.unsure.contains(&k) {
            continue;
        }
        let got = reader.get(&k).map_err(|e| format!("round {round}: reading back: {e}"))?;
        if got.as_ref() != now_acked.values.get(&k) {
            lost.push(String::from_utf8_lossy(&k).into_owned());
        }
    }
    // Once the writes stopped, the stores of each shard (at the members that
    // hold a copy of its log, and only there) hold the same.
    let agree = poll(Duration::from_millis(100), || {
        let d: Vec<String> = (0..N).filter_map(|i| m.ask(i, "DIGEST", "DIGEST ").ok()).collect();
        let d: Vec<Vec<&str>> = d.iter().map(|x| x.split(' ').collect()).collect();
        let each = (0..usize::from(args.shards)).all(|s| {
            let held: Vec<&str> = d.iter().filter_map(|x| x.get(s).copied()).filter(|x| *x != "-").collect();
            held.len() == REPLICAS && held.iter().all(|x| *x == held[0])
        });
        d.len() == N && d.iter().all(|x| x.len() == usize::from(args.shards)) && each
    });
    if !agree {
        let d: Vec<String> = (0..N).filter_map(|i| m.ask(i, "DIGEST", "DIGEST ").ok()).collect();
        err(&format!("round {round}: the members' stores differ: {d:?}"));
    }
    if !lost.is_empty() {
        err(&format!(
            "round {round}: {} acknowledged puts do not read back, as {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        ));
    }
    if let Err(e) = &history {
        err(&format!("round {round}: {e}"));
    }
    let (ops, pending) = history.as_ref().map_or((0, 0), |h| *h);
    let ok = ended && lost.is_empty() && history.is_ok() && agree;
    let v = json!({
        "round": round, "from": from, "to": to, "victim": victim, "role": role,
        "mid_pull": mid_pull, "pulled_at_kill": pulled_at_kill, "kill_after_ms": ms(kill_after),
        "end_after_kill_ms": ms(end_after_kill), "rejoin_ms": ms(rejoin),
        "member_start_ms": start_ms, "member_synced_ms": synced_ms,
        "writes": writes, "write_errors": now_acked.errors - errors_before, "history_ops": ops,
        "unanswered": pending, "linearizable": history.is_ok(), "lost": lost.len(),
        "stores_agree": agree, "ok": ok,
    });
    *acked = now_acked;
    Ok(v)
}
