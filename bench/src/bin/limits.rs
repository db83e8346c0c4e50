//! The raw limits a large-sample run is measured against, on this machine, now:
//! a streaming memory copy and one loopback TCP socket.
//!
//! ```text
//! cargo run --release -p bench --bin limits -- --size 1048576 --seconds 2
//! ```
//!
//! - `memcpy_gb_per_s`: `--size` blocks copied one after the other through 256 MiB
//!   (at least two blocks) from one buffer to another: a stream from memory, not from
//!   the cache, one thread. A sample read in place and copied out once by a reader
//!   costs one such copy; a writer that builds it in place costs another.
//! - `tcp_gb_per_s`: one socket on 127.0.0.1, the writer sending `--size` blocks
//!   with `write_all`, a reader thread reading them into a `--size` buffer: what one
//!   stream between two processes' worth of threads can carry.
//!
//! One JSON line on stdout: `{"bench":"limits","size":..,"memcpy_gb_per_s":..,
//! "tcp_gb_per_s":..}`.

use clap::Parser;
use serde_json::json;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Streaming memcpy and loopback TCP limits for a sample size")]
struct Args {
    /// Block size in bytes (1 KiB to 1 GiB).
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
    /// Seconds for each of the two measurements.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
}

fn memcpy(size: usize, secs: f64) -> f64 {
    let span = (256 << 20).max(2 * size) / size * size;
    let src = vec![0x5au8; span];
    let mut dst = vec![0u8; span];
    let (mut bytes, start) = (0u64, Instant::now());
    let stop = start + Duration::from_secs_f64(secs);
    let mut at = 0;
    while Instant::now() < stop {
        dst[at..at + size].copy_from_slice(&src[at..at + size]);
        std::hint::black_box(&dst[at]);
        bytes += size as u64;
        at = (at + size) % span;
    }
    bytes as f64 / start.elapsed().as_secs_f64() / 1e9
}

fn tcp(size: usize, secs: f64) -> Result<f64, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    let reader = std::thread::spawn(move || -> Result<(u64, f64), String> {
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let mut buf = vec![0u8; size];
        let (mut got, t0) = (0u64, Instant::now());
        while s.read_exact(&mut buf).is_ok() {
            got += size as u64;
        }
        Ok((got, t0.elapsed().as_secs_f64()))
    });
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    let block = vec![7u8; size];
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < stop {
        s.write_all(&block).map_err(|e| format!("write: {e}"))?;
    }
    drop(s);
    let (got, t) = reader.join().map_err(|_| "reader panicked".to_string())??;
    Ok(got as f64 / t / 1e9)
}

fn main() {
    let a = Args::parse();
    if !(1 << 10..=1 << 30).contains(&a.size) || a.seconds <= 0.0 || a.seconds > 600.0 {
        bench::usage("limits", "--size must be 1 KiB..=1 GiB and --seconds in (0, 600]");
    }
    let m = memcpy(a.size, a.seconds);
    let t = match tcp(a.size, a.seconds) {
        Ok(t) => t,
        Err(e) => bench::usage("limits", &format!("loopback tcp: {e}")),
    };
    let r = |x: f64| (x * 1000.0).round() / 1000.0;
    println!("{}", json!({"bench": "limits", "size": a.size, "memcpy_gb_per_s": r(m), "tcp_gb_per_s": r(t)}));
}
