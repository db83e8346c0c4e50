//! plots: charts and tables from `scripts/compare-peers.sh`'s JSON lines (and, with
//! `--one-host` or `--large`, from `scripts/one-host.sh` or `scripts/large-vs-peers.sh`;
//! with `--kv-migration`, from `kv_shards`'s migration rows; with `--kv`, from
//! `kv_bench`'s rows, one run per round).
//!
//! ```text
//! cargo run --release -p bench --bin plots -- bench/results/peers.jsonl docs/charts [--machine TEXT]
//! ```
//!
//! Takes the median over rounds of every figure, prints Markdown tables (medians, each
//! round's values, and our ratio to the peer), and writes SVG bar charts into the
//! folder: `tcp.svg` and `shm.svg` (throughput against message size, every system on
//! one chart), `group.svg` (throughput against group size, one sender and all
//! senders) and `latency.svg` (round-trip percentiles). The SVG is written here, by
//! hand: bars, axes, ticks and a legend need no plotting crate.
#![forbid(unsafe_code)]

use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

mod kv;
use kv::{kv_migration, kv_ratio};

/// One bar series: its name and, per category, the median with the smallest and
/// largest round (`None`: not measured).
type Series = (String, Vec<Option<Spread>>);

/// A figure over rounds: median, min, max.
#[derive(Clone, Copy)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

/// The values of one figure, one per round.
#[derive(Default)]
struct Figures(BTreeMap<String, Vec<f64>>);

impl Figures {
    fn add(&mut self, key: String, v: f64) {
        self.0.entry(key).or_default().push(v);
    }
    fn rounds(&self, key: &str) -> &[f64] {
        self.0.get(key).map_or(&[], |v| v.as_slice())
    }
    fn spread(&self, key: &str) -> Option<Spread> {
        let v = self.rounds(key);
        let median = self.median(key)?;
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Spread { median, min, max })
    }
    fn median(&self, key: &str) -> Option<f64> {
        let mut v = self.rounds(key).to_vec();
        if v.is_empty() {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
    }
}

fn s(v: &Value, k: &str) -> String {
    match &v[k] {
        Value::String(x) => x.clone(),
        Value::Null => String::new(),
        x => x.to_string(),
    }
}

fn f(v: &Value, k: &str) -> Option<f64> {
    v[k].as_f64()
}

/// Names each measurement line with a key that says what it measured.
fn collect(lines: &str) -> Figures {
    let mut figs = Figures::default();
    for line in lines.lines().filter(|l| l.starts_with('{')) {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        let size = s(&v, "size");
        if let Some(what) = v["what"].as_str() {
            large_line(&mut figs, &v, what, &size);
            continue;
        }
        if let Some(peer) = v["peer"].as_str() {
            // Aeron measures two channels (ipc, udp): each is its own system.
            let peer = match v["channel"].as_str() {
                Some(ch) => format!("{peer}-{ch}"),
                None => peer.to_string(),
            };
            let subs = v["subscribers"].as_u64().unwrap_or(1);
            // A peer's run that counted nothing failed (its script said so or printed
            // 0): it is left out, not taken as a rate.
            if let Some(r) = f(&v, "msgs_per_s").filter(|r| *r > 0.0) {
                figs.add(format!("{peer}/{size}/{subs}"), r);
            }
            if let (Some(p50), Some(p99)) = (f(&v, "rtt_us_p50"), f(&v, "rtt_us_p99")) {
                figs.add(format!("{peer}/rtt50/{size}"), p50);
                figs.add(format!("{peer}/rtt99/{size}"), p99);
            }
            continue;
        }
        match v["bench"].as_str() {
            Some("bandwidth") => {
                if let Some(r) = f(&v, "msgs_per_s") {
                    let (t, n, who) = (s(&v, "transport"), s(&v, "nodes"), s(&v, "senders"));
                    figs.add(format!("bandwidth/{t}/{size}/{n}/{who}"), r);
                }
            }
            Some("dds_perf") => {
                let (t, q, subs) = (s(&v, "transport"), s(&v, "qos"), s(&v, "subscribers"));
                if let Some(r) = f(&v, "samples_per_s_per_sub") {
                    figs.add(format!("dds/{t}/{q}/{size}/{subs}"), r);
                }
                if let (Some(p50), Some(p99)) = (f(&v, "rtt_p50_us"), f(&v, "rtt_p99_us")) {
                    figs.add(format!("dds/{t}/rtt50/{size}"), p50);
                    figs.add(format!("dds/{t}/rtt99/{size}"), p99);
                }
            }
            _ => {}
        }
    }
    figs
}

