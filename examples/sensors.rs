//! sensors: a three-terminal DDS demo. A publisher writes temperature readings;
//! subscribers print them; one that starts late first receives the history.
//!
//! ```text
//! terminal 1:  cargo run --release -p examples --example sensors -- publish
//! terminal 2:  cargo run --release -p examples --example sensors -- subscribe
//! (wait a few seconds)
//! terminal 3:  cargo run --release -p examples --example sensors -- subscribe
//! ```
//!
//! Nothing to choose, on one host or across the hosts of a LAN: participants find
//! the domain on the local network (UDP multicast discovery of its name), the
//! domain gives the ids, the OS the ports, and each listens on the address of the
//! interface its default route leaves by (127.0.0.1 on a host with no route); each
//! prints its control address. `--ip`, `--id`, `--port` and `--contact` choose by hand.
//! Stall a subscriber (Ctrl-Z, `fg` a few seconds later): the domain removes it, it
//! rejoins by itself and prints the readings it missed from the history, no gap.
//!
//! The topic `temperature` is Volatile with the last 20 readings kept: terminal 3 prints
//! the 20 readings before it joined (marked `history`), then the live ones, with no gap
//! and no duplicate (`#` is the reading's place in the topic's order, the same at
//! every subscriber). With `--qos logged` every participant also keeps a log file
//! (in `--log-dir`, one per node id): stop a subscriber with Ctrl-C and start it
//! again with the same `--id`, and it prints what its log held before it catches up. Stop the publisher and
//! the subscribers see it leave the domain; start it again and it goes on.
//!
//! Clients take part without joining (see `spindle::dds::client`): with `--client` and
//! `--contact A,B` (members' control addresses; `--contacts` says the same) a publisher or subscriber connects
//! through a member, causes no view change, and moves to the next contact if its
//! member dies (kill it with Ctrl-C: the client prints where it moved, and a
//! subscriber goes on with no gap in `#`; ADDR1-3: the addresses terminals 1-3 printed):
//!
//! ```text
//! terminal 4:  cargo run --release -p examples --example sensors -- subscribe --client --contact ADDR2,ADDR3
//! terminal 5:  cargo run --release -p examples --example sensors -- publish --client --contact ADDR3,ADDR1
//! ```
#![forbid(unsafe_code)]

