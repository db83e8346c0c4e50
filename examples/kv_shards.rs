//! kv_shards: a sharded replicated key-value store (`spindle::kv::shard`). The
//! key space is split by hash over `--shards` shards, each a Tailwind log with
//! an embedded store at the members that hold a copy of it (`--replicas`), and
//! each shard has its own primary. A put or get typed at any member goes
//! straight to the primary of its key's shard. `migrate` moves a range of
//! hashes to another shard while both keep serving: the new shard takes
//! ownership at once and pulls the range's records in the background.
//!
//! The same command in three terminals, on one host:
//!
//! ```text
//! cargo run --release -p examples --example kv_shards
//! ```
//!
//! As with the `kv` example, the first finds no store of its name and starts
//! it, the others find it (UDP multicast discovery) and join, and each member
//! keeps its id, logs and stores in a data slot of its own (under
//! `~/.local/share/spindle/kv-shards/<name>`, or `$SPINDLE_DATA_DIR`), so that
//! the same command started again comes back as the same member.
//!
//! Then type at any of them: `put colour blue`, `get colour`, `del colour`,
//! `scan col`, `status` (each shard's primary, share of the hashes and keys
//! here, and the migrations under way), `migrate key:colour 1` (the hash of
//! one key) or `migrate 0-3fffffffffffffff 2` (a range of hashes, in hex) to
//! move it to shard 1 or 2, and `quit`. Kill a member (`kill -9`) while it is a
//! shard's primary: another copy of that shard's log takes over with every
//! acknowledged put, also in the middle of a migration.
#![forbid(unsafe_code)]

use clap::Parser;
use spindle::kv::member::{MemberConfig, ShardMember};
use spindle::kv::shard::client::ShardClient;
use spindle::kv::shard::{key_hash, Range};
use spindle::views::config::Transport;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "A sharded replicated key-value store with live migration")]
struct Args {
    /// Shards (every member of a store gives the same).
    #[arg(long, default_value_t = 4)]
    shards: u16,
    /// Copies of each shard's log.
    #[arg(long, default_value_t = 2)]
    replicas: usize,
    /// This member's id (below 1024). Left out: the one kept in the data
    /// directory, else a random free one.
    #[arg(long)]
    id: Option<u32>,
    /// The address this member listens on and is reached at (left out: the
    /// default route's interface, or 127.0.0.1).
    #[arg(long)]
    ip: Option<std::net::Ipv4Addr>,
    /// Join through this member (left out: discovery).
    #[arg(long)]
    contact: Option<SocketAddr>,
    /// Transport: shm (one host) or tcp.
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Where this member keeps its id, logs and stores (left out: a data slot).
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// Group name (members of one store use the same).
    #[arg(long, default_value = "kv-shards")]
    name: String,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("kv_shards: {e}");
        std::process::exit(1);
    }
}

fn say(s: &str) {
    println!("{s}");
    let _ = std::io::stdout().flush();
}

fn run(args: &Args) -> Result<(), String> {
    let mut cfg = MemberConfig::new(&args.name);
    cfg.transport = if args.transport == "tcp" { Transport::Tcp } else { Transport::Shm };
    (cfg.ip, cfg.contact, cfg.id, cfg.data_dir) = (args.ip, args.contact, args.id, args.data_dir.clone());
    cfg.replicas = args.replicas;
    say(&format!("looking for store `{}` ({} shards)...", args.name, args.shards));
    let member =
        ShardMember::start(&cfg, args.shards, |id, why| say(&format!("id {id} refused ({why}); trying another")))
            .map_err(|e| e.to_string())?;
    let me = member.id();
    let addr = member.host.group().listen_addr();
    // The member's own client: it reaches each key's shard primary directly.
    let client = ShardClient::connect(&[addr], None).map_err(|e| e.to_string())?;
    say(&format!("member {me} up at {addr}; type help"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [] => continue,
            ["put", key, value @ ..] if !value.is_empty() => {
                match client.put(key.as_bytes(), value.join(" ").as_bytes()) {
                    Ok(()) => say("ok"),
                    Err(e) => say(&format!("error: {e}")),
                }
            }
            ["del", key] => match client.del(key.as_bytes()) {
                Ok(()) => say("ok"),
                Err(e) => say(&format!("error: {e}")),
            },
            ["get", key] => match client.get(key.as_bytes()) {
                Ok(v) => say(&format!("{key} = {}", v.as_deref().map_or("(none)".into(), text))),
                Err(e) => say(&format!("error: {e}")),
            },
            ["scan", ..] => match client.scan(words.get(1).unwrap_or(&"").as_bytes(), 10_000) {
                Ok(pairs) => {
                    for (k, v) in &pairs {
                        say(&format!("{} = {}", text(k), text(v)));
                    }
                    say(&format!("({} keys)", pairs.len()));
                }
                Err(e) => say(&format!("error: {e}")),
            },
            ["status"] => match client.status_of(&[addr]) {
                Ok(s) => {
                    let ids: Vec<String> = member.host.group().members().iter().map(|m| m.0.to_string()).collect();
                    say(&format!("member {me}: members {}; map version {}", ids.join(", "), s.version));
                    for (i, share) in s.shares.iter().enumerate() {
                        let p = s.primaries.get(i).copied().flatten().map_or("none".into(), |p| p.to_string());
                        let here = match member.host.store(i as u16) {
                            Some(_) => format!("~{} keys here", s.keys.get(i).copied().unwrap_or(0)),
                            None => "no copy here".into(),
                        };
                        say(&format!(
                            "  shard {i}: primary {p}, {:.1}% of the hashes, {here}",
                            f64::from(*share) / 1e4
                        ));
                    }
                    for (id, first, last, from, to) in &s.migrations {
                        say(&format!("  migration {id}: {first:016x}-{last:016x} from shard {from} to {to}"));
                    }
                }
                Err(e) => say(&format!("error: {e}")),
            },
            ["migrate", range, to] => migrate(&client, range, to),
            ["quit"] => {
                say("leaving");
                drop(client);
                member.leave(Duration::from_secs(5));
                return Ok(());
            }
            _ => say("commands: put KEY VALUE | get KEY | del KEY | scan PREFIX | status | migrate RANGE SHARD | quit"),
        }
    }
    Ok(())
}

/// `migrate RANGE SHARD`: asks for the move, then reports the pull until the
/// map lists no migration (at most a minute; the move goes on regardless).
fn migrate(client: &ShardClient, range: &str, to: &str) {
    let range = match range.strip_prefix("key:") {
        Some(key) => Ok(Range::one(key_hash(key.as_bytes()))),
        None => range.parse::<Range>().map_err(|e| e.to_string()),
    };
    let (range, to) = match (range, to.parse::<u16>()) {
        (Ok(r), Ok(t)) => (r, t),
        (Err(e), _) => return say(&format!("error: range: {e} (FIRST-LAST in hex, or key:TEXT)")),
        (_, Err(_)) => return say("error: SHARD is a shard number"),
    };
    let version = match client.migrate(range, to) {
        Ok(v) => v,
        Err(e) => return say(&format!("error: {e}")),
    };
    say(&format!("map version {version}: shard {to} owns {range} now and pulls its records"));
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(60) {
        match client.status() {
            Ok(s) if s.moves_ended(version) => {
                return say(&format!("migration done in {:.1} s", began.elapsed().as_secs_f64()));
            }
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    say("the migration goes on (see status)");
}
