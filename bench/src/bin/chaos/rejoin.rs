//! `chaos --stop-rounds R`: the last member is stopped with SIGSTOP until the others
//! removed it, then continued with SIGCONT, R times, while every member sends. Each
//! time it must join the group again by itself. Reports the time from SIGCONT to its
//! running a view of every member again (p50/max), the view changes each round cost
//! at a member that stayed, and whether the delivery logs agree: the members that
//! stayed delivered the same sequence, and the stopped one delivered contiguous
//! pieces of it, in order, with gaps only where it rejoined.

use super::*;

/// Lines of the members until `done` says so, counting member `counted`'s views.
struct Watch {
    latest: Vec<Vec<u64>>,
    views_at_counted: u64,
}

impl Watch {
    fn until(
        &mut self,
        m: &Members,
        counted: usize,
        within: Duration,
        mut done: impl FnMut(&Watch, usize, &str) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            if testkit::interrupted() {
                return Err("interrupted".into());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("not within {within:?}: views {:?}", self.latest));
            }
            let Ok((i, line)) = m.lines.recv_timeout(left.min(Duration::from_millis(200))) else { continue };
            if let Some(rest) = line.strip_prefix("VIEW ") {
                let mut ids: Vec<u64> = rest.split(',').filter_map(|x| x.trim().parse().ok()).collect();
                ids.sort_unstable();
                self.latest[i] = ids;
                if i == counted {
                    self.views_at_counted += 1;
                }
            } else if let Some(why) = line.strip_prefix("FAILED") {
                return Err(format!("member {i} failed:{why}"));
            }
            if done(self, i, &line) {
                return Ok(());
            }
        }
    }
}

use bench::read_delivery_log as read_log;

fn median_max(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v.get(v.len() / 2).copied().unwrap_or(f64::NAN), v.last().copied().unwrap_or(f64::NAN))
}

pub(crate) fn stop_rounds(args: &Args, rounds: usize) -> Result<bool, String> {
    let name = format!("rejoin{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("spindle-{name}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let logs: Vec<std::path::PathBuf> = (0..args.nodes).map(|i| dir.join(format!("member{i}.log"))).collect();
    let ports = testkit::free_ports(args.nodes)?;
    let (tx, rx) = channel();
    let mut m = Members { list: Vec::new(), lines: rx, tx };
    let contact: SocketAddr = SocketAddr::from(([127, 0, 0, 1], ports[0]));
    m.spawn(args, 0, ports[0], None, &name, Some(&logs[0]))?;
    m.expect("JOINED", &[0], Duration::from_secs(30))?;
    for (i, port) in ports.iter().enumerate().skip(1) {
        m.spawn(args, i, *port, Some(contact), &name, Some(&logs[i]))?;
    }
    let all: Vec<usize> = (0..args.nodes).collect();
    m.expect("FULL", &all, Duration::from_secs(60))?;
    for i in 0..args.nodes {
        m.tell(i, "GO");
    }
    let victim = args.nodes - 1;
    let stayed: Vec<usize> = (0..victim).collect();
    let pid = m.list[victim].child.id();
    let every: Vec<u64> = all.iter().map(|i| *i as u64).collect();
    let without: Vec<u64> = stayed.iter().map(|i| *i as u64).collect();
    let mut w = Watch { latest: vec![every.clone(); args.nodes], views_at_counted: 0 };
    let (mut back_ms, mut changes, mut removed_why) = (Vec::new(), Vec::new(), Vec::new());
    err(&format!("chaos: {} members over {}, stopping member {victim} {rounds} times", args.nodes, args.transport));
    for round in 0..rounds {
        std::thread::sleep(Duration::from_millis(500));
        let views_before = w.views_at_counted;
        testkit::pause_process(pid, true)?;
        let stopped = Instant::now();
        let gone = w.until(&m, 0, Duration::from_secs(60), |w, _, _| stayed.iter().all(|j| w.latest[*j] == without));
        if let Err(e) = gone {
            let _ = testkit::pause_process(pid, false);
            return Err(format!("round {round}: the others did not remove the stopped member: {e}"));
        }
        let removed_after = stopped.elapsed();
        testkit::pause_process(pid, false)?;
        let cont = Instant::now();
        let mut why = String::new();
        let mut rejoined = false;
        w.until(&m, 0, Duration::from_secs(60), |w, i, line| {
            if i == victim {
                if let Some(r) = line.strip_prefix("REMOVED ") {
                    why = r.to_string();
                }
                rejoined |= line.starts_with("REJOINED");
            }
            rejoined && all.iter().all(|j| w.latest[*j] == every)
        })
        .map_err(|e| format!("round {round}: member {victim} did not come back: {e}"))?;
        let took = cont.elapsed().as_secs_f64() * 1e3;
        err(&format!(
            "chaos: round {round}: removed {:.0} ms after SIGSTOP; back {took:.0} ms after SIGCONT ({why})",
            removed_after.as_secs_f64() * 1e3
        ));
        back_ms.push(took);
        changes.push((w.views_at_counted - views_before) as f64);
        removed_why.push(why);
    }
    std::thread::sleep(Duration::from_millis(500));
    for i in &all {
        m.tell(*i, "STOP");
    }
    m.expect("STOPPED", &all, Duration::from_secs(60))?;
    for i in &all {
        m.tell(*i, "REPORT");
    }
    let reports = m.expect("RESULT", &all, Duration::from_secs(60))?;
    let parsed: Vec<Value> = reports.iter().map(|(_, r)| serde_json::from_str(r).unwrap_or(Value::Null)).collect();
    drop(m);
    let reference = read_log(&logs[0]);
    let mut problems: Vec<String> = Vec::new();
    for i in &stayed {
        if read_log(&logs[*i]) != reference {
            problems.push(format!("member {i} delivered another sequence than member 0"));
        }
    }
    let skipped = match bench::check_segments(&reference, &read_log(&logs[victim])) {
        Ok(n) => n,
        Err(e) => {
            problems.push(format!("member {victim}: {e}"));
            0
        }
    };
    let rejoins = parsed[victim]["rejoins"].as_u64().unwrap_or(0);
    // One rejoin per stall at least; more where a loaded machine let the failure
    // timeout remove it again after it came back (each held to the checks above).
    if rejoins < rounds as u64 {
        problems.push(format!("member {victim} counted {rejoins} rejoins in {rounds} rounds"));
    }
    let (p50, max) = median_max(back_ms.clone());
    let (own_p50, own_max) = median_max(
        parsed[victim]["rejoin_ms"].as_array().map_or(Vec::new(), |a| a.iter().filter_map(Value::as_f64).collect()),
    );
    let (ch50, chmax) = median_max(changes);
    let line = json!({
        "bench": "rejoin",
        "transport": args.transport,
        "nodes": args.nodes,
        "rounds": rounds,
        "rejoins": rejoins,
        "back_after_sigcont_ms_p50": round(p50, 1),
        "back_after_sigcont_ms_max": round(max, 1),
        "rejoin_ms_p50": round(own_p50, 1),
        "rejoin_ms_max": round(own_max, 1),
        "view_changes_per_round_p50": ch50,
        "view_changes_per_round_max": chmax,
        "delivered": reference.len(),
        "missed_while_out": skipped,
        "logs_agree": problems.is_empty(),
        "removed_because": removed_why.first(),
    });
    out(&line.to_string());
    for p in &problems {
        err(&format!("chaos: {p}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(problems.is_empty())
}
