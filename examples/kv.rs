//! kv: a replicated persistent key-value store (`spindle::kv`). The state machine
//! is an embedded LSM store (fjall), its write-ahead log a Tailwind log: every
//! `put` and `del` is a record appended to the log (acknowledged once the primary
//! and every backup hold it) and applied to each member's store from the log's
//! committed tail. Kill the primary and the next member takes over with every
//! acknowledged update; stop a member and start it again and it goes on from where
//! its store stopped.
//!
//! The same command in three terminals, on one host:
//!
//! ```text
//! cargo run --release -p examples --example kv
//! ```
//!
//! The first finds no store of its name on the local network and starts it; the
//! others find it (UDP multicast discovery) and join. Each member keeps its id, its
//! log and its store in a data directory of its own: the first free `slot-N` under
//! `~/.local/share/spindle/kv/<name>` (or `$SPINDLE_DATA_DIR/kv/<name>`), or
//! `--data-dir DIR`. A new member picks a random id and keeps it there; started
//! again with the same command it finds its slot and comes back as itself. Each
//! member also answers clients: `spindle kv get colour --connect ADDR` (ADDR: the
//! address a member prints).
//! `--transport tcp` runs the data plane over tcp (members on several hosts of a
//! LAN); `--contact ADDR`, `--id N`, `--ip A` and `--port P` choose by hand.
//!
//! Then type at any of them: `put colour blue`, `get colour`, `del colour`,
//! `scan col`, `list`, `snapshot`, `trim`, `status`, `quit`. An update typed at a
//! backup is forwarded to the primary. `get` answers from this member's store
//! after it applied everything the log had committed. Kill the primary's terminal
//! (Ctrl-C, or `kill -9` its process): the next member says it is now the primary
//! and how many records it recovered; `get` and `put` go on at the survivors.
//! `snapshot` syncs this member's store and notes it in the log; `trim` (once
//! every member took one) drops the log's segments below the oldest snapshot.
#![forbid(unsafe_code)]

use clap::Parser;
use spindle::kv::member::{Member, MemberConfig};
use spindle::views::config::Transport;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(about = "A replicated key-value store on a Tailwind log")]
struct Args {
    /// This member's id (distinct in the group, below 1024). Left out: the one
    /// kept in the data directory, else a random free one.
    #[arg(long)]
    id: Option<u32>,
    /// The address this member listens on and the others reach it at (left out:
    /// the default route's interface, or 127.0.0.1 where there is none).
    #[arg(long)]
    ip: Option<std::net::Ipv4Addr>,
    /// Control port (the data port is the next one); 0: the OS picks.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Join through this member (left out: discovery finds the store, or this
    /// member starts it).
    #[arg(long)]
    contact: Option<SocketAddr>,
    /// Transport: shm (one host) or tcp.
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Where this member keeps its id, its log segments and its store. Left out:
    /// the first free slot under the data directory.
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
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
    let mut cfg = MemberConfig::new(&args.name);
    cfg.transport = if args.transport == "tcp" { Transport::Tcp } else { Transport::Shm };
    (cfg.ip, cfg.port, cfg.contact, cfg.id) = (args.ip, args.port, args.contact, args.id);
    (cfg.data_dir, cfg.secret_file) = (args.data_dir.clone(), args.secret_file.clone());
    match args.contact {
        Some(c) => println!("joining through {c}..."),
        None => println!("looking for store `{}` on the local network...", args.name),
    }
    let member = Member::start(&cfg, |id, why| println!("id {id} refused ({why}); trying another"))
        .map_err(|e| e.to_string())?;
    let (log, store) = (member.log.clone(), member.store.clone());
    let me = log.node().0;
    log.on_recovered(move |r| {
        println!("member {me} is now the primary: the log holds {} records ({} dropped)", r.next.0, r.dropped);
    });
    let say = |s: &str| {
        println!("{s}");
        let _ = std::io::stdout().flush();
    };
    say(&format!(
        "member {me} up at {}; members {}; store applied up to record {}; type help",
        log.group().listen_addr(),
        names(&log.group().members()),
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
                "member {me}: members {}, primary {}, {} segments on disk, store applied up to record {}, ~{} keys",
                names(&log.group().members()),
                log.primary().map_or("none".into(), |p| p.0.to_string()),
                log.segments().len(),
                store.applied().0,
                store.approximate_len()
            )),
            ["quit"] => {
                say("leaving");
                drop((store, log));
                member.leave(Duration::from_secs(5));
                return Ok(());
            }
            _ => say(
                "commands: put KEY VALUE | get KEY | del KEY | scan PREFIX | list | snapshot | trim | status | quit",
            ),
        }
    }
    Ok(())
}

/// Node ids as `0, 3, 7`.
fn names(members: &[spindle::sst::transport::NodeId]) -> String {
    members.iter().map(|m| m.0.to_string()).collect::<Vec<_>>().join(", ")
}