use clap::Parser;
use serde::{Deserialize, Serialize};
use spindle::dds::DdsConfig;
use spindle::dds::{ClientConfig, DataReader, DomainClient, DomainParticipant};
use spindle::dds::{History, Level, Qos};
use spindle::views::config::{Config, Transport};
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Parser, Debug)]
#[command(about = "A DDS sensor demo: a publisher and subscribers, one of them late")]
struct Args {
    /// `publish` or `subscribe`.
    #[arg(value_parser = ["publish", "subscribe"])]
    role: String,
    /// This participant's id (unique in the domain, below 1024); members only,
    /// and left out the domain gives one.
    #[arg(long)]
    id: Option<u32>,
    /// The address this member listens on and the others reach it at (left out:
    /// the default route's interface, or 127.0.0.1 where there is none).
    #[arg(long)]
    ip: Option<std::net::Ipv4Addr>,
    /// Control port (the data port is the next one); members only. Left out: the
    /// OS picks.
    #[arg(long)]
    port: Option<u16>,
    /// Take part as a client of the members in `--contact`, outside the group.
    #[arg(long)]
    client: bool,
    /// A member: join the domain through this participant (leave out to start
    /// it). A client: members' control addresses, tried in order (`A,B,...`).
    #[arg(long, alias = "contacts", value_delimiter = ',')]
    contact: Vec<SocketAddr>,
    /// QoS level of the topic: volatile or logged (or ordered: no history).
    #[arg(long, default_value = "volatile")]
    qos: Level,
    /// Data-plane transport.
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Domain name.
    #[arg(long, default_value = "sensors")]
    domain: String,
    /// Where Logged topics keep their files.
    #[arg(long)]
    log_dir: Option<std::path::PathBuf>,
    /// Milliseconds between readings (publisher).
    #[arg(long, default_value_t = 200)]
    period_ms: u64,
    /// The group's secret file (at least 32 random bytes, the same at every
    /// member and client; see docs/security.md). Left out: `SPINDLE_SECRET_FILE`,
    /// if set.
    #[arg(long)]
    secret_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Reading {
    sensor: String,
    celsius: f32,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("sensors: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    let qos = Qos { level: args.qos, history: History::KeepLast(20), ..Qos::default() };
    if args.client {
        return client(args, qos);
    }
    let port = args.port.unwrap_or(0);
    let id = args.id.unwrap_or(spindle::views::config::AUTO_ID);
    let ip = args.ip.or_else(spindle::views::config::reachable_ipv4).unwrap_or(std::net::Ipv4Addr::LOCALHOST);
    let mut b = Config::builder(id, SocketAddr::from((ip, port)))
        .name(&args.domain)
        .transport(if args.transport == "tcp" { Transport::Tcp } else { Transport::Shm })
        .timeouts(Duration::from_millis(100), Duration::from_millis(1000));
    if let Some(c) = args.contact.first() {
        b = b.contact(*c);
    }
    if let Some(s) = &args.secret_file {
        b = b.secret_file(s);
    }
    let mut cfg = DdsConfig::new(b.build().map_err(|e| e.to_string())?);
    if let Some(d) = &args.log_dir {
        cfg.log_dir = d.clone();
    }
    println!("joining domain `{}` ...", args.domain);
    let p = DomainParticipant::new(cfg).map_err(|e| e.to_string())?;
    println!("participant {} at {}", p.node(), p.group().listen_addr());
    let topic = p.topic::<Reading>("temperature", qos).map_err(|e| e.to_string())?;
    // Clients of this member cost no view change from now on.
    p.serve_clients(&topic, true).map_err(|e| e.to_string())?;
    println!("topic `temperature` ({:?}); members {:?}", topic.qos().level, p.group().members());
    if args.role == "publish" {
        let w = p.create_writer(&topic, topic.qos()).map_err(|e| e.to_string())?;
        publish(args, |r| w.write(r).map_err(|e| e.to_string()))
    } else {
        let r = p.create_reader(&topic, topic.qos()).map_err(|e| e.to_string())?;
        let mut view = p.group().view().map(|v| v.id());
        subscribe(&r, || {
            if let Err(why) = r.catch_up_failed() {
                println!("(the history did not arrive: {why})");
            }
            let now = p.group().view();
            if now.as_ref().map(|v| v.id()) != view {
                view = now.as_ref().map(|v| v.id());
                println!("view {:?}: members {:?}", view.map(|v| v.0), p.group().members());
            }
            p.group().stopped().map_or(Ok(()), Err)
        })
    }
}

/// A publisher or subscriber outside the group.
fn client(args: &Args, qos: Qos) -> Result<(), String> {
    if args.contact.is_empty() {
        return Err("a client needs --contact A,B,... (members' control addresses)".into());
    }
    let cfg = ClientConfig { secret_file: args.secret_file.clone(), ..ClientConfig::new(args.contact.clone()) };
    let c = DomainClient::connect(cfg).map_err(|e| e.to_string())?;
    let (node, addr) = c.member();
    println!("client {:#x} of member {node} at {addr}", c.id());
    let topic = c.topic::<Reading>("temperature", qos).map_err(|e| e.to_string())?;
    let mut at = node;
    let mut moved = move |c: &DomainClient| {
        let (now, addr) = c.member();
        if now != at {
            at = now;
            println!("(moved to member {now} at {addr})");
        }
        c.ended().map_or(Ok(()), |why| Err(format!("the client ended: {why}")))
    };
    if args.role == "publish" {
        let w = c.create_writer(&topic, topic.qos()).map_err(|e| e.to_string())?;
        publish(args, |r| {
            moved(&c)?;
            w.write(r).map_err(|e| e.to_string())
        })
    } else {
        let r = c.create_reader(&topic, topic.qos()).map_err(|e| e.to_string())?;
        let mut lost = 0;
        subscribe(&r, || {
            let now = r.status().lost;
            if now > lost {
                println!("({} samples lost: the member no longer held them)", now - lost);
                lost = now;
            }
            moved(&c)
        })
    }
}

/// Writes a reading every `--period-ms` until `write` fails.
fn publish(args: &Args, mut write: impl FnMut(&Reading) -> Result<u64, String>) -> Result<(), String> {
    let sensors = ["hall", "lab", "roof"];
    for i in 0u64.. {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        let r = Reading { sensor: sensors[(i % 3) as usize].into(), celsius: (20.0 + 5.0 * (t / 10.0).sin()) as f32 };
        let seq = write(&r)?;
        println!("wrote #{seq}: {} {:.2} °C", r.sensor, r.celsius);
        std::thread::sleep(Duration::from_millis(args.period_ms));
    }
    Ok(())
}

/// Prints what `r` takes, and calls `tick` every second or so until it fails.
fn subscribe(r: &DataReader<Reading>, mut tick: impl FnMut() -> Result<(), String>) -> Result<(), String> {
    loop {
        if r.wait(Duration::from_secs(1)) {
            for s in r.take() {
                let how = if s.info.from_history { "history" } else { "live   " };
                println!(
                    "{how} #{:<5} from {} (its #{}): {} {:.2} °C",
                    s.info.topic_seq, s.info.writer, s.info.seq, s.data.sensor, s.data.celsius
                );
            }
        }
        tick()?;
    }
}
