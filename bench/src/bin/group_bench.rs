//! group_bench: multicast throughput through the full `Group` runtime (views engine
//! live, heartbeats on, failure detection armed), next to raw smc in the same run.
//!
//! ```text
//! cargo run --release -p bench --bin group_bench -- --transport shm|tcp --nodes N \
//!     --senders one|all --size BYTES --count MSGS_PER_SENDER [--deliver in-place|copy] \
//!     [--requests R] [--no-raw] [--json]
//! ```
//!
//! N member processes form one group (member 0 starts it, the others join through
//! it) with one subgroup of every member; once all run the full view, the senders send
//! `count` messages each, built in place (the first word is the sender and index), and
//! every member times its deliveries and keeps a digest of the delivery sequence.
//! `--deliver in-place` reads each message in its slot (`on_deliver_in_place`: the
//! first word, as `bandwidth` does); `copy` takes the `&[u8]` callback (`on_deliver`:
//! one copy per message). Then member 1 sends `--requests` point-to-point requests of
//! 64 bytes to member 0 (`Group::request`, one kept connection) and reports p50/p99.
//! Unless `--no-raw`, the parent then runs `bandwidth` with the same shape (raw smc
//! over a bare transport: no views engine, no heartbeats) and reports the fraction.
#![forbid(unsafe_code)]

use bench::mcast::{Digest, Senders};
use bench::{err, out, round, Latency};
use clap::Parser;
use serde_json::{json, Value};
use spindle_sst::sync::atomic::{AtomicU64, Ordering};
use spindle_views::group::GroupBuilder;
use spindle_views::layout::Shards;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::TransportKind;

#[derive(Parser, Debug, Clone)]
#[command(about = "Multicast throughput through the Group runtime, next to raw smc")]
struct Args {
    /// Transport: shm (processes, /dev/shm) or tcp (processes, 127.0.0.1).
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Members.
    #[arg(long, default_value_t = 2)]
    nodes: usize,
    /// Which members send.
    #[arg(long, value_enum, default_value = "one")]
    senders: Senders,
    /// Payload bytes per message (the subgroup's max_msg; at least 8).
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// The predicate thread's settings.
    #[command(flatten)]
    polling: bench::Polling,
    /// Messages per sender.
    #[arg(long, default_value_t = 200_000)]
    count: u64,
    /// Slots per sender ring; without it the ring is sized in bytes, as a group's
    /// config does (`spindle_smc::spec::auto_window`: 2 MiB of slots, 256 to 16,384).
    #[arg(long)]
    window: Option<usize>,
    /// How members take deliveries.
    #[arg(long, default_value = "in-place", value_parser = ["in-place", "copy"])]
    deliver: String,
    /// Point-to-point requests from member 1 to member 0 after the multicast phase.
    #[arg(long, default_value_t = 2000)]
    requests: u64,
    /// Skip the raw smc run.
    #[arg(long)]
    no_raw: bool,
    /// Clients (`spindle_views::client`, threads of this program) subscribed to the
    /// subgroup, spread over the members round-robin; each reports its rate.
    #[arg(long, default_value_t = 0)]
    clients: usize,
    /// Write every payload byte of each message (default: the first word only, as
    /// Derecho's bandwidth test does); for comparisons with programs that fill the
    /// whole message, such as `dds_perf`.
    #[arg(long)]
    fill: bool,
    /// Print one JSON line instead of the summary.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    member: bench::MemberArgs,
}

impl Args {
    fn senders(&self) -> usize {
        self.senders.count(self.nodes)
    }
    /// Slots per sender ring: `--window`, or sized in bytes for `--size`.
    fn window(&self) -> usize {
        self.window.unwrap_or_else(|| spindle_smc::spec::auto_window(self.size))
    }

    fn validate(&self) -> Result<(), String> {
        if !(1..=64).contains(&self.nodes) {
            return Err("--nodes must be in 1..=64".into());
        }
        if self.size < 8 || self.size > spindle_smc::spec::MAX_MSG {
            return Err(format!("--size must be in 8..={}", spindle_smc::spec::MAX_MSG));
        }
        if self.window.is_some_and(|w| w == 0 || w > spindle_smc::spec::MAX_WINDOW) {
            return Err(format!("--window must be in 1..={}", spindle_smc::spec::MAX_WINDOW));
        }
        if self.count == 0 {
            return Err("--count must be positive".into());
        }
        Ok(())
    }
}