/// A line of `scripts/large-vs-peers.sh` (tagged with what ran): GB/s delivered per
/// reader, as `large/WHAT/SIZE/READERS`; the limits as `large/memcpy/SIZE/1` and
/// `large/socket/SIZE/1`. A spindle run that lost order, or a peer's that counted
/// nothing, is left out.
fn large_line(figs: &mut Figures, v: &Value, what: &str, size: &str) {
    let bytes = v["size"].as_f64().unwrap_or(0.0);
    let subs = v["subscribers"].as_u64().unwrap_or(1);
    let gb = match what {
        "limits" => {
            if let (Some(m), Some(t)) = (f(v, "memcpy_gb_per_s"), f(v, "tcp_gb_per_s")) {
                figs.add(format!("large/memcpy/{size}/1"), m);
                figs.add(format!("large/socket/{size}/1"), t);
            }
            return;
        }
        "cyclone" => f(v, "per_sub_msgs_per_s").map(|r| r * bytes / 1e9),
        "zenoh" => f(v, "msgs_per_s").map(|r| r * bytes / 1e9),
        _ if v["all_received_in_order"].as_bool() == Some(false) => None,
        _ => f(v, "gb_per_s_per_sub"),
    };
    if let Some(gb) = gb.filter(|g| *g > 0.0) {
        figs.add(format!("large/{what}/{size}/{subs}"), gb);
    }
}

const COLORS: [&str; 7] = ["#1f6fb4", "#7fb2e5", "#e4572e", "#f3a712", "#29a36a", "#8e6bbf", "#666666"];

/// A grouped bar chart: one group per category, one bar per series (its median over
/// rounds, with a whisker from the smallest to the largest round), on a linear axis.
fn bars(title: &str, subtitle: &str, y_label: &str, cats: &[String], series: &[Series]) -> String {
    chart(title, subtitle, y_label, cats, series, false)
}

/// [`bars`] on a logarithmic axis (powers of ten), for values that span decades.
fn log_bars(title: &str, subtitle: &str, y_label: &str, cats: &[String], series: &[Series]) -> String {
    chart(title, subtitle, y_label, cats, series, true)
}

