//! tailwind_dump: verifies and prints a Tailwind member's segment files.
//!
//! ```text
//! cargo run --release -p bench --bin tailwind_dump -- /tmp/kv-kv-0/log
//! cargo run --release -p bench --bin tailwind_dump -- /tmp/kv-kv-0/log --records --limit 20
//! ```
//!
//! For each segment file (`log<L>-seg<B>.tw`, by log and first record): its
//! records, bytes, whether it verifies (the recovery scan must reach its end:
//! every header, data CRC and checksum entry good), and with `--records` each
//! record's number, length, tag (producer/number of a safe retry) and first
//! bytes. Also each log's trim floor, gaps between segments, and flushes a crash
//! interrupted (`.tw.part`). Exit status 1 if any file does not verify.
#![forbid(unsafe_code)]

use clap::Parser;
use spindle_tailwind::format::scan;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(about = "Verify and print a Tailwind member's segment files")]
struct Args {
    /// The member's segment directory.
    dir: PathBuf,
    /// Only this log's files.
    #[arg(long)]
    log: Option<u64>,
    /// Print every record.
    #[arg(long)]
    records: bool,
    /// At most this many records per segment with --records.
    #[arg(long, default_value_t = 1000)]
    limit: usize,
}

/// `log<L>-seg<B>.tw` -> (L, B).
fn parse(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix("log")?.strip_suffix(".tw")?;
    let (l, b) = rest.split_once("-seg")?;
    Some((l.parse().ok()?, b.parse().ok()?))
}

fn show(bytes: &[u8]) -> String {
    let n = bytes.len().min(32);
    let text = bytes[..n].iter().all(|b| b.is_ascii_graphic() || *b == b' ');
    let body = if text {
        format!("{:?}", String::from_utf8_lossy(&bytes[..n]))
    } else {
        bytes[..n].iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    if bytes.len() > n {
        format!("{body}…")
    } else {
        body
    }
}

fn main() {
    let args = Args::parse();
    let entries = match std::fs::read_dir(&args.dir) {
        Ok(e) => e,
        Err(e) => bench::usage("tailwind_dump", &format!("{}: {e}", args.dir.display())),
    };
    let mut segs: BTreeMap<(u64, u64), PathBuf> = BTreeMap::new();
    let mut other = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        match parse(&name) {
            Some(k) if !args.log.is_some_and(|l| l != k.0) => {
                segs.insert(k, e.path());
            }
            Some(_) => {}
            None => other.push(name),
        }
    }
    let mut bad = 0;
    let mut ends: BTreeMap<u64, u64> = BTreeMap::new();
    for ((log, base), path) in &segs {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                println!("log {log} segment {base}: unreadable: {e}");
                bad += 1;
                continue;
            }
        };
        let r = scan(&bytes);
        let ok = r.end.0 == bytes.len();
        if let Some(end) = ends.get(log).filter(|e| *e != base) {
            println!("log {log}: records {end}..{base} are in no file here");
        }
        ends.insert(*log, base + r.records.len() as u64);
        let tagged = r.records.iter().filter(|x| x.tag.is_some()).count();
        println!(
            "log {log} segment {base}: records {base}..{} ({} records, {tagged} tagged), {} bytes: {}",
            base + r.records.len() as u64,
            r.records.len(),
            bytes.len(),
            if ok { "verifies".to_string() } else { format!("DAMAGED at byte {} ({:?})", r.end.0, r.stop) }
        );
        bad += usize::from(!ok);
        if args.records {
            for (i, rec) in r.records.iter().enumerate().take(args.limit) {
                let tag = rec.tag.map_or(String::new(), |t| format!(" tag {}/{}", t.producer, t.seq));
                println!("  {}: {} bytes{tag} {}", base + i as u64, rec.len, show(r.data(&bytes, i)));
            }
            if r.records.len() > args.limit {
                println!("  … {} more", r.records.len() - args.limit);
            }
        }
    }
    for name in &other {
        if let Some(l) = name.strip_prefix("log").and_then(|r| r.strip_suffix("-trim")) {
            match std::fs::read(args.dir.join(name)) {
                Ok(b) if b.len() == 8 => {
                    println!("log {l}: trimmed before record {}", u64::from_le_bytes(b.try_into().expect("8")))
                }
                _ => println!("log {l}: a damaged trim floor file"),
            }
        } else if name.ends_with(".tw.part") {
            println!("{name}: a flush a crash interrupted (removed at the member's next start)");
        }
    }
    if segs.is_empty() {
        println!("no segment files in {}", args.dir.display());
    }
    if bad > 0 {
        eprintln!("tailwind_dump: {bad} file(s) do not verify");
        std::process::exit(1);
    }
}