fn main() {
    let args = Args::parse();
    if let Err(e) = args.validate() {
        bench::usage("group_bench", &e);
    }
    bench::run_parent_or_member("group_bench", &args.member, |id| member(&args, id), || parent(&args))
}

/// What a member's callback counts (it owns the digest and publishes its figures
/// through atomics, so the callback takes no lock per message).
struct Seen {
    digest: Digest,
    msgs: u64,
    expected: u64,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    msgs: AtomicU64,
    digest: AtomicU64,
    /// When the last expected message was delivered.
    done: Mutex<Option<Instant>>,
}

impl Seen {
    fn add(&mut self, sender: u32, first_word: u64) {
        self.digest.add(sender as u64);
        self.digest.add(first_word);
        self.msgs += 1;
        if self.msgs == self.expected {
            *self.shared.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            self.shared.digest.store(self.digest.0, Ordering::Relaxed);
        }
        self.shared.msgs.store(self.msgs, Ordering::Release);
    }
}

/// One member process: the setup lines `ChildSet` expects, the run, `RESULT`.
fn member(args: &Args, id: u32) -> Result<(), String> {
    // (The parent's line after READY, the peer list of the bare-transport
    // protocol, is not used.)
    let b = args.member.group_builder(id, &args.transport)?.max_msg(args.size).window(args.window());
    let b = args.polling.apply(b);
    let cfg = b.build().map_err(|e| e.to_string())?;
    let k = args.senders();
    let layout = Shards {
        shard_size: args.nodes,
        max_shards: 1,
        senders: spindle_views::layout::Senders::First(k),
        mode: spindle_smc::Mode::Ordered,
        window: args.window(),
        max_msg: args.size,
        arena: 0,
        relay: false,
    };
    let expected = args.count * k as u64;
    let shared = Arc::new(Shared::default());
    let mut seen = Seen { digest: Digest::default(), msgs: 0, expected, shared: shared.clone() };
    let mut builder = GroupBuilder::new(cfg).layout(layout).on_request(|b| b.to_vec());
    builder = if args.deliver == "copy" {
        builder.on_deliver(0, move |d| {
            let w = u64::from_le_bytes(d.data[..8].try_into().expect("8 bytes"));
            seen.add(d.sender.0, w);
        })
    } else {
        builder.on_deliver_in_place(0, move |d| seen.add(d.sender.0, d.message.word(0)))
    };
    let group = builder.start().map_err(|e| e.to_string())?;
    if !group.wait_for_members(args.nodes, Duration::from_secs(120)) {
        return Err(format!("the group did not reach {} members", args.nodes));
    }
    println!("JOINED");
    if testkit::wait_for_parent() != "GO" {
        return Err("expected GO".into());
    }
    if args.clients > 0 {
        // The parent connects its clients, then says START.
        println!("LISTEN {}", group.listen_addr());
        if testkit::wait_for_parent() != "START" {
            return Err("expected START".into());
        }
    }
    let (start, cpu0) = (Instant::now(), testkit::cpu_time(testkit::CpuClock::Process));
    let view0 = group.view().map_or(0, |v| v.id().0);
    std::thread::scope(|scope| -> Result<(), String> {
        if (id as usize) < k {
            let g = &group;
            scope.spawn(move || {
                let body = vec![0x5au8; args.size];
                for i in 0..args.count {
                    let tag = (u64::from(id) << 48) | i;
                    let sent = if args.fill {
                        g.send_with(0, args.size, |slot| {
                            slot.write(0, &body);
                            slot.write_word(0, tag);
                        })
                    } else {
                        g.send_with(0, args.size, |slot| slot.write_word(0, tag))
                    };
                    if let Err(e) = sent {
                        err(&format!("member {id}: send {i}: {e}"));
                        return;
                    }
                }
            });
        }
        let done = testkit::poll_until(Duration::from_secs(1800), Duration::from_millis(1), || {
            shared.msgs.load(Ordering::Acquire) >= expected || group.stopped().is_some()
        });
        match group.stopped() {
            Some(why) => Err(format!("the group stopped: {why}")),
            None if !done => Err("gave up after 30 min".into()),
            None => Ok(()),
        }
    })?;
    let msgs = shared.msgs.load(Ordering::Acquire);
    let digest = Digest(shared.digest.load(Ordering::Relaxed));
    let last = shared.done.lock().unwrap_or_else(|p| p.into_inner()).unwrap_or_else(Instant::now);
    let secs = (last - start).as_secs_f64().max(1e-9);
    let cpu_pct = 100.0 * testkit::cpu_time(testkit::CpuClock::Process).saturating_sub(cpu0).as_secs_f64() / secs;
    let mut lat = Latency::default();
    if id == 1 {
        let body = [7u8; 64];
        for _ in 0..args.requests {
            let t = Instant::now();
            group
                .request(spindle_sst::transport::NodeId(0), &body, Duration::from_secs(10))
                .map_err(|e| e.to_string())?;
            lat.record(t.elapsed());
        }
    }
    let m = group.metrics();
    let v = json!({
        "node": id, "msgs": msgs, "secs": secs, "digest": format!("{:016x}", digest.0),
        "views": m.views_installed, "requests": lat.len(), "cpu_pct": round(cpu_pct, 1),
        "clients_dropped": m.clients_dropped, "view_changes_during_run": group.view().map_or(0, |v| v.id().0).saturating_sub(view0),
        "request_p50_us": if lat.is_empty() { Value::Null } else { json!(round(lat.quantile_us(0.5), 1)) },
        "request_p99_us": if lat.is_empty() { Value::Null } else { json!(round(lat.quantile_us(0.99), 1)) },
    });
    println!("RESULT {v}");
    testkit::wait_for_parent();
    drop(group);
    Ok(())
}

