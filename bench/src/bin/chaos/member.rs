//! A member process of a chaos run: joins the group, sends at the given rate, digests
//! what it delivers, and reports when the parent asks.

use super::*;

pub(crate) fn child(args: &Args, id: u32) -> i32 {
    testkit::die_with_parent();
    // RUST_LOG=spindle_views=info shows each view change's steps on stderr.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    match run_member(args, id) {
        Ok(()) => 0,
        Err(e) => {
            println!("FAILED {e}");
            1
        }
    }
}

/// The largest message in a ring slot; a larger `--size` takes the arena path.
const SLOT: usize = 1024;

/// A message of `size` bytes: sequence number and sender first, the sequence number
/// again in the last 8 bytes (from 24 bytes on), a fixed pattern between. A message
/// delivered before all of it arrived fails [`whole`].
fn fill(buf: &mut [u8], k: u64, id: u32) {
    buf[..8].copy_from_slice(&k.to_le_bytes());
    buf[8..12].copy_from_slice(&id.to_le_bytes());
    let n = buf.len();
    if n >= 24 {
        buf[n - 8..].copy_from_slice(&k.to_le_bytes());
    }
}

/// The pattern between the stamps.
fn pattern(size: usize) -> Vec<u8> {
    let mut buf: Vec<u8> = (0..size).map(|i| (i as u8).wrapping_mul(31)).collect();
    fill(&mut buf, 0, 0);
    buf
}

/// True if `m` is a whole message of `expect.len()` bytes as [`fill`] wrote it.
fn whole(m: &[u8], expect: &[u8]) -> bool {
    let n = expect.len();
    if m.len() != n {
        return false;
    }
    if n < 24 {
        return true;
    }
    m[n - 8..] == m[..8] && m[12..n - 8] == expect[12..n - 8]
}

