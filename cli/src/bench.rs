//! `bench`: a local group's throughput. N member processes (this program again,
//! with `--member`) form one group on this host, one subgroup of every member; the
//! senders each send `count` messages of `size` bytes as fast as the window
//! allows; every member delivers all of them in the one total order, times it, and
//! keeps a digest of the sequence. The parent shows the deliveries as a progress
//! bar and reports each member's rate and whether every digest agrees.

use crate::out::{CliError, Out};
use serde_json::{json, Value};
use spindle::sst::sync::atomic::{AtomicU64, Ordering};
use spindle::views::config::{Config, Transport};
use spindle::views::group::GroupBuilder;
use spindle::views::layout::{Senders, Shards};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Member processes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Which members send: all, or one (the first).
    #[arg(long, default_value = "all", value_parser = ["all", "one"])]
    senders: String,
    /// Payload bytes per message (8 to 65536).
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Messages per sender.
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Data-plane transport: shm (the default) or tcp (over 127.0.0.1).
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// The longest the run may take, in seconds.
    #[arg(long, default_value_t = 600)]
    deadline: u64,
    /// A member process (the parent starts them).
    #[arg(long, hide = true)]
    member: Option<u32>,
    /// The group's name (given to the members).
    #[arg(long, hide = true)]
    group: Option<String>,
    /// Member 0's control address (given to the others).
    #[arg(long, hide = true)]
    contact: Option<SocketAddr>,
}

impl BenchArgs {
    fn senders(&self) -> usize {
        if self.senders == "one" {
            1
        } else {
            self.nodes
        }
    }

    fn check(&self) -> Result<(), CliError> {
        if !(1..=32).contains(&self.nodes) {
            return Err(CliError::usage("--nodes must be in 1..=32"));
        }
        if !(8..=65536).contains(&self.size) {
            return Err(CliError::usage("--size must be in 8..=65536"));
        }
        if self.count == 0 {
            return Err(CliError::usage("--count must be at least 1"));
        }
        Ok(())
    }
}

pub fn run(out: &Out, args: &BenchArgs) -> Result<(), CliError> {
    args.check()?;
    match args.member {
        Some(id) => member(args, id).map_err(CliError::failed),
        None => parent(out, args),
    }
}

