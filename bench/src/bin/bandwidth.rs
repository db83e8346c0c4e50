//! bandwidth: multicast throughput, shaped like Derecho's bandwidth_test.
//!
//! ```text
//! cargo run --release -p bench --bin bandwidth -- --transport mem|shm|tcp|rdma --nodes N \
//!     --senders all|half|one --size BYTES --count MSGS_PER_SENDER --window W \
//!     --mode ordered|unordered [--subgroups K] [--baseline] [--fill] [--json]
//! ```
//!
//! Every node is a member of every subgroup; each sending node runs one application
//! thread per subgroup that builds `count` messages in place (the first payload word is
//! its sender and index; the rest of the slot is sent as it is) and commits them as
//! fast as the window allows. Each node times from its start until it delivered every
//! message of every subgroup, and keeps a running digest of its delivery sequence
//! (per sender in unordered mode). Throughput is averaged over nodes.
//!
//! `push_bytes_per_msg` is what a sending node's pushes copied per message it sent
//! (the predicate thread's `bytes_written`: slots and counters, once per target on tcp,
//! once in all on mem/shm); `bytes_written_per_msg` adds the message's own `size`
//! bytes, which the application writes once, in place (this benchmark writes only the
//! first word; a real sender writes them all).
//!
//! `--baseline` first measures, in the same run, the raw limit of the transport's
//! medium: for mem/shm a two-party copy loop through a shared ring of the same message
//! size (word copies in, word copies out, a counter handshake); for tcp a coalesced
//! loopback socket stream of the same message size. The result is reported as our
//! fraction of it.
#![forbid(unsafe_code)]

use bench::mcast::{self, Common, Digest, ModeArg};
use bench::{err, out, round};
use clap::Parser;
use serde_json::{json, Value};
use spindle_sst::sync::atomic::Ordering;
use spindle_sst::sync::{Arc, Mutex};
use spindle_sst::transport::Transport;
use std::time::{Duration, Instant};
use testkit::TransportKind;

#[derive(Parser, Debug, Clone)]
#[command(about = "Multicast throughput (Derecho bandwidth_test shape)")]
struct Args {
    #[command(flatten)]
    c: Common,
    /// Also measure the medium's raw limit in this run and report our fraction of it.
    #[arg(long)]
    baseline: bool,
    /// Write every message's whole payload, copied from a buffer, as the peers'
    /// publishers do (Aeron, iceoryx2); without it the sender stores only the first
    /// word (the counter), as Derecho's bandwidth test does.
    #[arg(long)]
    fill: bool,
    /// How receivers read each message: `word` its first word (as Derecho's bandwidth
    /// test does), `full` copies every byte out, as `dds_perf --read full` does (with
    /// `--fill`, the bytes a DDS sample's writer and reader move).
    #[arg(long, default_value = "word", value_parser = ["word", "full"])]
    read: String,
}

#[derive(Default)]
struct Seen {
    msgs: u64,
    bytes: u64,
    /// Ordered: the delivery sequence. Unordered: one per sender.
    digests: Vec<Digest>,
    last: Option<Instant>,
}

