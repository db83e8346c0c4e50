//! `dds_tool`: look at a running domain from outside it, as a client of one of
//! its members (it joins no view and changes nothing).
//!
//! ```text
//! dds_tool --connect 127.0.0.1:7100 ls              # view, members, topics, endpoints, logs
//! dds_tool --connect 127.0.0.1:7100 echo TOPIC      # samples with their SampleInfo
//! dds_tool --connect 127.0.0.1:7100 echo TOPIC --count 10 --seconds 5
//! ```
//!
//! `echo` prints each sample's data where the type is one it knows (strings,
//! numbers, booleans, as a serde topic of that type carries them), else its bytes
//! as hex; disposals and instance changes show `valid_data=false`.

use clap::{Parser, Subcommand};
use spindle_dds::{ClientConfig, DomainClient, Sample};
use spindle_dds::{Endpoint, TopicTable};
use spindle_dds::{History, Qos};
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Parser, Debug)]
#[command(about = "List a domain's topics or print a topic's samples, from outside the domain")]
struct Args {
    /// Control addresses of members to connect to (comma separated; the first
    /// that answers serves).
    #[arg(long, value_delimiter = ',', required = true)]
    connect: Vec<SocketAddr>,
    /// How long to wait for a member.
    #[arg(long, default_value_t = 5)]
    timeout_s: u64,
    /// The group's secret file (see docs/security.md). Left out:
    /// `SPINDLE_SECRET_FILE`, if set.
    #[arg(long)]
    secret_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// The view, its members, and every topic (type, QoS, writers, readers) and
    /// replicated log.
    Ls,
    /// Print the samples of a topic as they come (and its history first, for
    /// Volatile and Logged topics).
    Echo {
        /// The topic.
        topic: String,
        /// Stop after this many samples (default: never).
        #[arg(long)]
        count: Option<u64>,
        /// Stop after this many seconds (default: never).
        #[arg(long)]
        seconds: Option<f64>,
    },
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("dds_tool: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    let mut cfg = ClientConfig::new(args.connect.clone());
    cfg.connect_timeout = Duration::from_secs(args.timeout_s);
    cfg.request_timeout = Duration::from_secs(args.timeout_s);
    cfg.failover_timeout = Duration::from_secs(args.timeout_s);
    cfg.secret_file = args.secret_file.clone();
    let client = DomainClient::connect(cfg).map_err(|e| format!("connecting to {:?}: {e}", args.connect))?;
    match args.cmd {
        Cmd::Ls => ls(&client),
        Cmd::Echo { topic, count, seconds } => echo(&client, &topic, count, seconds.map(Duration::from_secs_f64)),
    }
}

fn endpoints(list: &[Endpoint], members: &[u32]) -> String {
    if list.is_empty() {
        return "none".into();
    }
    let one = |e: &Endpoint| {
        let who = if e.is_proxy() { "clients".to_string() } else { format!("w{}", e.id) };
        let gone = if members.contains(&e.node) { "" } else { " (not a member)" };
        format!("n{}/{who} {}{gone}", e.node, e.level.name())
    };
    list.iter().map(one).collect::<Vec<_>>().join(", ")
}

fn ls(client: &DomainClient) -> Result<(), String> {
    let d = client.domain().map_err(|e| e.to_string())?;
    let members: Vec<u32> = d.members.iter().map(|m| m.0).collect();
    println!("view {}  members {:?}", d.view.0, members);
    print_table(&d.table, &members);
    Ok(())
}

fn print_table(t: &TopicTable, members: &[u32]) {
    println!("{} topics", t.topics.len());
    for e in &t.topics {
        let q = e.qos;
        let history = match q.history {
            History::KeepLast(n) => format!("keep last {n}"),
            History::KeepAll => format!("keep all (at most {})", q.max_samples),
        };
        println!("  {}  type {}  {} {history}", e.name, e.type_name, q.level.name());
        println!("    writers: {}", endpoints(&e.writers, members));
        println!("    readers: {}", endpoints(&e.readers, members));
    }
    println!("{} logs", t.logs.len());
    for l in &t.logs {
        println!("  {}  {:?}", l.name, l.qos);
    }
}

/// The sample's data as text, for the types it knows; hex otherwise.
fn show(type_name: &str, bytes: &[u8]) -> String {
    let base = type_name.split('#').next().unwrap_or(type_name);
    macro_rules! try_as {
        ($($name:literal => $t:ty),*) => {
            match base {
                $($name => if let Ok((v, [])) = postcard::take_from_bytes::<$t>(bytes) { return format!("{v:?}") },)*
                _ => {}
            }
        };
    }
    try_as!("serde:String" => String, "serde:u64" => u64, "serde:u32" => u32, "serde:i64" => i64,
            "serde:i32" => i32, "serde:f64" => f64, "serde:f32" => f32, "serde:bool" => bool, "serde:u8" => u8);
    let shown: String = bytes.iter().take(64).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > 64 {
        format!("{shown}... ({} bytes)", bytes.len())
    } else {
        format!("{shown} ({} bytes)", bytes.len())
    }
}

fn echo(client: &DomainClient, topic: &str, count: Option<u64>, within: Option<Duration>) -> Result<(), String> {
    let t = client.raw_topic(topic).map_err(|e| e.to_string())?;
    let level = t.qos().level;
    let r = client
        .create_reader(&t, Qos { level, ..Qos::default() }.history(History::KeepAll))
        .map_err(|e| e.to_string())?;
    eprintln!("echo {topic}: type {}, {}", t.type_name(), level.name());
    let start = Instant::now();
    let mut n = 0u64;
    loop {
        if count.is_some_and(|c| n >= c) || within.is_some_and(|w| start.elapsed() >= w) {
            return Ok(());
        }
        if let Some(why) = client.ended() {
            return Err(format!("the client ended: {why}"));
        }
        let left = count.map_or(usize::MAX, |c| (c - n) as usize);
        for s in r.take_n(left.min(1024), Duration::from_millis(200)) {
            print_sample(t.type_name(), &s);
            n += 1;
        }
    }
}

fn print_sample(type_name: &str, s: &Sample<Vec<u8>>) {
    let i = &s.info;
    let ts = i.source_timestamp.duration_since(UNIX_EPOCH).unwrap_or_default();
    let age = SystemTime::now().duration_since(i.source_timestamp).map(|d| format!("{:.1} ms", d.as_secs_f64() * 1e3));
    println!(
        "#{} {} seq {} view {} ts {}.{:09} ({} ago) instance {} {:?} valid_data={} {}: {}",
        i.topic_seq,
        i.writer,
        i.seq,
        i.view.0,
        ts.as_secs(),
        ts.subsec_nanos(),
        age.unwrap_or_else(|_| "future".into()),
        i.instance,
        i.instance_state,
        i.valid_data,
        if i.from_history { "history" } else { "live" },
        show(type_name, &s.data),
    );
}
