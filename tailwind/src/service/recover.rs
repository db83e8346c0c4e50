//! The new primary's recovery, run by the member's `tailwind` thread whenever a
//! view starts in which this member is the log's primary:
//!
//! 1. ask every member of the log what it holds: committed segments, and the
//!    segment it recovered (scanned) at the end of the last view it had one open;
//! 2. commit, for each recovered segment, the agreed prefix: the committed length
//!    if some member closed it, else the shortest recovered one (the longest of
//!    those read from disks at a restart, `Ack::Disk`; see the
//!    [module docs](super) for why), at every member that recovered it;
//! 3. re-seed: fetch segments this member lacks, then copy to each member the
//!    segments it lacks; note the tagged appends of the last segments (safe
//!    retries);
//! 4. open the next segment at every member and take appends.
//!
//! Any failure (a member that does not answer, the view changing under it) stops
//! the attempt; it is tried again while the view runs, and a new view starts over.

use super::node::{lock, Primary, Shared};
use super::wire::{self, Held, Msg, Reply};
use super::Recovery;
use crate::backup::Request;
use spindle_sst::transport::{NodeId, Transport};
use spindle_views::group::Group;
use spindle_views::view::View;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The worker loop: waits for views, recovers where this member is the primary.
/// It holds the group only while it works (the host owns it).
pub(super) fn work(s: &Arc<Shared>) {
    loop {
        let (view, members, t, g) = {
            let mut st = lock(&s.st);
            loop {
                if st.stopped.is_some() {
                    return;
                }
                let Some(g) = s.group() else {
                    drop(st);
                    s.stop("the group is gone".into());
                    return;
                };
                if let Some(why) = g.stopped() {
                    drop(st);
                    s.stop(format!("the group stopped: {why}"));
                    return;
                }
                if st.work && st.running() {
                    st.work = false;
                    if let (Some(v), Some(t)) = (st.view.clone(), st.transport.clone()) {
                        break (v, st.members.clone(), t, g);
                    }
                }
                drop(g); // not held while idle: the host may be dropping it
                st = s.cv.wait_timeout(st, Duration::from_millis(100)).unwrap_or_else(|p| p.into_inner()).0;
            }
        };
        if members.first() != Some(&s.me) {
            continue;
        }
        let began = Instant::now();
        let g = &g;
        match recover(s, g, &view, &members, &t) {
            Ok((pr, rec)) => {
                if s.become_primary(pr, rec.clone()) {
                    // Members outside the log learn that it takes appends (best effort:
                    // one that does not answer in time learns it in the next view).
                    let deadline = Instant::now() + s.cfg.request_timeout * 2;
                    for &m in view.members().iter().filter(|m| !members.contains(m)) {
                        if let Err(why) = ask(s, g, m, &Msg::Ready { view: view.id().0 }, deadline) {
                            tracing::warn!(node = %s.me, to = %m, %why, "could not tell a member the log is ready");
                        }
                    }
                    tracing::info!(node = %s.me, view = view.id().0, next = rec.next.0, dropped = rec.dropped,
                        reseeded = rec.reseeded, ms = began.elapsed().as_millis() as u64, "tailwind primary recovered");
                }
            }
            Err(why) => {
                if why.starts_with("Ack::Disk:") {
                    tracing::debug!(node = %s.me, view = view.id().0, %why, "tailwind recovery waits");
                } else {
                    tracing::warn!(node = %s.me, view = view.id().0, %why, "tailwind recovery failed; retrying");
                }
                let mut st = lock(&s.st);
                if st.running() && st.view.as_ref().map(|v| v.id()) == Some(view.id()) {
                    st.work = true;
                }
                drop(st);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// What a member holds: committed segments, and the segment it recovered (read
/// from its disk at start, or not).
type Reported = (Vec<Held>, Option<(Held, bool)>);

/// Asks `m` (this member: answered directly), retrying while it has not
/// installed the view yet.
fn ask(s: &Shared, g: &Group, m: NodeId, msg: &Msg, deadline: Instant) -> Result<Reply, String> {
    loop {
        let reply = if m == s.me {
            s.handle(msg.clone())
        } else {
            let left = deadline.saturating_duration_since(Instant::now()).min(s.cfg.request_timeout);
            let body = g
                .request_service(
                    super::wire::SERVICE,
                    m,
                    &wire::encode(s.cfg.log, msg),
                    left.max(Duration::from_millis(10)),
                )
                .map_err(|e| format!("{m}: {e}"))?;
            wire::decode::<Reply>(s.cfg.log, &body).map_err(|e| format!("{m}: {e}"))?
        };
        match reply {
            Reply::NotYet if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Reply::NotYet => return Err(format!("{m} did not install the view in time")),
            Reply::Stale => return Err("the view changed".into()),
            Reply::Failed(why) => return Err(format!("{m}: {why}")),
            r => return Ok(r),
        }
    }
}

fn recover(
    s: &Shared,
    g: &Group,
    view: &View,
    members: &[NodeId],
    t: &Arc<dyn Transport>,
) -> Result<(Primary, Recovery), String> {
    let v = view.id().0;
    let deadline = Instant::now() + s.cfg.request_timeout * 4;
    if s.disk() && members.len() < s.cfg.replicas / 2 + 1 {
        // An acknowledged record is on a majority of the replicas' disks: fewer
        // may all lack it (a group started again, its first members alone).
        return Err(format!(
            "Ack::Disk: {} of {} replicas here, waiting for a majority",
            members.len(),
            s.cfg.replicas
        ));
    }
    // 1. What everyone holds.
    let mut held: BTreeMap<NodeId, Reported> = BTreeMap::new();
    let mut floors: BTreeMap<NodeId, u64> = BTreeMap::new();
    for &m in members {
        match ask(s, g, m, &Msg::State { view: v }, deadline)? {
            Reply::State { segments, pending, pending_disk, trimmed } => {
                held.insert(m, (segments, pending.map(|p| (p, pending_disk))));
                floors.insert(m, trimmed);
            }
            other => return Err(format!("{m}: unexpected answer {other:?}")),
        };
    }
    // The highest trim floor: what is below it is gone for good.
    let floor = floors.values().copied().max().unwrap_or(0);
    tracing::debug!(node = %s.me, view = v, ?held, "what the members hold");
    let mut committed: BTreeMap<u64, u64> = BTreeMap::new();
    for (m, (segs, _)) in &held {
        for h in segs {
            if let Some(c) = committed.insert(h.base, h.count) {
                if c != h.count {
                    return Err(format!("members disagree on segment {}: {c} or {} records ({m})", h.base, h.count));
                }
            }
        }
    }
    // 2. The agreed prefix of each recovered segment, committed where recovered.
    let mut by_base: BTreeMap<u64, Vec<(NodeId, u64, bool)>> = BTreeMap::new();
    for (m, (_, p)) in &held {
        if let Some((p, disk)) = p {
            by_base.entry(p.base).or_default().push((*m, p.count, *disk));
        }
    }
    let mut dropped = 0;
    let mut holders: BTreeMap<u64, Vec<NodeId>> = BTreeMap::new();
    for (m, (segs, _)) in &held {
        for h in segs {
            holders.entry(h.base).or_default().push(*m);
        }
    }
    for (base, reporters) in &by_base {
        // Scanned from buffers at a view's end: the shortest (see the module docs).
        // Read from disks at start only (Ack::Disk, a restart of the group): the
        // longest, since an acknowledged record is on a majority's disks, not on
        // every one; the shorter ones are re-seeded.
        let in_memory = reporters.iter().filter(|r| !r.2).map(|r| r.1).min();
        let longest = reporters.iter().map(|r| r.1).max().unwrap_or(0);
        let agreed = committed.get(base).copied().or(in_memory).unwrap_or(longest);
        if let Some(short) = in_memory.filter(|c| *c < agreed) {
            // Some member closed the segment with `agreed` records, so every
            // replica of the view that wrote them held them: a member that
            // recovered fewer was not a replica then (it left the log's members
            // and came back, as a host whose replicas follow rendezvous hashing
            // lets happen). Its copy is dropped below and the closed one copied
            // to it.
            tracing::info!(node = %s.me, view = v, base, agreed, short, "a stale copy of a segment is replaced");
        }
        dropped += longest.saturating_sub(agreed);
        for (m, count, _) in reporters {
            let keep = if *count >= agreed { agreed } else { 0 };
            ask(s, g, *m, &Msg::Commit { view: v, id: s.seg(*base), count: keep }, deadline)?;
            if keep > 0 {
                holders.entry(*base).or_default().push(*m);
            }
        }
        if agreed > 0 {
            committed.insert(*base, agreed);
        }
    }
    committed.retain(|b, c| *b + *c > floor);
    holders.retain(|b, _| committed.contains_key(b));
    let mut end = None::<u64>;
    for (b, c) in &committed {
        if let Some(e) = end.filter(|e| e != b) {
            tracing::error!(node = %s.me, from = e, to = *b, "no member holds these records of the log");
        }
        end = Some(b + c);
    }
    let next = end.unwrap_or(0).max(floor);
    // 3. Re-seed: first this member, then the others.
    let mut reseeded = 0;
    for (base, who) in &holders {
        if who.contains(&s.me) {
            continue;
        }
        let from = who[0];
        copy(s, g, v, *base, committed[base], from, s.me, deadline)?;
        reseeded += 1;
    }
    for &m in members.iter().filter(|m| **m != s.me) {
        for (base, count) in &committed {
            if holders.get(base).is_some_and(|w| w.contains(&m)) {
                continue;
            }
            copy(s, g, v, *base, *count, s.me, m, deadline)?;
            reseeded += 1;
        }
    }
    // Members that missed a trim.
    for (&m, &f) in &floors {
        if f < floor {
            ask(s, g, m, &Msg::Trim { before: floor }, deadline)?;
        }
    }
    // The tagged appends the log holds, for safe retries.
    s.rebuild_dedupe(&committed, next)?;
    // 4. The next segment, in buffer 0 of this view.
    let backups: Vec<NodeId> = members[1..].to_vec();
    s.pool_all(v, &backups, Request::Open { id: s.seg(next), slot: 0 }, deadline).map_err(|e| e.to_string())?;
    let rep = s.replicator(t, 0, &backups, next).map_err(|e| e.to_string())?;
    let pr = Primary { view: v, t: t.clone(), rep, base: next, slot: 0, backups };
    Ok((pr, Recovery { view: view.id(), next: crate::replicate::Lsn(next), dropped, reseeded }))
}

/// Copies segment `base` from member `from` to member `to` page by page (one of
/// them is this member).
#[allow(clippy::too_many_arguments)]
fn copy(
    s: &Shared,
    g: &Group,
    v: u64,
    base: u64,
    count: u64,
    from: NodeId,
    to: NodeId,
    deadline: Instant,
) -> Result<(), String> {
    let id = s.seg(base);
    let mut offset = 0u64;
    let deadline = deadline.max(Instant::now() + s.cfg.request_timeout);
    loop {
        let (total, bytes) = match ask(s, g, from, &Msg::Fetch { id, offset }, deadline)? {
            Reply::Page { total, bytes } => (total, bytes),
            other => return Err(format!("{from}: unexpected answer {other:?}")),
        };
        if bytes.is_empty() && offset < total {
            return Err(format!("{from}: an empty page of segment {base} at {offset} of {total}"));
        }
        let n = bytes.len() as u64;
        ask(s, g, to, &Msg::Store { view: v, id, offset, total, count, bytes }, deadline)?;
        offset += n;
        if offset >= total {
            return Ok(());
        }
    }
}