fn chart(title: &str, subtitle: &str, y_label: &str, cats: &[String], series: &[Series], log: bool) -> String {
    let (w, h) = (900.0, 420.0);
    let (left, right, top, bottom) = (80.0, 290.0, 56.0, 50.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let all = || series.iter().flat_map(|(_, v)| v.iter().flatten());
    let max = all().fold(0.0f64, |a, b| a.max(b.max));
    let min = all().map(|v| v.min).filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
    let min = if min.is_finite() { min } else { 1.0 };
    let step = nice_step(max / 5.0);
    let top_v = (max / step).ceil().max(1.0) * step;
    // The bottom and top decades of a log axis.
    let (lo, hi) = (min.log10().floor(), max.log10().ceil().max(min.log10().floor() + 1.0));
    // Height of value v as a fraction of the plot's height.
    // (On a log axis a value is at least the bottom decade's power, not the least
    // value: the bottom tick stays at the bottom.)
    let floor = 10f64.powf(lo);
    let frac = |v: f64| if log { ((v.max(floor).log10() - lo) / (hi - lo)).clamp(0.0, 1.0) } else { v / top_v };
    let ticks: Vec<f64> = if log {
        (lo as i32..=hi as i32).map(|e| 10f64.powi(e)).collect()
    } else {
        (0..=((top_v / step).round() as usize)).map(|i| i as f64 * step).collect()
    };
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(o, r#"<text x="{left}" y="22" font-size="15" font-weight="bold">{}</text>"#, esc(title));
    let _ = writeln!(o, r##"<text x="{left}" y="40" fill="#555">{}</text>"##, esc(subtitle));
    for v in ticks {
        let y = top + ph - frac(v) * ph;
        let _ = writeln!(o, r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/>"##, left + pw);
        let _ = writeln!(o, r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#, left - 6.0, y + 4.0, human(v));
    }
    let _ = writeln!(
        o,
        r#"<text transform="translate(18,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        top + ph / 2.0,
        esc(y_label)
    );
    let group_w = pw / cats.len().max(1) as f64;
    let bar_w = group_w * 0.8 / series.len().max(1) as f64;
    for (ci, cat) in cats.iter().enumerate() {
        let gx = left + ci as f64 * group_w + group_w * 0.1;
        for (si, (_, vals)) in series.iter().enumerate() {
            let Some(v) = vals.get(ci).copied().flatten() else { continue };
            let bh = frac(v.median) * ph;
            let x = gx + si as f64 * bar_w;
            let color = COLORS[si % COLORS.len()];
            let _ = writeln!(
                o,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="{color}"><title>{} (rounds {} to {})</title></rect>"#,
                top + ph - bh,
                bar_w * 0.92,
                human(v.median),
                human(v.min),
                human(v.max)
            );
            let cx = x + bar_w * 0.46;
            let (y0, y1) = (top + ph - frac(v.min) * ph, top + ph - frac(v.max) * ph);
            let _ = writeln!(o, r##"<line x1="{cx:.1}" x2="{cx:.1}" y1="{y0:.1}" y2="{y1:.1}" stroke="#222"/>"##);
            for y in [y0, y1] {
                let _ = writeln!(
                    o,
                    r##"<line x1="{:.1}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#222"/>"##,
                    cx - 3.0,
                    cx + 3.0
                );
            }
        }
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            left + (ci as f64 + 0.5) * group_w,
            top + ph + 18.0,
            esc(cat)
        );
    }
    let _ = writeln!(o, r##"<line x1="{left}" x2="{left}" y1="{top}" y2="{}" stroke="#333"/>"##, top + ph);
    let _ =
        writeln!(o, r##"<line x1="{left}" x2="{}" y1="{}" y2="{}" stroke="#333"/>"##, left + pw, top + ph, top + ph);
    for (si, (name, _)) in series.iter().enumerate() {
        let y = top + 10.0 + si as f64 * 20.0;
        let x = left + pw + 16.0;
        let _ = writeln!(
            o,
            r#"<rect x="{x}" y="{:.1}" width="12" height="12" fill="{}"/>"#,
            y - 10.0,
            COLORS[si % COLORS.len()]
        );
        let _ = writeln!(o, r#"<text x="{}" y="{y:.1}">{}</text>"#, x + 18.0, esc(name));
    }
    o.push_str("</svg>\n");
    o
}

fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * p).find(|&s| s >= raw).unwrap_or(10.0 * p)
}

fn human(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0} k", v / 1e3)
    } else if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// One table row per category: each series' median and rounds, and the first
/// series' ratio to `versus` (an index into `keys`).
fn table(out: &mut String, title: &str, figs: &Figures, cats: &[String], keys: &[(&str, Vec<String>)], versus: usize) {
    let _ = writeln!(out, "\n{title}\n");
    let mut head = String::from("| |");
    let mut rule = String::from("|---|");
    for (name, _) in keys {
        let _ = write!(head, " {name} |");
        rule.push_str("---|");
    }
    let _ = writeln!(out, "{head} ratio |\n{rule}---|");
    for (ci, cat) in cats.iter().enumerate() {
        let mut row = format!("| {cat} |");
        for (_, ks) in keys {
            let k = &ks[ci];
            let rounds: Vec<String> = figs.rounds(k).iter().map(|v| human(*v)).collect();
            match figs.median(k) {
                Some(m) => {
                    let _ = write!(row, " **{}** ({}) |", human(m), rounds.join(", "));
                }
                None => row.push_str(" – |"),
            }
        }
        let ratio = figs.median(&keys[0].1[ci]).zip(figs.median(&keys[versus].1[ci])).map(|(a, b)| a / b);
        let _ = writeln!(out, "{row} {} |", ratio.map_or("–".into(), |r| format!("{r:.2}×")));
    }
}

fn series(figs: &Figures, keys: &[(&str, Vec<String>)]) -> Vec<Series> {
    keys.iter().map(|(n, ks)| (n.to_string(), ks.iter().map(|k| figs.spread(k)).collect())).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(input), Some(dir)) = (args.first(), args.get(1)) else {
        bench::usage("plots", "plots IN.jsonl OUT_DIR [--machine TEXT] [--one-host | --large | --kv-migration | --kv]");
    };
    let machine = args.iter().position(|a| a == "--machine").and_then(|i| args.get(i + 1)).cloned();
    let machine = machine.unwrap_or_else(|| "this machine".into());
    let text = std::fs::read_to_string(input).unwrap_or_else(|e| bench::usage("plots", &format!("{input}: {e}")));
    let figs = collect(&text);
    if let Err(e) = std::fs::create_dir_all(dir) {
        bench::usage("plots", &format!("{dir}: {e}"));
    }
    let sub = format!("1 writer -> 1 reader; bars: median of rounds, whiskers: min to max; {machine}");
    let mut md = String::new();
    let write = |name: &str, svg: String| {
        let path = format!("{dir}/{name}");
        if let Err(e) = std::fs::write(&path, svg) {
            bench::usage("plots", &format!("{path}: {e}"));
        }
        eprintln!("wrote {path}");
    };

    if args.iter().any(|a| a == "--one-host") {
        one_host(&figs, &machine, &mut md, write);
        println!("{md}");
        return;
    }
    if args.iter().any(|a| a == "--kv-migration") {
        kv_migration(&text, &machine, write);
        return;
    }
    if args.iter().any(|a| a == "--kv") {
        kv_ratio(&text, &machine, &mut md, write);
        println!("{md}");
        return;
    }
    if args.iter().any(|a| a == "--large") {
        large(&figs, &machine, &mut md, write);
        println!("{md}");
        return;
    }

    let sizes = ["16", "128", "1024"].map(String::from);
    let tcp = [
        ("spindle bandwidth (ordered)", sizes.iter().map(|z| format!("bandwidth/tcp/{z}/2/one")).collect()),
        ("spindle DDS Ordered, full read", sizes.iter().map(|z| format!("dds/tcp/ordered/{z}/1")).collect()),
        ("Zenoh", sizes.iter().map(|z| format!("zenoh/{z}/1")).collect::<Vec<_>>()),
    ];
    let cats: Vec<String> = sizes.iter().map(|z| format!("{z} B")).collect();
    write("tcp.svg", bars("tcp (loopback): messages/s by size", &sub, "messages/s", &cats, &series(&figs, &tcp)));
    table(&mut md, "tcp, messages/s (ratio: bandwidth / Zenoh)", &figs, &cats, &tcp, 2);
    table(&mut md, "tcp, messages/s (ratio: DDS / Zenoh)", &figs, &cats, &tcp[1..], 1);

    let sizes = ["128", "1024"].map(String::from);
    let cats: Vec<String> = sizes.iter().map(|z| format!("{z} B")).collect();
    let shm = [
        ("spindle DDS Ordered, full read", sizes.iter().map(|z| format!("dds/shm/ordered/{z}/1")).collect()),
        ("spindle DDS Unordered, full read", sizes.iter().map(|z| format!("dds/shm/unordered/{z}/1")).collect()),
        ("iceoryx2 (full read)", sizes.iter().map(|z| format!("iceoryx2/{z}/1")).collect()),
        ("spindle bandwidth (ordered)", sizes.iter().map(|z| format!("bandwidth/shm/{z}/2/one")).collect()),
        ("Cyclone DDS (loopback)", sizes.iter().map(|z| format!("cyclonedds/{z}/1")).collect::<Vec<_>>()),
    ];
    write("shm.svg", bars("one host (shm): messages/s by size", &sub, "messages/s", &cats, &series(&figs, &shm)));
    table(&mut md, "shm, messages/s (ratio: DDS Ordered / iceoryx2)", &figs, &cats, &shm, 2);
    let unordered = [shm[1].clone(), shm[2].clone()];
    table(&mut md, "shm, messages/s (ratio: DDS Unordered / iceoryx2)", &figs, &cats, &unordered, 1);
    let cyclone = [shm[0].clone(), shm[4].clone()];
    table(&mut md, "DDS against Cyclone, 1 -> 1 (ratio: spindle / Cyclone)", &figs, &cats, &cyclone, 1);
    let fan = [
        ("spindle DDS Ordered, 1 -> 3, full read", vec!["dds/shm/ordered/1024/3".to_string()]),
        ("Cyclone DDS, 1 -> 3", vec!["cyclonedds/1024/3".to_string()]),
    ];
    table(&mut md, "DDS 1 KB, 1 -> 3, per reader (ratio: spindle / Cyclone)", &figs, &["1024 B".into()], &fan, 1);

    let nodes = ["2", "3", "4", "5"];
    let cats: Vec<String> = nodes.iter().map(|n| format!("{n} members")).collect();
    let mut group = Vec::new();
    for t in ["shm", "tcp"] {
        for who in ["one", "all"] {
            let name = format!(
                "{t}, {} sender{}",
                if who == "one" { "one" } else { "all" },
                if who == "one" { "" } else { "s" }
            );
            group.push((name, nodes.iter().map(|n| format!("bandwidth/{t}/1024/{n}/{who}")).collect::<Vec<_>>()));
        }
    }
    let group_keys: Vec<(&str, Vec<String>)> = group.iter().map(|(n, k)| (n.as_str(), k.clone())).collect();
    let gsub =
        format!("spindle bandwidth, ordered, 1 KB, delivered per member per second (median, min-max); {machine}");
    write("group.svg", bars("Throughput by group size", &gsub, "messages/s", &cats, &series(&figs, &group_keys)));
    table(
        &mut md,
        "group size, 1 KB, messages/s per member (ratio: shm one sender / shm all senders)",
        &figs,
        &cats,
        &group_keys,
        1,
    );

    let lat = [
        ("spindle DDS (tcp)", vec!["dds/tcp/rtt50/16".to_string(), "dds/tcp/rtt99/16".to_string()]),
        ("Zenoh (tcp)", vec!["zenoh/rtt50/16".to_string(), "zenoh/rtt99/16".to_string()]),
    ];
    let cats = ["p50".to_string(), "p99".to_string()];
    let lsub = format!("16 B round trip over tcp loopback, lower is better (median, min-max); {machine}");
    write("latency.svg", bars("Round-trip latency (µs)", &lsub, "µs", &cats, &series(&figs, &lat)));
    table(&mut md, "tcp 16 B round trip, µs (ratio: spindle / Zenoh; below 1 is better)", &figs, &cats, &lat, 1);
    println!("{md}");
}

/// The charts of `scripts/one-host.sh`: messages/s by size, 16 B to 64 KB (a log axis:
/// the rates span three decades), and the 16 B round trip.
fn one_host(figs: &Figures, machine: &str, md: &mut String, write: impl Fn(&str, String)) {
    let sizes = ["16", "128", "1024", "8192", "65536"].map(String::from);
    let cats: Vec<String> = sizes.iter().map(|z| format!("{z} B")).collect();
    let keys = |f: &dyn Fn(&str) -> String| sizes.iter().map(|z| f(z)).collect::<Vec<_>>();
    let rows = [
        ("spindle bandwidth (ordered, payload copied in)", keys(&|z| format!("bandwidth/shm/{z}/2/one"))),
        ("spindle DDS Ordered, full read", keys(&|z| format!("dds/shm/ordered/{z}/1"))),
        ("Aeron IPC (counts only)", keys(&|z| format!("aeron-ipc/{z}/1"))),
        ("iceoryx2 (full read)", keys(&|z| format!("iceoryx2/{z}/1"))),
        ("Cyclone DDS (loopback)", keys(&|z| format!("cyclonedds/{z}/1"))),
    ];
    let sub = format!("1 writer -> 1 reader on one host; log axis; median of rounds, whiskers min-max; {machine}");
    write("one-host.svg", log_bars("One host: messages/s by size", &sub, "messages/s", &cats, &series(figs, &rows)));
    table(md, "one host, messages/s (ratio: spindle bandwidth / Aeron IPC)", figs, &cats, &rows, 2);
    let dds = [rows[1].clone(), rows[2].clone()];
    table(md, "one host, messages/s (ratio: spindle DDS / Aeron IPC)", figs, &cats, &dds, 1);
    let lat = [
        ("spindle DDS (shm)", vec!["dds/shm/rtt50/16".to_string(), "dds/shm/rtt99/16".to_string()]),
        ("Aeron IPC", vec!["aeron-ipc/rtt50/16".to_string(), "aeron-ipc/rtt99/16".to_string()]),
    ];
    let cats = ["p50".to_string(), "p99".to_string()];
    let lsub = format!("16 B round trip on one host, lower is better; log axis (median, min-max); {machine}");
    write("one-host-latency.svg", log_bars("One host: round trip (µs)", &lsub, "µs", &cats, &series(figs, &lat)));
    table(md, "one host, 16 B round trip, µs (ratio: spindle / Aeron; below 1 is better)", figs, &cats, &lat, 1);
}

/// The charts of `scripts/large-vs-peers.sh`: GB/s delivered per reader, 64 KiB to
/// 64 MiB, one reader (beside Cyclone DDS, Zenoh and one loopback socket) and three
/// (beside Cyclone DDS; Zenoh's script has no fan-out).
fn large(figs: &Figures, machine: &str, md: &mut String, write: impl Fn(&str, String)) {
    let sizes = ["65536", "1048576", "16777216", "67108864"];
    let cats: Vec<String> = ["64 KiB", "1 MiB", "16 MiB", "64 MiB"].map(String::from).to_vec();
    let keys = |what: &str, subs: u32| sizes.iter().map(|z| format!("large/{what}/{z}/{subs}")).collect::<Vec<_>>();
    for subs in [1, 3] {
        let mut rows = vec![
            ("spindle DDS shm, copied out", keys("spindle-shm-full", subs)),
            ("spindle DDS tcp, copied out", keys("spindle-tcp-full", subs)),
            ("Cyclone DDS (loopback)", keys("cyclone", subs)),
        ];
        if subs == 1 {
            rows.push(("Zenoh (tcp, copied out)", keys("zenoh", 1)));
            rows.push(("one loopback socket (limit)", keys("socket", 1)));
        }
        let readers = if subs == 1 { "1 reader" } else { "3 readers" };
        let sub = format!("1 writer -> {readers}; GB/s per reader; log axis; median of rounds, min-max; {machine}");
        let title = format!("Large samples, 1 -> {subs}: GB/s per reader");
        write(&format!("large-{subs}.svg"), log_bars(&title, &sub, "GB/s", &cats, &series(figs, &rows)));
        table(md, &format!("1 -> {subs}, GB/s per reader (ratio: spindle shm / Cyclone)"), figs, &cats, &rows, 2);
        let tcp = [rows[1].clone(), rows[2].clone()];
        table(md, &format!("1 -> {subs}, GB/s per reader (ratio: spindle tcp / Cyclone)"), figs, &cats, &tcp, 1);
        if subs == 1 {
            let z = [rows[1].clone(), rows[3].clone()];
            table(md, "1 -> 1, GB/s per reader (ratio: spindle tcp / Zenoh)", figs, &cats, &z, 1);
        }
    }
}
