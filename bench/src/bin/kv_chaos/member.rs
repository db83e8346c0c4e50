//! A member process of a `kv_chaos` run: a sharded store's member over the
//! run's group, answering the parent's lines on its standard input until it
//! closes (or the parent kills it).

use super::Args;
use bench::mcast::Digest;
use bench::out;
use spindle_kv::shard::host::{HostConfig, ShardHost};
use spindle_views::config::{Config, Transport};
use std::io::BufRead;
use std::net::SocketAddr;
use std::time::Duration;

/// Copies of each shard's log: with three members, a kill leaves a copy of
/// every log, and the killed member holds a copy of at least one.
pub(crate) const REPLICAS: usize = 2;

pub(crate) fn run(args: &Args, id: u32) -> Result<(), String> {
    let (Some(name), Some(dir), Some(port)) = (&args.name, &args.dir, args.port) else {
        return Err("a member needs --name, --dir and --port".into());
    };
    let transport = if args.transport == "tcp" { Transport::Tcp } else { Transport::Shm };
    let failure = Duration::from_millis(args.failure_ms);
    let mut b = Config::builder(id, SocketAddr::from(([127, 0, 0, 1], port)))
        .name(name)
        .transport(transport)
        .timeouts((failure / 10).max(Duration::from_millis(10)), failure);
    if let Some(c) = args.contact {
        b = b.contact(c);
    }
    let cfg = HostConfig {
        replicas: REPLICAS,
        buffer: 256 * 1024,
        pull_batch: args.pull_batch,
        ..HostConfig::new(dir, args.shards)
    };
    let began = std::time::Instant::now();
    let host = ShardHost::start(b.build().map_err(|e| e.to_string())?, cfg).map_err(|e| e.to_string())?;
    let started = began.elapsed();
    // The stores it holds caught up with what their logs committed.
    for s in 0..args.shards {
        if let Some(store) = host.store(s) {
            store.sync().map_err(|e| e.to_string())?;
        }
    }
    let synced = began.elapsed();
    out(&format!(
        "UP {} {:.1} {:.1}",
        host.group().listen_addr(),
        started.as_secs_f64() * 1e3,
        synced.as_secs_f64() * 1e3
    ));
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "MEMBERS" => {
                let ids: Vec<String> = host.group().members().iter().map(|n| n.0.to_string()).collect();
                out(&format!("MEMBERS {}", ids.join(",")));
            }
            "DIGEST" => match digest(&host, args.shards) {
                Ok(d) => out(&format!("DIGEST {d}")),
                Err(e) => out(&format!("DIGEST none: {e}")),
            },
            _ => {}
        }
    }
    host.leave(Duration::from_secs(5));
    Ok(())
}

/// Each shard's store at this member, once it applied what its log committed:
/// `keys:hash` per shard, the hash over every pair in key order (`-` for a shard
/// whose store it does not hold).
fn digest(host: &ShardHost, shards: u16) -> Result<String, String> {
    let mut parts = Vec::new();
    for s in 0..shards {
        let Some(store) = host.store(s) else {
            parts.push("-".to_string());
            continue;
        };
        store.sync().map_err(|e| e.to_string())?;
        let pairs = store.scan(b"", usize::MAX).map_err(|e| e.to_string())?;
        let mut d = Digest::default();
        for (k, v) in &pairs {
            for part in [&k[..], &v[..]] {
                d.add(part.len() as u64);
                d.add_bytes(part);
            }
        }
        parts.push(format!("{}:{:016x}", pairs.len(), d.0));
    }
    Ok(parts.join(" "))
}