fn node(c: &Common, fill: bool, full: bool, t: Arc<dyn Transport>) -> Result<Value, String> {
    let me = t.local_id();
    let senders = c.sender_ids();
    let per_subgroup = c.count * senders.len() as u64;
    let seen: Vec<Arc<Mutex<Seen>>> = (0..c.subgroups)
        .map(|_| Arc::new(Mutex::new(Seen { digests: vec![Digest::default(); senders.len()], ..Seen::default() })))
        .collect();
    let ordered = c.mode == ModeArg::Ordered;
    let upcalls = seen
        .iter()
        .map(|s| {
            let s = s.clone();
            let mut copy = vec![0u8; if full { c.size } else { 0 }];
            Box::new(move |b: &spindle_smc::Batch| {
                let mut s = s.lock().unwrap();
                for m in b.iter() {
                    let w0 = if full && m.len() == copy.len() && m.len() >= 8 {
                        m.read(&mut copy);
                        u64::from_le_bytes(copy[..8].try_into().expect("8 bytes"))
                    } else {
                        m.word(0)
                    };
                    let d = if ordered { &mut s.digests[0] } else { &mut s.digests[m.sender()] };
                    d.add(m.sender() as u64);
                    d.add(w0);
                    s.bytes += m.len() as u64;
                }
                s.msgs += b.len() as u64;
                s.last = Some(Instant::now());
            }) as spindle_smc::runtime::Upcall
        })
        .collect();
    let rt = c.start(t, upcalls)?;
    for sg in rt.subgroups() {
        sg.set_packing(c.pack);
    }
    let start = Instant::now();
    let sending = senders.contains(&me);
    std::thread::scope(|scope| {
        if sending {
            for (k, sg) in rt.subgroups().iter().enumerate() {
                let size = c.size;
                let count = c.count;
                std::thread::Builder::new()
                    .name(format!("send-{}-{k}", me.0))
                    .spawn_scoped(scope, move || {
                        let payload = vec![0x5a; if fill { size } else { 0 }];
                        for i in 0..count {
                            let mut slot = match sg.reserve(size) {
                                Ok(slot) => slot,
                                Err(e) => {
                                    // A node that cannot send ends the run (its
                                    // peers see it leave), saying why.
                                    err(&format!("node {}: cannot send: {e}", me.0));
                                    std::process::exit(1);
                                }
                            };
                            if fill {
                                slot.write(0, &payload);
                            }
                            slot.write_word(0, (u64::from(me.0) << 48) | i);
                            slot.commit();
                        }
                    })
                    .expect("spawn sender");
            }
        }
        // Wait for every delivery, reporting progress from node 0.
        let mut next_report = start + Duration::from_secs(1);
        loop {
            let got: u64 = seen.iter().map(|s| s.lock().unwrap().msgs).sum();
            if got >= per_subgroup * c.subgroups as u64 {
                break;
            }
            if start.elapsed() > Duration::from_secs(1800) {
                err(&format!("node {}: gave up after 30 min with {got} deliveries", me.0));
                break;
            }
            if me.0 == 0 && Instant::now() >= next_report {
                err(&format!("bandwidth: node 0 delivered {got} / {}", per_subgroup * c.subgroups as u64));
                next_report += Duration::from_secs(1);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    // Stay until every member delivered what this one did: in unordered mode a
    // sender delivers its own messages at once, and stopping then would close its
    // links with payloads still on their way to slower members.
    let everyone = testkit::poll_until(Duration::from_secs(600), Duration::from_millis(1), || {
        rt.subgroups().iter().all(|sg| {
            sg.with_core(|core| {
                let mine: u64 = core.delivered().iter().sum();
                (0..c.nodes).all(|rank| core.member_delivered_total(rank) >= mine)
            })
        })
    });
    if !everyone {
        return Err(format!("node {}: the other members did not deliver everything within 10 min", me.0));
    }
    let mut stats = spindle_smc::Stats::default();
    for sg in rt.subgroups() {
        let s = sg.stats();
        stats.nulls += s.nulls;
        stats.send_batches.merge(&s.send_batches);
        stats.recv_batches.merge(&s.recv_batches);
        stats.deliver_batches.merge(&s.deliver_batches);
    }
    let poll = rt.stop();
    let bytes_written = poll.bytes_written;
    let (mut msgs, mut bytes, mut last) = (0, 0, start);
    let mut digests = Vec::new();
    for s in &seen {
        let s = s.lock().unwrap();
        msgs += s.msgs;
        bytes += s.bytes;
        last = last.max(s.last.unwrap_or(start));
        let mut all = Digest::default();
        s.digests.iter().for_each(|d| all.add(d.0));
        digests.push(format!("{:016x}", all.0));
    }
    let secs = (last - start).as_secs_f64().max(1e-9);
    Ok(json!({
        "node": me.0, "msgs": msgs, "bytes": bytes, "secs": secs, "digests": digests,
        "nulls": stats.nulls,
        "sent": if sending { c.count * c.subgroups as u64 } else { 0 },
        "bytes_written": bytes_written,
        "passes": poll.passes,
        "busy_yields": poll.busy_yields,
        "send_batch_mean": stats.send_batches.mean(),
        "recv_batch_mean": stats.recv_batches.mean(),
        "deliver_batch_mean": stats.deliver_batches.mean(),
    }))
}

/// GB/s of the medium's raw limit for `size`-byte messages (see the module docs): the
/// best of three runs, since two spinning threads on a shared machine are noisy.
fn baseline(kind: TransportKind, size: usize, secs: f64) -> f64 {
    (0..3)
        .map(|_| match kind {
            TransportKind::Tcp => tcp_stream(size, secs / 3.0),
            TransportKind::Mem | TransportKind::Shm => copy_loop(size, secs / 3.0),
            // No raw baseline is built for RDMA (the ratio is reported as 0).
            TransportKind::Rdma => 0.0,
        })
        .fold(0.0, f64::max)
}

/// Two threads, a ring of 64 message slots in registered memory, word copies in and
/// out, and a counter each way.
fn copy_loop(size: usize, secs: f64) -> f64 {
    const SLOTS: usize = 64;
    let words = size.div_ceil(8);
    let ring = Arc::new(spindle_sst::Region::new(16 + SLOTS * words * 8));
    let (head, tail) = (0usize, 8usize);
    let base = 16;
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    let r2 = ring.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u64; words];
        let mut n = 0u64;
        let t0 = Instant::now();
        loop {
            let avail = r2.load(head, Ordering::Acquire);
            if avail == u64::MAX {
                break;
            }
            while n < avail {
                r2.read_words(base + (n as usize % SLOTS) * words * 8, &mut buf);
                n += 1;
                r2.store(tail, n, Ordering::Release);
            }
            std::hint::spin_loop();
        }
        (n, t0.elapsed().as_secs_f64())
    });
    let msg: Vec<u64> = (0..words as u64).collect();
    let mut n = 0u64;
    while Instant::now() < stop {
        for _ in 0..256 {
            while n - ring.load(tail, Ordering::Acquire) >= SLOTS as u64 {
                std::hint::spin_loop();
            }
            ring.apply_write(base + (n as usize % SLOTS) * words * 8, &msg);
            n += 1;
            ring.store(head, n, Ordering::Release);
        }
    }
    while ring.load(tail, Ordering::Acquire) < n {
        std::hint::spin_loop();
    }
    ring.store(head, u64::MAX, Ordering::Release);
    let (got, t) = reader.join().expect("reader");
    got as f64 * size as f64 / t / 1e9
}

/// A loopback socket stream: `size`-byte messages coalesced into 64 KiB writes.
fn tcp_stream(size: usize, secs: f64) -> f64 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let reader = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        let mut buf = vec![0u8; 64 << 10];
        let (mut got, t0) = (0u64, Instant::now());
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n as u64,
            }
        }
        (got, t0.elapsed().as_secs_f64())
    });
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).ok();
    let per = ((64 << 10) / size).max(1);
    let chunk = vec![7u8; per * size];
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < stop {
        if s.write_all(&chunk).is_err() {
            break;
        }
    }
    drop(s);
    let (got, t) = reader.join().expect("reader");
    got as f64 / t / 1e9
}