fn run_member(args: &Args, id: u32) -> Result<(), String> {
    // --auto: nothing chosen by hand (the group gives the id, the OS the ports,
    // discovery the contact).
    let (id, port) =
        if args.auto { (spindle_views::config::AUTO_ID, 0) } else { (id, args.port.ok_or("--port is required")?) };
    let transport = if args.transport == "tcp" { Transport::Tcp } else { Transport::Shm };
    let mut b = Config::builder(id, SocketAddr::from((args.ip, port)))
        .name(args.name.as_deref().unwrap_or("chaos"))
        .transport(transport)
        .max_msg(args.size.min(SLOT))
        .arena(if args.size > SLOT { (4 * args.size).clamp(64 << 20, spindle_smc::spec::MAX_ARENA) } else { 0 })
        .window(64)
        .relay(args.relay)
        .timeouts(Duration::from_millis(args.heartbeat_ms), Duration::from_millis(args.failure_ms));
    if let Some(c) = args.contact {
        b = b.contact(c);
    }
    let cfg = b.build().map_err(|e| e.to_string())?;
    let digest = Arc::new(Mutex::new((0u64, Digest::default())));
    // (the view of the latest delivery, deliveries in that view)
    let in_view = Arc::new(Mutex::new((0u64, 0u64)));
    let iv = in_view.clone();
    let log: Arc<Mutex<Vec<(u32, u64)>>> = Arc::new(Mutex::new(Vec::new()));
    let keep = args.log.is_some();
    let (d, l) = (digest.clone(), log.clone());
    let marks = log.clone();
    // Deliveries that were not whole messages (must stay 0).
    let torn = Arc::new(AtomicU64::new(0));
    let (t, expect) = (torn.clone(), pattern(args.size));
    let group = GroupBuilder::new(cfg)
        .on_deliver(0, move |m| {
            if keep && m.data.len() >= 8 {
                let seq = u64::from_le_bytes(m.data[..8].try_into().expect("8 bytes"));
                l.lock().unwrap_or_else(|p| p.into_inner()).push((m.sender.0, seq));
            }
            let mut v = iv.lock().unwrap_or_else(|p| p.into_inner());
            if v.0 != m.view.0 {
                *v = (m.view.0, 0);
            }
            v.1 += 1;
            drop(v);
            if !whole(m.data, &expect) {
                t.fetch_add(1, Ordering::Relaxed);
            }
            let mut g = d.lock().unwrap_or_else(|p| p.into_inner());
            g.0 += 1;
            g.1.add(m.sender.0 as u64);
            g.1.add_bytes(m.data);
        })
        .on_view(|v| {
            let ids: Vec<String> = v.members().iter().map(|n| n.0.to_string()).collect();
            println!("VIEW {}", ids.join(","));
        })
        .on_rejoin(move |why| {
            // What it delivers from here on follows a gap in the group's order.
            if keep {
                marks.lock().unwrap_or_else(|p| p.into_inner()).push(bench::REJOIN_MARK);
            }
            println!("REJOINED {why}");
        })
        .start()
        .map_err(|e| e.to_string())?;
    let group = Arc::new(group);
    {
        // Says when the others removed this member (it then joins again by itself).
        let g = Arc::downgrade(&group);
        std::thread::spawn(move || {
            let mut out = false;
            while let Some(g) = g.upgrade() {
                let now = g.rejoining();
                if now.is_some() != out {
                    out = now.is_some();
                    if let Some(why) = now {
                        println!("REMOVED {why}");
                    }
                }
                drop(g);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
    }
    let write_log = || {
        if let Some(path) = &args.log {
            let text: String =
                log.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(s, q)| format!("{s} {q}\n")).collect();
            let _ = std::fs::write(path, text);
        }
    };
    let id = group.node().0;
    println!("ID {id}");
    println!("JOINED");
    let nodes = args.nodes;
    if !group.wait_for_members(nodes, Duration::from_secs(60)) {
        return Err(format!("the view never reached {nodes} members: {:?}", group.view()));
    }
    println!("FULL");
    let (line_tx, line_rx) = channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    // The parent gone (stdin closed) counts as STOP, then REPORT.
    let next = || line_rx.recv_timeout(Duration::from_millis(100));
    let wait_for = |word: &str, stop: Option<&AtomicBool>| loop {
        match next() {
            Ok(l) if l == word => return,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            _ if stop.is_some_and(|s| s.load(Ordering::Acquire)) => return,
            _ => {}
        }
    };
    wait_for("GO", None);
    let before = group.metrics().view_change_ms.len();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let sender = {
        let (stop2, sent, size, rate) = (stop.clone(), sent.clone(), args.size, args.rate);
        let g = &group;
        std::thread::scope(|s| {
            let h = s.spawn(move || {
                let stop = stop2;
                let mut buf = pattern(size);
                let began = Instant::now();
                while !stop.load(Ordering::Acquire) {
                    let k = sent.load(Ordering::Relaxed);
                    if rate > 0 {
                        let due = began + Duration::from_secs_f64(k as f64 / rate as f64);
                        std::thread::sleep(
                            due.saturating_duration_since(Instant::now()).min(Duration::from_millis(50)),
                        );
                        if Instant::now() < due {
                            continue;
                        }
                    }
                    fill(&mut buf, k, id);
                    match g.send(0, &buf) {
                        Ok(()) => {
                            sent.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.is_fatal() => {
                            stop.store(true, Ordering::Release);
                            return Err(e.to_string());
                        }
                        // Out of the view (no majority): sends fail at once until
                        // it is back; try again shortly rather than spin.
                        Err(spindle_views::group::SendError::NoMajority(_)) => {
                            std::thread::sleep(Duration::from_millis(10))
                        }
                        Err(_) => {}
                    }
                }
                Ok(())
            });
            wait_for("STOP", Some(&stop));
            stop.store(true, Ordering::Release);
            h.join().unwrap_or(Err("sender panicked".into()))
        })
    };
    if let Err(e) = sender {
        write_log();
        return Err(e);
    }
    println!("STOPPED");
    wait_for("REPORT", None);
    // Wait until deliveries stop moving (everyone has stopped sending).
    let mut last = u64::MAX;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = digest.lock().unwrap_or_else(|p| p.into_inner()).0;
        if now == last || Instant::now() > deadline {
            break;
        }
        last = now;
        std::thread::sleep(Duration::from_millis(700));
    }
    let (count, hash) = *digest.lock().unwrap_or_else(|p| p.into_inner());
    let m = group.metrics();
    let changes: Vec<f64> =
        m.view_change_ms[before.min(m.view_change_ms.len())..].iter().map(|x| round(*x, 3)).collect();
    let (last_delivery_view, in_last) = *in_view.lock().unwrap_or_else(|p| p.into_inner());
    let view_now = group.view().map_or(0, |v| v.id().0);
    let line = json!({
        "id": id,
        "delivered": count,
        "torn": torn.load(Ordering::Relaxed),
        "view": view_now,
        // Deliveries in the view this member runs now (0 if it delivered nothing since
        // it installed that view).
        "delivered_after_last_view": if last_delivery_view == view_now { in_last } else { 0 },
        "digest": format!("{:016x}", hash.0),
        "sent": sent.load(Ordering::Relaxed),
        "views": m.views_installed,
        "view_change_ms": changes,
        "members": group.members().iter().map(|n| n.0).collect::<Vec<_>>(),
        "stopped": group.stopped(),
        "rejoins": m.rejoins,
        "rejoin_ms": m.rejoin_ms.iter().map(|x| round(*x, 2)).collect::<Vec<_>>(),
    });
    write_log();
    println!("RESULT {line}");
    // Stay a member until the parent has every report: a member that left now would
    // look like a failure to the others still measuring (the parent's stdin closes
    // when it is done).
    wait_for("EXIT", None);
    Ok(())
}
