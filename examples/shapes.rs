//! shapes: the classic keyed DDS demo in three terminals. Each publisher moves
//! shapes of its colours around a 200x200 box; the subscriber shows one line per
//! instance (colour): its last position, its state and how many samples came.
//!
//! ```text
//! terminal 1:  cargo run --release -p examples --example shapes -- pub red,green --port 7400
//! terminal 2:  cargo run --release -p examples --example shapes -- pub blue --contact 127.0.0.1:7400
//! terminal 3:  cargo run --release -p examples --example shapes -- sub --contact 127.0.0.1:7400
//! ```
//!
//! The topic `Square` is keyed by colour and Volatile with the last 5 samples of
//! each instance kept: a subscriber that starts late first gets the last 5 of
//! every colour (marked `history`), and its own KeepLast(5) keeps the last 5 of
//! history and live samples together, so a live sample that arrives before it
//! took the history replaces the oldest (counted `replaced`). A publisher that
//! ends (Enter, or `--seconds`; Ctrl-C just leaves) disposes its shapes first:
//! the subscriber shows them `Disposed`. A subscriber that ends (Enter, or
//! `--seconds`) prints what it counted of each colour. Kill one with `kill -9` instead and its shapes go to
//! `NoWriters` once the domain removes it. `--filter 'x < 100'` subscribes only to
//! the left half (a content filter over the type's fields).
#![forbid(unsafe_code)]

use clap::Parser;
use serde::{Deserialize, Serialize};
use spindle::dds::DdsConfig;
use spindle::dds::InstanceState;
use spindle::dds::{DomainParticipant, Keyed};
use spindle::dds::{History, Qos};
use spindle::views::config::{Config, Transport};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "The shapes demo: keyed instances by colour, per-instance history, dispose")]
struct Args {
    /// `pub` or `sub`.
    #[arg(value_parser = ["pub", "sub"])]
    role: String,
    /// Colours to publish (`pub`), comma separated.
    #[arg(value_delimiter = ',')]
    colours: Vec<String>,
    /// Control port on 127.0.0.1 (the OS picks if left out).
    #[arg(long)]
    port: Option<u16>,
    /// Join the domain through this participant (leave out to start it).
    #[arg(long)]
    contact: Option<SocketAddr>,
    /// Stop after this many seconds, or at Enter (a publisher disposes its shapes
    /// first).
    #[arg(long, default_value_t = 60.0)]
    seconds: f64,
    /// Milliseconds between moves (publisher).
    #[arg(long, default_value_t = 100)]
    period_ms: u64,
    /// Subscriber: a content filter over the shape's fields (`x < 100`).
    #[arg(long)]
    filter: Option<String>,
    /// Data-plane transport.
    #[arg(long, default_value = "shm", value_parser = ["shm", "tcp"])]
    transport: String,
    /// Domain name.
    #[arg(long, default_value = "shapes")]
    domain: String,
    /// The group's secret file (see docs/security.md). Left out:
    /// `SPINDLE_SECRET_FILE`, if set.
    #[arg(long)]
    secret_file: Option<std::path::PathBuf>,
}

/// A shape of one colour (the key) at a position.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Shape {
    colour: String,
    x: i32,
    y: i32,
    size: i32,
}

impl Keyed for Shape {
    type Key = String;
    fn key(&self) -> String {
        self.colour.clone()
    }
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("shapes: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    let mut b =
        Config::builder(spindle::views::config::AUTO_ID, SocketAddr::from(([127, 0, 0, 1], args.port.unwrap_or(0))))
            .name(&args.domain)
            .transport(if args.transport == "tcp" { Transport::Tcp } else { Transport::Shm })
            .timeouts(Duration::from_millis(100), Duration::from_millis(1000));
    if let Some(c) = args.contact {
        b = b.contact(c);
    }
    if let Some(s) = &args.secret_file {
        b = b.secret_file(s);
    }
    let p = DomainParticipant::new(DdsConfig::new(b.build().map_err(|e| e.to_string())?)).map_err(|e| e.to_string())?;
    println!("participant {} at {}", p.node(), p.group().listen_addr());
    let qos = Qos::volatile(History::KeepLast(5));
    let topic = p.keyed_topic::<Shape>("Square", qos).map_err(|e| e.to_string())?;
    let stop = Stop::new(Instant::now() + Duration::from_secs_f64(args.seconds));
    if args.role == "pub" {
        publish(&p, &topic, args, &stop)
    } else {
        subscribe(&p, &topic, args, &stop)
    }
}

/// When to stop: at a deadline, or when a line comes on standard input (Enter in
/// a terminal; the end of input alone does not stop, so `</dev/null` runs on).
struct Stop {
    until: Instant,
    lines: std::sync::mpsc::Receiver<()>,
}

impl Stop {
    fn new(until: Instant) -> Stop {
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                if tx.send(()).is_err() {
                    return;
                }
                line.clear();
            }
        });
        Stop { until, lines }
    }

    fn now(&self) -> bool {
        Instant::now() >= self.until || self.lines.try_recv().is_ok()
    }
}