/// A digest of a delivery sequence (FNV-1a over each message's first word).
fn fold(d: u64, word: u64) -> u64 {
    word.to_le_bytes().iter().fold(d, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
}

fn member(args: &BenchArgs, id: u32) -> Result<(), String> {
    let name = args.group.clone().ok_or("no --group")?;
    let k = args.senders();
    let transport = if args.transport == "tcp" { Transport::Tcp } else { Transport::Shm };
    let mut b = Config::builder(id, SocketAddr::from(([127, 0, 0, 1], 0)))
        .name(&name)
        .transport(transport)
        .discovery(false)
        .max_msg(args.size)
        .timeouts(Duration::from_millis(100), Duration::from_secs(2));
    if let Some(c) = args.contact {
        b = b.contact(c);
    }
    let cfg = b.build().map_err(|e| e.to_string())?;
    let layout = Shards {
        shard_size: args.nodes,
        max_shards: 1,
        senders: Senders::First(k),
        mode: spindle::smc::Mode::Ordered,
        // The ring sized in bytes for `--size`, as the config does by default.
        window: cfg.ring_window(),
        max_msg: args.size,
        arena: 0,
        relay: false,
    };
    let expected = args.count * k as u64;
    let delivered = Arc::new(AtomicU64::new(0));
    let (d2, mut digest) = (delivered.clone(), 0xcbf2_9ce4_8422_2325u64);
    let done_at = Arc::new(std::sync::Mutex::new(None::<(Instant, u64)>));
    let d3 = done_at.clone();
    let group = GroupBuilder::new(cfg)
        .layout(layout)
        .on_deliver_in_place(0, move |m| {
            digest = fold(digest, m.message.word(0));
            let n = d2.fetch_add(1, Ordering::Release) + 1;
            if n == expected {
                *d3.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), digest));
            }
        })
        .start()
        .map_err(|e| e.to_string())?;
    say(&format!("LISTEN {}", group.listen_addr()));
    if !group.wait_for_members(args.nodes, Duration::from_secs(60)) {
        return Err(format!("the group did not reach {} members in 60 s", args.nodes));
    }
    say("JOINED");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).map_err(|e| e.to_string())?;
    if line.trim() != "GO" {
        return Err("expected GO".into());
    }
    let start = Instant::now();
    std::thread::scope(|s| -> Result<(), String> {
        if (id as usize) < k {
            let g = &group;
            s.spawn(move || {
                for i in 0..args.count {
                    let tag = (u64::from(id) << 48) | i;
                    if let Err(e) = g.send_with(0, args.size, |slot| slot.write_word(0, tag)) {
                        eprintln!("member {id}: send {i}: {e}");
                        return;
                    }
                }
            });
        }
        let deadline = start + Duration::from_secs(args.deadline);
        let mut shown = 0;
        loop {
            let n = delivered.load(Ordering::Acquire);
            if n >= expected {
                break Ok(());
            }
            if let Some(why) = group.stopped() {
                break Err(format!("the group stopped: {why}"));
            }
            if Instant::now() > deadline {
                break Err(format!("{n} of {expected} delivered by the deadline"));
            }
            if n - shown > expected / 100 {
                say(&format!("PROGRESS {n}"));
                shown = n;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })?;
    let (end, digest) = (*done_at.lock().unwrap_or_else(|p| p.into_inner())).ok_or("no end time")?;
    let secs = end.duration_since(start).as_secs_f64();
    say(&format!("PROGRESS {expected}"));
    say(&format!(
        "RESULT {}",
        json!({"member": id, "delivered": expected, "secs": secs, "msgs_per_sec": expected as f64 / secs,
               "digest": format!("{digest:016x}")})
    ));
    // Stay until the parent has every result (others may still be delivering).
    line.clear();
    let _ = std::io::stdin().read_line(&mut line);
    group.shutdown();
    Ok(())
}

fn say(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}").and_then(|_| o.flush());
}

/// A member process and its lines.
struct Kid {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Kid {
    fn start(args: &BenchArgs, id: u32, name: &str, contact: Option<SocketAddr>) -> Result<Kid, CliError> {
        let exe = std::env::current_exe().map_err(|e| CliError::failed(format!("this program's path: {e}")))?;
        let mut c = Command::new(exe);
        c.args(["bench", "--member", &id.to_string(), "--group", name, "--nodes", &args.nodes.to_string()])
            .args(["--senders", &args.senders, "--size", &args.size.to_string(), "--count", &args.count.to_string()])
            .args(["--transport", &args.transport, "--deadline", &args.deadline.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(a) = contact {
            c.args(["--contact", &a.to_string()]);
        }
        let mut child = c.spawn().map_err(|e| CliError::failed(format!("starting member {id}: {e}")))?;
        let (stdin, stdout) = (child.stdin.take().expect("piped"), child.stdout.take().expect("piped"));
        let (tx, lines) = channel();
        std::thread::spawn(move || BufReader::new(stdout).lines().map_while(Result::ok).try_for_each(|l| tx.send(l)));
        Ok(Kid { child, stdin, lines })
    }

    /// The next line starting with `tag` (its rest), within `until`.
    fn expect(&self, tag: &str, until: Instant, id: usize) -> Result<String, CliError> {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    if let Some(rest) = l.strip_prefix(tag) {
                        return Ok(rest.trim().to_string());
                    }
                }
                Err(_) => return Err(CliError::failed(format!("member {id} said no {tag:?} in time (or it died)"))),
            }
        }
    }

