//! tokio_stream: a reader's samples as a `futures::Stream` and writes that wait for
//! room without blocking a thread, on tokio. One participant alone in its domain;
//! a writer task and a reader task share a tokio runtime.
//!
//! ```text
//! cargo run --release -p examples --example tokio_stream -- --samples 100000
//! ```
#![forbid(unsafe_code)]

use clap::Parser;
use futures::StreamExt;
use spindle::dds::DdsConfig;
use spindle::dds::DomainParticipant;
use spindle::dds::{History, Qos};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "A DDS reader stream and async writes on tokio")]
struct Args {
    /// Samples to write and read.
    #[arg(long, default_value_t = 100_000)]
    samples: u64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    if let Err(e) = run(args.samples).await {
        eprintln!("tokio_stream: {e}");
        std::process::exit(1);
    }
}

async fn run(n: u64) -> Result<(), String> {
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let group = spindle::views::config::Config::builder(1, listen)
        .name(&format!("tokio{}", std::process::id()))
        .build()
        .map_err(|e| e.to_string())?;
    // Creating the participant, topic and endpoints blocks (view changes): off the
    // runtime's workers.
    let (reader, writer) = tokio::task::spawn_blocking(move || -> Result<_, String> {
        let p = DomainParticipant::new(DdsConfig::new(group)).map_err(|e| e.to_string())?;
        let topic = p.topic::<u64>("ticks", Qos::ordered()).map_err(|e| e.to_string())?;
        let r = p.create_reader(&topic, Qos::ordered().history(History::KeepAll)).map_err(|e| e.to_string())?;
        let w = p.create_writer(&topic, topic.qos()).map_err(|e| e.to_string())?;
        Ok((r, w))
    })
    .await
    .map_err(|e| e.to_string())??;
    let start = Instant::now();
    let writing = tokio::spawn(async move {
        for i in 0..n {
            writer.write_async(&i).await.map_err(|e| e.to_string())?;
        }
        Ok::<_, String>(writer)
    });
    let mut got = 0u64;
    let mut stream = reader.stream();
    while got < n {
        match tokio::time::timeout(Duration::from_secs(30), stream.next()).await {
            Ok(Some(s)) if s.data == got => got += 1,
            Ok(Some(s)) => return Err(format!("sample {} where {got} was due", s.data)),
            Ok(None) => return Err("the stream ended".into()),
            Err(_) => return Err(format!("no sample for 30 s after {got}")),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let writer = writing.await.map_err(|e| e.to_string())??;
    println!("{got} samples in order through the stream in {secs:.2} s ({:.0}/s)", got as f64 / secs);
    drop(stream);
    tokio::task::spawn_blocking(move || drop((writer, reader))).await.map_err(|e| e.to_string())?;
    Ok(())
}
