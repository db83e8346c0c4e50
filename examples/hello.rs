//! hello: one topic, a writer and a reader. Run it in two terminals on one host; the
//! second finds the first (discovery over loopback) and joins its domain, and each
//! prints what both wrote (`counter` and `sensors` show members on several hosts):
//!
//! ```text
//! terminal 1:  cargo run --release -p examples --example hello
//! terminal 2:  cargo run --release -p examples --example hello
//! ```
//!
//! An argument names another domain (`... --example hello -- mine`).
use spindle::dds::{DdsConfig, DomainParticipant, History, Qos};
use spindle::views::config::{Config, AUTO_ID};
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let name = std::env::args().nth(1).unwrap_or_else(|| "hello".into());
    let cfg = Config::builder(AUTO_ID, "127.0.0.1:0".parse()?).name(&name).build()?;
    let p = DomainParticipant::new(DdsConfig::new(cfg))?;
    println!("{} is in domain `{name}`", p.node());
    let topic = p.topic::<String>("greetings", Qos::volatile(History::KeepLast(100)))?;
    let reader = p.create_reader(&topic, topic.qos())?;
    p.create_writer(&topic, topic.qos())?.write(&format!("hello from {}", p.node()))?;
    for s in reader.take_n(2, Duration::from_secs(60)) {
        println!("{}", s.data);
    }
    Ok(())
}