fn publish(p: &DomainParticipant, topic: &spindle::dds::Topic<Shape>, args: &Args, stop: &Stop) -> Result<(), String> {
    if args.colours.is_empty() {
        return Err("name the colours to publish: `pub red,green`".into());
    }
    let w = p.create_writer(topic, topic.qos()).map_err(|e| e.to_string())?;
    let mut shapes: Vec<(Shape, i32, i32)> = args
        .colours
        .iter()
        .enumerate()
        .map(|(i, c)| (Shape { colour: c.clone(), x: 20 + 40 * i as i32, y: 30 * i as i32, size: 30 }, 7, 5))
        .collect();
    let mut n = 0u64;
    while !stop.now() {
        for (s, dx, dy) in shapes.iter_mut() {
            (s.x, *dx) = bounce(s.x, *dx);
            (s.y, *dy) = bounce(s.y, *dy);
            w.write(s).map_err(|e| e.to_string())?;
            n += 1;
        }
        if n % (10 * shapes.len() as u64) == 0 {
            println!(
                "wrote {n} samples; {}",
                shapes
                    .iter()
                    .map(|(s, _, _)| format!("{} at ({}, {})", s.colour, s.x, s.y))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        std::thread::sleep(Duration::from_millis(args.period_ms));
    }
    for (s, _, _) in &shapes {
        w.dispose(s).map_err(|e| e.to_string())?;
        println!("disposed {}", s.colour);
    }
    w.wait_for_delivery(Duration::from_secs(5));
    Ok(())
}

/// One step in a 200-wide box, turning at the walls.
fn bounce(at: i32, d: i32) -> (i32, i32) {
    let next = at + d;
    if !(0..=200).contains(&next) {
        (at - d, -d)
    } else {
        (next, d)
    }
}

/// What the subscriber shows of an instance.
#[derive(Default)]
struct Row {
    x: i32,
    y: i32,
    samples: u64,
    history: u64,
    state: Option<InstanceState>,
}

fn subscribe(
    p: &DomainParticipant,
    topic: &spindle::dds::Topic<Shape>,
    args: &Args,
    stop: &Stop,
) -> Result<(), String> {
    let qos = Qos::volatile(History::KeepLast(5));
    let r = match &args.filter {
        Some(f) => p.create_reader_where(topic, qos, f),
        None => p.create_reader(topic, qos),
    }
    .map_err(|e| e.to_string())?;
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    let mut shown = Instant::now();
    while !stop.now() {
        for s in r.take_n(256, Duration::from_millis(100)) {
            let row = rows.entry(s.data.colour.clone()).or_default();
            if s.info.valid_data {
                (row.x, row.y) = (s.data.x, s.data.y);
                row.samples += 1;
                row.history += u64::from(s.info.from_history);
            } else {
                println!("{} {:?}", s.data.colour, s.info.instance_state);
            }
            row.state = Some(s.info.instance_state);
        }
        if shown.elapsed() >= Duration::from_secs(1) {
            shown = Instant::now();
            for (colour, row) in &rows {
                println!(
                    "{colour:>8} at ({:>3}, {:>3})  {:?}  {} samples ({} from history)",
                    row.x,
                    row.y,
                    row.state.unwrap_or_default(),
                    row.samples,
                    row.history
                );
            }
            println!("--");
        }
    }
    // What the reader counted: history samples received, and of those how many a
    // live sample replaced before they were taken (KeepLast(5) across the seam).
    for (colour, row) in &rows {
        let h = r.lookup_instance(colour).map_err(|e| e.to_string())?;
        let c = h.map(|h| r.instance_counts(h)).transpose().map_err(|e| e.to_string())?.unwrap_or_default();
        println!(
            "counted {colour}: {} from history ({} taken, {} replaced), {} lost in all",
            c.from_history, row.history, c.history_lost, c.lost
        );
    }
    Ok(())
}