fn main() {
    let args = Args::parse();
    let c = &args.c;
    if let Err(e) = c.validate() {
        bench::usage("bandwidth", &e);
    }
    if mcast::child_main(c, |t| node(c, args.fill, args.read == "full", t)) {
        return;
    }
    if args.baseline && c.link_mbit.is_some() {
        bench::usage("bandwidth", "--baseline measures loopback, not the shaped links of --link-mbit");
    }
    let base = args.baseline.then(|| {
        if !c.json {
            err("bandwidth: measuring the baseline");
        }
        baseline(c.transport, c.size, 1.0)
    });
    let results = match mcast::run_nodes(c, |t| node(c, args.fill, args.read == "full", t)) {
        Ok(r) => r,
        Err(e) => bench::finish("bandwidth", Err(e)),
    };
    let n = results.len() as f64;
    let f = |k: &str| results.iter().map(|r| r[k].as_f64().unwrap_or(0.0)).collect::<Vec<_>>();
    let (msgs, bytes, secs) = (f("msgs"), f("bytes"), f("secs"));
    let msgs_per_s = msgs.iter().zip(&secs).map(|(m, s)| m / s).sum::<f64>() / n;
    let gb_per_s = bytes.iter().zip(&secs).map(|(b, s)| b / s / 1e9).sum::<f64>() / n;
    // Per receiving member (the members that send nothing), where there are any.
    let receivers: Vec<f64> = (results.iter().zip(bytes.iter().zip(&secs)))
        .filter(|(r, _)| r["sent"].as_f64().unwrap_or(0.0) == 0.0)
        .map(|(_, (b, s))| b / s / 1e9)
        .collect();
    let receiver_gb_per_s = (!receivers.is_empty()).then(|| receivers.iter().sum::<f64>() / receivers.len() as f64);
    let digest_agree = results.windows(2).all(|w| w[0]["digests"] == w[1]["digests"]);
    let expected = c.count * c.sender_ids().len() as u64 * c.subgroups as u64;
    let complete = msgs.iter().all(|m| *m as u64 == expected);
    let mean = |k: &str| round(f(k).iter().sum::<f64>() / n, 2);
    let nulls: f64 = f("nulls").iter().sum();
    // Bytes a sending node's pushes copied per message it sent (every push: slots,
    // counters), the mean over sending nodes; and with the message's own write in its
    // slot (the application builds it in place: `size` bytes, once) all the bytes a
    // sender writes per message.
    let per_sender: Vec<f64> = results
        .iter()
        .filter(|r| r["sent"].as_f64().unwrap_or(0.0) > 0.0)
        .map(|r| r["bytes_written"].as_f64().unwrap_or(0.0) / r["sent"].as_f64().unwrap_or(1.0))
        .collect();
    let push_bytes_per_msg = per_sender.iter().sum::<f64>() / per_sender.len().max(1) as f64;
    let bytes_written_per_msg = c.size as f64 + push_bytes_per_msg;
    let mut line = json!({
        "bench": "bandwidth",
        "transport": c.transport.name(),
        "nodes": c.nodes,
        "senders": format!("{:?}", c.senders).to_lowercase(),
        "size": c.size,
        "relay": c.relay,
        "pack": c.pack,
        "fill": args.fill,
        "read": args.read,
        "count": c.count,
        "window": c.window(),
        "mode": if c.mode == ModeArg::Ordered { "ordered" } else { "unordered" },
        "subgroups": c.subgroups,
        "msgs_per_s": round(msgs_per_s, 0),
        "gb_per_s": round(gb_per_s, 4),
        "receiver_gb_per_s": receiver_gb_per_s.map(|g| round(g, 4)),
        "digest_agree": digest_agree && complete,
        "digests": results.first().map(|r| r["digests"].clone()),
        "complete": complete,
        "nulls": nulls,
        "push_bytes_per_msg": round(push_bytes_per_msg, 1),
        "bytes_written_per_msg": round(bytes_written_per_msg, 1),
        "send_batch_mean": mean("send_batch_mean"),
        "recv_batch_mean": mean("recv_batch_mean"),
        "deliver_batch_mean": mean("deliver_batch_mean"),
        "spin_us": c.spin(),
        "busy_yield_us": c.polling.busy_yield_us,
        // Predicate passes and yields after a working one, all nodes, per message delivered.
        "passes_per_msg": round(f("passes").iter().sum::<f64>() / f("msgs").iter().sum::<f64>().max(1.0), 4),
        "busy_yields_per_msg": round(f("busy_yields").iter().sum::<f64>() / f("msgs").iter().sum::<f64>().max(1.0), 4),
        "link_mbit": c.link_mbit,
    });
    if let Some(b) = base {
        line["baseline_gb_per_s"] = json!(round(b, 4));
        line["fraction_of_baseline"] = json!(round(gb_per_s / b, 4));
    }
    if c.json {
        out(&line.to_string());
    } else {
        out(&format!(
            "bandwidth: {} nodes over {}, senders {:?}, {} B x {} per sender, window {}, {:?}, {} subgroup(s)",
            c.nodes,
            c.transport,
            c.senders,
            c.size,
            c.count,
            c.window(),
            c.mode,
            c.subgroups
        ));
        out(&format!("  {:.0} msgs/s, {:.3} GB/s delivered per node (mean over nodes)", msgs_per_s, gb_per_s));
        if let Some(g) = receiver_gb_per_s {
            out(&format!("  {g:.3} GB/s per receiving node (the nodes that send nothing)"));
        }
        out(&format!("  delivery sequences agree: {}  nulls: {nulls}", line["digest_agree"]));
        out(&format!(
            "  bytes a sender writes per message: {:.1} (the message in place, {} B, and {:.1} B of pushes)",
            bytes_written_per_msg, c.size, push_bytes_per_msg
        ));
        out(&format!(
            "  mean batch: send {} recv {} deliver {}",
            line["send_batch_mean"], line["recv_batch_mean"], line["deliver_batch_mean"]
        ));
        if let Some(b) = base {
            out(&format!("  baseline {:.3} GB/s; we reach {:.1}% of it", b, 100.0 * gb_per_s / b));
        }
    }
    bench::finish("bandwidth", Ok(digest_agree && complete))
}