fn parent(args: &Args) -> Result<bool, String> {
    testkit::catch_interrupts();
    spindle_sst::transport::shm::remove_stale_files();
    // The members join as a Group; the bare-transport handshake of the child
    // protocol is only used for its READY/JOINED/GO lines.
    let mut kids = bench::start_members(args.nodes, TransportKind::Shm, Duration::from_secs(3600), &[], &[], &[])?;
    let clients = if args.clients > 0 {
        let all: Vec<usize> = (0..args.nodes).collect();
        let addrs = kids.expect_lines("LISTEN ", &all).map_err(|e| e.to_string())?;
        let addrs: Vec<SocketAddr> =
            addrs.iter().map(|a| a.parse().map_err(|_| format!("bad address {a:?}"))).collect::<Result<_, _>>()?;
        let expected = args.count * args.senders() as u64;
        Some(run_clients(args.clients, &addrs, expected, || kids.tell_all("START").map_err(|e| e.to_string()))?)
    } else {
        None
    };
    let (results, exited_ok) = bench::collect_results(kids, args.nodes)?;
    let n = results.len() as f64;
    let expected = args.count * args.senders() as u64;
    let complete = results.iter().all(|r| r["msgs"].as_u64() == Some(expected));
    let digest_agree = results.windows(2).all(|w| w[0]["digest"] == w[1]["digest"]) && complete;
    let msgs_per_s =
        results.iter().map(|r| r["msgs"].as_f64().unwrap_or(0.0) / r["secs"].as_f64().unwrap_or(1.0)).sum::<f64>() / n;
    let views = results.iter().map(|r| r["views"].as_u64().unwrap_or(0)).max().unwrap_or(0);
    let changes: u64 = results.iter().map(|r| r["view_changes_during_run"].as_u64().unwrap_or(0)).sum();
    let requester = results.iter().find(|r| r["node"] == 1);
    let mut line = json!({
        "bench": "group_bench",
        "transport": args.transport,
        "nodes": args.nodes,
        "senders": format!("{:?}", args.senders).to_lowercase(),
        "size": args.size,
        "count": args.count,
        "window": args.window(),
        "deliver": args.deliver,
        "msgs_per_s": round(msgs_per_s, 0),
        "gb_per_s": round(msgs_per_s * args.size as f64 / 1e9, 4),
        "digest_agree": digest_agree,
        "views_installed": views,
        "view_changes_during_run": changes,
        "request_p50_us": requester.map_or(Value::Null, |r| r["request_p50_us"].clone()),
        "request_p99_us": requester.map_or(Value::Null, |r| r["request_p99_us"].clone()),
    });
    if let Some(c) = &clients {
        let min = c.iter().copied().fold(f64::INFINITY, f64::min);
        line["clients"] = json!(args.clients);
        line["client_msgs_per_s"] = json!(c.iter().map(|r| round(*r, 0)).collect::<Vec<_>>());
        line["min_client_msgs_per_s"] = json!(round(min, 0));
        line["clients_all_received"] = json!(c.iter().all(|r| *r > 0.0));
        line["member_cpu_pct"] = json!(results.iter().map(|r| r["cpu_pct"].clone()).collect::<Vec<_>>());
        line["clients_dropped"] =
            json!(results.iter().map(|r| r["clients_dropped"].as_u64().unwrap_or(0)).sum::<u64>());
    }
    if !args.no_raw {
        let raw = raw_smc(args)?;
        line["raw_smc_msgs_per_s"] = json!(round(raw, 0));
        line["fraction_of_raw"] = json!(round(msgs_per_s / raw, 3));
    }
    if args.json {
        out(&line.to_string());
    } else {
        out(&format!(
            "group_bench: {} members over {}, {} sender(s), {} B x {} each, deliveries {}",
            args.nodes,
            args.transport,
            args.senders(),
            args.size,
            args.count,
            args.deliver
        ));
        out(&format!("  {:.0} msgs/s delivered per member; sequences agree: {digest_agree}", msgs_per_s));
        if let Some(raw) = line["raw_smc_msgs_per_s"].as_f64() {
            out(&format!(
                "  raw smc, same shape, this run: {raw:.0} msgs/s; the Group reaches {:.1}%",
                100.0 * msgs_per_s / raw
            ));
        }
        out(&format!("  requests member 1 -> 0: p50 {} µs, p99 {} µs", line["request_p50_us"], line["request_p99_us"]));
        if clients.is_some() {
            out(&format!(
                "  {} clients: min {} msgs/s each (all: {}), members' CPU {}%, dropped {}",
                args.clients,
                line["min_client_msgs_per_s"],
                line["client_msgs_per_s"],
                line["member_cpu_pct"],
                line["clients_dropped"]
            ));
        }
    }
    let clients_ok = clients.as_ref().map_or(true, |c| c.iter().all(|r| *r > 0.0)) && changes == 0;
    Ok(digest_agree && exited_ok && clients_ok)
}

