//! `counter`: a replicated counter (and chat) to try in three terminals.
//!
//! ```text
//! terminals 1, 2 and 3:  cargo run --release -p examples --example counter
//! ```
//!
//! The same command three times, on one host or on several hosts of a LAN: the
//! first finds no group of its name on the local network (UDP multicast discovery,
//! half a second) and starts it as n0; the others find it and join, with ids the
//! group gives and ports the OS picks. Each member listens on, and tells the others,
//! the address of the interface its default route leaves by (127.0.0.1 on a host
//! with no route). `--ip A`, `--id N`, `--port P` and `--contact ADDR` choose by
//! hand instead (a contact skips discovery).
//!
//! Stall a member (Ctrl-Z, then `fg` after a few seconds): the others remove it,
//! and when it runs again it joins again by itself and gets the counter.
//!
//! Each member keeps who it is (its id and last view) in a state directory: the
//! first free `slot-N` under `~/.local/share/spindle/counter/<name>` (or
//! `$SPINDLE_DATA_DIR/counter/<name>`), or `--state-dir DIR`. `kill -9` one of two
//! and the survivor says at once that it lost its majority and waits; start the
//! killed one again with the same command (it finds its slot free) and the two are
//! one group again, with the counter. A new member does not start a second group
//! beside a stranded one.
//!
//! Type a number to add it to the counter everywhere, any other line to say it to
//! everyone, `leave` to leave gracefully. Press Ctrl-C in one terminal (or `kill -9`
//! it) and watch the others install a view without it. A member that joins later
//! receives the counter as state before it takes part.
//!
//! `RUST_LOG=spindle_views=info` prints the library's own account on stderr (view
//! changes, a member removed and taken back, a view restored).

use clap::Parser;
use spindle::views::config::{Config, Transport};
use spindle::views::group::{restart, GroupBuilder};
use std::io::BufRead;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(about = "A replicated counter over a spindle group")]
struct Args {
    /// This member's id (unique in the group, below 1024); left out, the group
    /// gives one.
    #[arg(long)]
    id: Option<u32>,
    /// The address this member listens on and the others reach it at (left out:
    /// the default route's interface, or 127.0.0.1 where there is none).
    #[arg(long)]
    ip: Option<std::net::Ipv4Addr>,
    /// Control port (the data port is the next one); 0: the OS picks.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Join through this member (left out: discovery finds the group, or this
    /// member starts it).
    #[arg(long)]
    contact: Option<SocketAddr>,
    /// Data-plane transport.
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// A directory of this member's own where it keeps its id and last view, so
    /// that started again it comes back as itself (and can restore a group that
    /// lost its majority). Left out: the first free slot under the data directory.
    #[arg(long)]
    state_dir: Option<std::path::PathBuf>,
    /// Group name (members of one group use the same).
    #[arg(long, default_value = "counter")]
    name: String,
    /// The group's secret file (at least 32 random bytes, the same at every
    /// member; see docs/security.md). Left out: `SPINDLE_SECRET_FILE`, if set.
    #[arg(long)]
    secret_file: Option<std::path::PathBuf>,
}

fn main() {
    let args = Args::parse();
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    if let Err(e) = run(&args) {
        eprintln!("counter: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    let id = args.id.unwrap_or(spindle::views::config::AUTO_ID);
    let ip = args.ip.or_else(spindle::views::config::reachable_ipv4).unwrap_or(std::net::Ipv4Addr::LOCALHOST);
    let mut b = Config::builder(id, SocketAddr::from((ip, args.port)))
        .name(&args.name)
        .transport(if args.transport == "tcp" { Transport::Tcp } else { Transport::Shm })
        .max_msg(1024)
        .timeouts(Duration::from_millis(100), Duration::from_millis(1000));
    if let Some(c) = args.contact {
        b = b.contact(c);
    }
    if let Some(s) = &args.secret_file {
        b = b.secret_file(s);
    }
    let slot = match &args.state_dir {
        Some(d) => d.clone(),
        None => restart::claim_slot(&restart::default_state_base("counter", &args.name)).map_err(|e| e.to_string())?,
    };
    b = b.state_dir(&slot);
    let cfg = b.build().map_err(|e| e.to_string())?;
    let counter = Arc::new(Mutex::new(0i64));
    let (c1, c2, c3) = (counter.clone(), counter.clone(), counter.clone());
    match args.contact {
        Some(c) => println!("joining through {c}..."),
        None => println!("looking for group `{}` on the local network...", args.name),
    }
    let group = GroupBuilder::new(cfg)
        .on_deliver(0, move |d| {
            let text = String::from_utf8_lossy(d.data);
            let mut c = c1.lock().unwrap_or_else(|p| p.into_inner());
            match text.strip_prefix('+').and_then(|n| n.parse::<i64>().ok()) {
                Some(n) => {
                    *c += n;
                    println!("[view {}] {} added {n}: counter = {}", d.view.0, d.sender, *c);
                }
                None => println!("[view {}] {}: {text}", d.view.0, d.sender),
            }
        })
        .on_view(move |v| {
            let members: Vec<String> = v.members().iter().map(|n| n.to_string()).collect();
            println!("== view {}: members {} ==", v.id().0, members.join(", "));
        })
        .on_removed(|r| println!("out of the group: {r}"))
        .on_rejoin(|why| println!("removed ({why}); taken back into the group"))
        .state(
            0,
            move || c2.lock().unwrap_or_else(|p| p.into_inner()).to_le_bytes().to_vec(),
            move |b| {
                if let Ok(b) = <[u8; 8]>::try_from(b) {
                    *c3.lock().unwrap_or_else(|p| p.into_inner()) = i64::from_le_bytes(b);
                    println!("received state: counter = {}", i64::from_le_bytes(b));
                }
            },
        )
        .start()
        .map_err(|e| e.to_string())?;
    let me = group.node().0;
    println!("n{me} at {}: running; type a number, a message, or `leave`", group.listen_addr());
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "leave" {
            let ok = group.leave(Duration::from_secs(30));
            println!("n{me}: {}", if ok { "left the group" } else { "could not leave in time" });
            restart::release_slot(&slot);
            return Ok(());
        }
        let msg = match line.parse::<i64>() {
            Ok(n) => format!("+{n}"),
            Err(_) => line.to_string(),
        };
        if let Err(e) = group.send(0, msg.as_bytes()) {
            println!("n{me}: not sent: {e}");
            if e.is_fatal() {
                return Err(e.to_string());
            }
        }
    }
    restart::release_slot(&slot);
    Ok(())
}
