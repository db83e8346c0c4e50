//! kv: a replicated persistent key-value store. The state machine is an embedded
//! LSM store (fjall), its write-ahead log a Tailwind log: every `put` and `del` is
//! a record appended to the log (acknowledged once the primary and every backup
//! hold it) and applied to each member's store from the log's committed tail
//! (`spindle_kv`). Kill the primary and the next member takes over with every
//! acknowledged update; stop a member and start it again on its directory and it
//! goes on from where its store stopped.
//!
//! Three terminals (`--transport tcp` works the same way):
//!
//! ```text
//! cargo run --release -p bench --bin kv -- --id 0 --listen 127.0.0.1:7300
//! cargo run --release -p bench --bin kv -- --id 1 --listen 127.0.0.1:7310 --contact 127.0.0.1:7300
//! cargo run --release -p bench --bin kv -- --id 2 --listen 127.0.0.1:7320 --contact 127.0.0.1:7300
//! ```
//!
//! Then type at any of them: `put colour blue`, `get colour`, `del colour`,
//! `scan col`, `list`, `snapshot`, `trim`, `status`, `quit`. An update typed at a
//! backup is forwarded to the primary. `get` answers from this member's store
//! after it applied everything the log had committed. Kill the primary's terminal
//! (Ctrl-C, or `kill -9` its process): the next member says it is now the primary
//! and how many records it recovered; `get` and `put` go on at the survivors.
//! `snapshot` syncs this member's store and notes it in the log; `trim` (once
//! every member took one) drops the log's segments below the oldest snapshot.
//! Files go to `--dir` (default: a directory per member and group under the temp
//! directory; `--fresh` empties it first).
#![forbid(unsafe_code)]

use spindle_kv::Store;
use clap::Parser;
use spindle_tailwind::service::{TailwindConfig, TailwindLog};
use spindle_views::config::{Config, Transport};
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(about = "A replicated key-value store on a Tailwind log")]
struct Args {
    /// This member's id (distinct in the group).
    #[arg(long)]
    id: u32,
    /// This member's control address (loopback for the demo).
    #[arg(long)]
    listen: SocketAddr,
    /// A running member's address, to join it.
    #[arg(long)]
    contact: Option<SocketAddr>,
    /// Transport: shm (one host) or tcp.
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Where this member keeps its log segments and its store.
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Empty the directory first.
    #[arg(long)]
    fresh: bool,
    /// Group name (members of one store use the same).
    #[arg(long, default_value = "kv")]
    name: String,
    /// The group's secret file (see docs/security.md). Left out:
    /// `SPINDLE_SECRET_FILE`, if set.
    #[arg(long)]
    secret_file: Option<std::path::PathBuf>,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("kv: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    let dir = args.dir.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("kv-{}-{}", args.name, args.id)));
    if args.fresh {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let mut b = Config::builder(args.id, args.listen)
        .name(&args.name)
        .transport(if args.transport == "tcp" { Transport::Tcp } else { Transport::Shm })
        .timeouts(Duration::from_millis(100), Duration::from_millis(1000));
    if let Some(s) = &args.secret_file {
        b = b.secret_file(s);
    }
    if let Some(c) = args.contact {
        b = b.contact(c);
    }
    let mut cfg = TailwindConfig::new(dir.join("log"));
    cfg.buffer = 1 << 20;
    let log = Arc::new(TailwindLog::start(b.build().map_err(|e| e.to_string())?, cfg).map_err(|e| e.to_string())?);
    let me = args.id;
    log.on_recovered(move |r| {
        println!("member {me} is now the primary: the log holds {} records ({} dropped)", r.next.0, r.dropped);
    });
    let store = Store::open(&dir.join("store"), log.clone()).map_err(|e| e.to_string())?;
    let say = |s: &str| {
        println!("{s}");
        let _ = std::io::stdout().flush();
    };
    say(&format!(
        "member {me} up; members {:?}; store applied up to record {}; type help",
        log.group().members(),
        store.applied().0
    ));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [] => continue,
            ["put", key, value @ ..] if !value.is_empty() => {
                match store.put(key.as_bytes(), value.join(" ").as_bytes()) {
                    Ok(lsn) => say(&format!("ok (record {})", lsn.0)),
                    Err(e) => say(&format!("error: {e}")),
                }
            }
            ["del", key] => match store.del(key.as_bytes()) {
                Ok(lsn) => say(&format!("ok (record {})", lsn.0)),
                Err(e) => say(&format!("error: {e}")),
            },
            ["get", key] => match store.sync().and_then(|_| store.get(key.as_bytes())) {
                Ok(v) => say(&format!("{key} = {}", v.as_deref().map_or("(none)".into(), text))),
                Err(e) => say(&format!("error: {e}")),
            },
            ["scan", _] | ["list"] => {
                let prefix = words.get(1).copied().unwrap_or("");
                match store.sync().and_then(|_| store.scan(prefix.as_bytes(), 10_000)) {
                    Ok(pairs) => {
                        for (k, v) in &pairs {
                            say(&format!("{} = {}", text(k), text(v)));
                        }
                        say(&format!("({} keys)", pairs.len()));
                    }
                    Err(e) => say(&format!("error: {e}")),
                }
            }
            ["snapshot"] => match store.snapshot() {
                Ok(at) => say(&format!("ok: this store holds records before {} on disk", at.0)),
                Err(e) => say(&format!("error: {e}")),
            },
            ["trim"] => match store.trim_log() {
                Ok(Some(at)) => say(&format!("ok: the log starts at record {} now", at.0)),
                Ok(None) => say("not yet: every member of the log takes a snapshot first"),
                Err(e) => say(&format!("error: {e}")),
            },
            ["status"] => say(&format!(
                "member {me}: members {:?}, primary {:?}, {} segments on disk, store applied up to record {}, ~{} keys",
                log.group().members(),
                log.primary(),
                log.segments().len(),
                store.applied().0,
                store.approximate_len()
            )),
            ["quit"] => {
                say("leaving");
                drop(store);
                log.leave(Duration::from_secs(5));
                return Ok(());
            }
            _ => say(
                "commands: put KEY VALUE | get KEY | del KEY | scan PREFIX | list | snapshot | trim | status | quit",
            ),
        }
    }
    Ok(())
}