/// Connects `k` clients to the members at `addrs` (round-robin), subscribes each to
/// subgroup 0, calls `start`, and returns each client's rate: every one of the
/// `expected` messages received, over the time from `start` to its last (0 for a
/// client that did not get them all within 10 minutes, or was dropped).
fn run_clients(
    k: usize,
    addrs: &[SocketAddr],
    expected: u64,
    start: impl FnOnce() -> Result<(), String>,
) -> Result<Vec<f64>, String> {
    let wait = Duration::from_secs(30);
    let mut clients = Vec::new();
    for i in 0..k {
        let at = (i + 1) % addrs.len(); // member 0 sends: clients start at member 1
        let c = spindle_views::client::Client::connect(&addrs[at..=at], wait).map_err(|e| e.to_string())?;
        c.subscribe(0).map_err(|e| e.to_string())?;
        c.request(b"ready", wait).map_err(|e| e.to_string())?; // the subscription is in place
        clients.push(c);
    }
    start()?;
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let hs: Vec<_> = clients
            .iter_mut()
            .map(|c| {
                s.spawn(move || {
                    let (mut got, mut last) = (0u64, t0);
                    while got < expected && t0.elapsed() < Duration::from_secs(600) {
                        match c.recv(Duration::from_millis(100)) {
                            Ok(Some(_)) => (got, last) = (got + 1, Instant::now()),
                            Ok(None) => {}
                            Err(e) => {
                                err(&format!("group_bench: a client: {e}"));
                                return 0.0;
                            }
                        }
                    }
                    if got < expected {
                        0.0
                    } else {
                        got as f64 / (last - t0).as_secs_f64().max(1e-9)
                    }
                })
            })
            .collect();
        Ok(hs.into_iter().map(|h| h.join().unwrap_or(0.0)).collect())
    })
}

/// Raw smc with the same shape: the `bandwidth` program next to this one.
fn raw_smc(args: &Args) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?.with_file_name("bandwidth");
    let senders = format!("{:?}", args.senders).to_lowercase();
    let o = Command::new(&exe)
        .args(["--transport", &args.transport, "--nodes", &args.nodes.to_string(), "--senders", &senders])
        .args(["--size", &args.size.to_string(), "--count", &args.count.to_string()])
        .args(["--window", &args.window().to_string(), "--mode", "ordered", "--json"])
        .output()
        .map_err(|e| format!("run {}: {e}", exe.display()))?;
    let text = String::from_utf8_lossy(&o.stdout);
    let v: Value = serde_json::from_str(text.trim()).map_err(|e| format!("bandwidth printed {text:?}: {e}"))?;
    if v["digest_agree"] != json!(true) {
        return Err(format!("the raw run did not complete: {text}"));
    }
    v["msgs_per_s"].as_f64().ok_or_else(|| "no msgs_per_s from bandwidth".into())
}