    fn tell(&mut self, line: &str) {
        let _ = writeln!(self.stdin, "{line}").and_then(|_| self.stdin.flush());
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn parent(out: &Out, args: &BenchArgs) -> Result<(), CliError> {
    let name = format!("bench{}", std::process::id());
    let until = Instant::now() + Duration::from_secs(args.deadline);
    let k = args.senders();
    out.note(&format!(
        "{} members over {}, {k} sending {} messages of {} bytes each",
        args.nodes, args.transport, args.count, args.size
    ));
    let mut kids = vec![Kid::start(args, 0, &name, None)?];
    let contact: SocketAddr =
        kids[0].expect("LISTEN ", until, 0)?.parse().map_err(|_| CliError::failed("member 0 gave a bad address"))?;
    for id in 1..args.nodes {
        kids.push(Kid::start(args, id as u32, &name, Some(contact))?);
    }
    for (i, kid) in kids.iter().enumerate().skip(1) {
        kid.expect("LISTEN ", until, i)?;
    }
    for (i, kid) in kids.iter().enumerate() {
        kid.expect("JOINED", until, i)?;
    }
    let expected = args.count * k as u64;
    let bar = out.progress(expected * args.nodes as u64, "delivered");
    for kid in kids.iter_mut() {
        kid.tell("GO");
    }
    let mut progress = vec![0u64; args.nodes];
    let mut results: Vec<Option<Value>> = vec![None; args.nodes];
    while results.iter().any(Option::is_none) {
        if Instant::now() > until {
            return Err(CliError::failed("the run passed its deadline"));
        }
        for (i, kid) in kids.iter_mut().enumerate() {
            while let Ok(l) = kid.lines.try_recv() {
                if let Some(n) = l.strip_prefix("PROGRESS ").and_then(|n| n.trim().parse().ok()) {
                    progress[i] = n;
                } else if let Some(r) = l.strip_prefix("RESULT ") {
                    results[i] = serde_json::from_str(r).ok();
                }
            }
            if results[i].is_none() && kid.child.try_wait().ok().flatten().is_some() {
                return Err(CliError::failed(format!("member {i} exited before it had delivered everything")));
            }
        }
        bar.set_position(progress.iter().sum());
        std::thread::sleep(Duration::from_millis(50));
    }
    bar.finish_and_clear();
    for kid in kids.iter_mut() {
        kid.tell("EXIT");
    }
    drop(kids);
    spindle::sst::transport::shm::remove_stale_files();
    let results: Vec<Value> = results.into_iter().flatten().collect();
    let agree = results.windows(2).all(|w| w[0]["digest"] == w[1]["digest"]);
    let rates: Vec<f64> = results.iter().filter_map(|r| r["msgs_per_sec"].as_f64()).collect();
    let mean = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
    for r in &results {
        out.emit(
            || {
                format!(
                    "member {}: {} messages in {:.3} s, {:.0} msgs/s, {:.1} MB/s",
                    r["member"],
                    r["delivered"],
                    r["secs"].as_f64().unwrap_or(0.0),
                    r["msgs_per_sec"].as_f64().unwrap_or(0.0),
                    r["msgs_per_sec"].as_f64().unwrap_or(0.0) * args.size as f64 / 1e6
                )
            },
            || r.clone(),
        );
    }
    out.emit(
        || {
            format!(
                "mean {:.0} msgs/s ({:.1} MB/s) per member; {}",
                mean,
                mean * args.size as f64 / 1e6,
                if agree { "every member delivered the same sequence" } else { "THE SEQUENCES DIFFER" }
            )
        },
        || {
            json!({"nodes": args.nodes, "senders": k, "size": args.size, "count": args.count,
                  "transport": args.transport, "mean_msgs_per_sec": mean, "agree": agree})
        },
    );
    if agree {
        Ok(())
    } else {
        Err(CliError::failed("the members delivered different sequences"))
    }
}
