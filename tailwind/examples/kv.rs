//! kv: a small replicated key-value store on a Tailwind log. Every `put` and `del`
//! is a record appended to the log (acknowledged once the primary and every backup
//! hold it); each member's table is the log replayed. Kill the primary and the next
//! member takes over with every acknowledged update.
//!
//! Three terminals (`--transport tcp` works the same way):
//!
//! ```text
//! cargo run --release -p tailwind --example kv -- --id 0 --listen 127.0.0.1:7300
//! cargo run --release -p tailwind --example kv -- --id 1 --listen 127.0.0.1:7310 --contact 127.0.0.1:7300
//! cargo run --release -p tailwind --example kv -- --id 2 --listen 127.0.0.1:7320 --contact 127.0.0.1:7300
//! ```
//!
//! Then type at any of them: `put colour blue`, `get colour`, `del colour`, `list`,
//! `status`, `quit`. An update typed at a backup is forwarded to the primary. Kill
//! the primary's terminal (Ctrl-C, or `kill -9` its process): the next member says
//! it is now the primary and how many records it recovered; `get` and `put` go on
//! at the survivors. A `get` at the primary shows acknowledged updates only; at a
//! backup it may also show the very last update while it is being acknowledged.
//! Segment files go to `--dir` (default: a directory per member under the temp
//! directory, emptied at start).
#![forbid(unsafe_code)]

use clap::Parser;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailwind::service::{Lsn, TailwindConfig, TailwindLog};
use views::config::{Config, Transport};

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
    /// Where this member keeps its segment files (emptied at start).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Group name (members of one store use the same).
    #[arg(long, default_value = "kv")]
    name: String,
}

/// A log record: an update.
fn encode(put: bool, key: &str, value: &str) -> Vec<u8> {
    let mut v = vec![if put { b'P' } else { b'D' }];
    v.extend((key.len() as u32).to_le_bytes());
    v.extend(key.as_bytes());
    v.extend(value.as_bytes());
    v
}

/// Applies a record to the table; a record that does not decode is skipped.
fn apply(table: &mut BTreeMap<String, String>, rec: &[u8]) -> bool {
    let Some((&op, rest)) = rec.split_first() else { return false };
    let Some(len) = rest.get(..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize) else {
        return false;
    };
    let Some(key) = rest.get(4..4 + len).and_then(|k| std::str::from_utf8(k).ok()) else { return false };
    let value = String::from_utf8_lossy(&rest[4 + len..]).into_owned();
    match op {
        b'P' => {
            table.insert(key.to_string(), value);
            true
        }
        b'D' => {
            table.remove(key);
            true
        }
        _ => false,
    }
}

/// The table replayed from the log, kept up to date incrementally; replayed from
/// the start again when the primary changes (a failover may drop an update a
/// backup had seen but that was never acknowledged).
struct Replica {
    table: BTreeMap<String, String>,
    next: u64,
    primary: Option<sst::transport::NodeId>,
}

impl Replica {
    fn catch_up(&mut self, log: &TailwindLog) -> Result<(), String> {
        let p = log.primary();
        if p != self.primary {
            self.table.clear();
            self.next = 0;
            self.primary = p;
        }
        for r in log.read_from(Lsn(self.next)) {
            let (lsn, rec) = r.map_err(|e| e.to_string())?;
            apply(&mut self.table, &rec);
            self.next = lsn.0 + 1;
        }
        Ok(())
    }
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
    let _ = std::fs::remove_dir_all(&dir);
    let mut b = Config::builder(args.id, args.listen)
        .name(&args.name)
        .transport(if args.transport == "tcp" { Transport::Tcp } else { Transport::Shm })
        .timeouts(Duration::from_millis(100), Duration::from_millis(1000));
    if let Some(c) = args.contact {
        b = b.contact(c);
    }
    let mut cfg = TailwindConfig::new(&dir);
    cfg.buffer = 1 << 20;
    let log = TailwindLog::start(b.build().map_err(|e| e.to_string())?, cfg).map_err(|e| e.to_string())?;
    let me = args.id;
    log.on_recovered(move |r| {
        println!("member {me} is now the primary: the log holds {} records ({} dropped)", r.next.0, r.dropped);
    });
    let say = |s: &str| {
        println!("{s}");
        let _ = std::io::stdout().flush();
    };
    say(&format!("member {me} up; members {:?}; type help", log.group().members()));
    let replica = Arc::new(Mutex::new(Replica { table: BTreeMap::new(), next: 0, primary: None }));
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let mut r = replica.lock().unwrap_or_else(|p| p.into_inner());
        match words.as_slice() {
            [] => continue,
            ["put", key, value @ ..] if !value.is_empty() => match log.append(&encode(true, key, &value.join(" "))) {
                Ok(lsn) => say(&format!("ok (record {})", lsn.0)),
                Err(e) => say(&format!("error: {e}")),
            },
            ["del", key] => match log.append(&encode(false, key, "")) {
                Ok(lsn) => say(&format!("ok (record {})", lsn.0)),
                Err(e) => say(&format!("error: {e}")),
            },
            ["get", key] => match r.catch_up(&log) {
                Ok(()) => say(&format!("{key} = {}", r.table.get(*key).map_or("(none)", |v| v.as_str()))),
                Err(e) => say(&format!("error: {e}")),
            },
            ["list"] => match r.catch_up(&log) {
                Ok(()) => {
                    for (k, v) in &r.table {
                        say(&format!("{k} = {v}"));
                    }
                    say(&format!("({} keys)", r.table.len()));
                }
                Err(e) => say(&format!("error: {e}")),
            },
            ["status"] => say(&format!(
                "member {me}: members {:?}, primary {:?}, {} segments on disk, {} records replayed",
                log.group().members(),
                log.primary(),
                log.segments().len(),
                r.next
            )),
            ["quit"] => {
                say("leaving");
                log.leave(Duration::from_secs(5));
                return Ok(());
            }
            _ => say("commands: put KEY VALUE | get KEY | del KEY | list | status | quit"),
        }
    }
    Ok(())
}
