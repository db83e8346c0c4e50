//! The key-value store's charts: a migration's timeline (`--kv-migration`) and
//! the store against its synced write-ahead log (`--kv`).

use super::{bars, f, human, log_bars, s, series, Figures, Spread};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The chart of `kv_shards`'s migration rows that carry a timeline: operations/s
/// every half second through the phases before, during and after the move, one
/// series per `pull_share` (its round with the median during/before ratio).
pub(super) fn kv_migration(text: &str, machine: &str, write: impl Fn(&str, String)) {
    let rows: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["experiment"] == "migrate" && v["timeline_ops_per_s"].is_array())
        .collect();
    let ratio = |v: &Value| f(&v["during"], "ops_per_s").unwrap_or(0.0) / f(&v["before"], "ops_per_s").unwrap_or(1.0);
    let mut by_share: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for v in &rows {
        by_share.entry(format!("{}", f(v, "pull_share").unwrap_or(0.0))).or_default().push(v);
    }
    const PER: usize = 5; // 100 ms buckets per bar
    let (mut series, mut windows, mut bars_n) = (Vec::new(), Vec::new(), 0);
    for (share, mut vs) in by_share.into_iter().rev() {
        vs.sort_by(|a, b| ratio(a).total_cmp(&ratio(b)));
        let v = vs[vs.len() / 2];
        let t: Vec<f64> = v["timeline_ops_per_s"].as_array().into_iter().flatten().filter_map(Value::as_f64).collect();
        let means: Vec<Option<Spread>> = t
            .chunks(PER)
            .map(|c| {
                let m = c.iter().sum::<f64>() / c.len() as f64;
                Some(Spread { median: m, min: m, max: m })
            })
            .collect();
        bars_n = bars_n.max(means.len());
        let (from, to) = (f(v, "migration_from_s").unwrap_or(0.0), f(v, "migration_to_s").unwrap_or(0.0));
        windows.push(format!("share {share}: move {from:.1}-{to:.1} s, {:.2}x", ratio(v)));
        series.push((format!("pull_share {share}"), means));
    }
    if series.is_empty() {
        bench::usage("plots", "no kv_shards migration rows with a timeline in the input");
    }
    for (_, m) in &mut series {
        m.resize(bars_n, None);
    }
    let cats: Vec<String> = (0..bars_n).map(|i| format!("{:.1}", i as f64 * 0.5)).collect();
    let sub = format!("ops/s every 0.5 s from the phase before (s); {}; {machine}", windows.join("; "));
    let mb = rows.first().and_then(|v| f(v, "bytes_pulled")).unwrap_or(0.0) / 1e6;
    let title = format!("A live migration of {mb:.0} MB: operations/s");
    write("kv-migration.svg", bars(&title, &sub, "ops/s", &cats, &series));
}

/// The chart of `kv_bench`'s rows (`kv.svg`): puts/s of the store synced per put
/// and of the store on a Tailwind log (acknowledged in memory, and on a majority's
/// disks), by transport and value size, on a log axis; and a table of each
/// round's ratio to the synced store of the same round (rows carry `round`).
pub(super) fn kv_ratio(text: &str, machine: &str, md: &mut String, write: impl Fn(&str, String)) {
    let mut figs = Figures::default();
    // (transport of the replicated rows, value) -> round -> config -> puts/s
    let mut by_round: BTreeMap<(String, u64), BTreeMap<u64, BTreeMap<String, f64>>> = BTreeMap::new();
    let mut fsync: BTreeMap<(u64, u64), f64> = BTreeMap::new();
    let rows: Vec<Value> = text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect();
    for v in rows.iter().filter(|v| v["bench"] == "kv_bench") {
        let (Some(puts), Some(value), Some(round)) =
            (f(v, "puts_per_s"), v["value_bytes"].as_u64(), v["round"].as_u64())
        else {
            continue;
        };
        let config = s(v, "config");
        if config == "store_fsync" {
            fsync.insert((round, value), puts);
        }
        if !["store_fsync", "tailwind_memory", "tailwind_disk"].contains(&config.as_str()) {
            continue;
        }
        let transport = s(v, "transport");
        if transport != "none" {
            by_round.entry((transport, value)).or_default().entry(round).or_default().insert(config, puts);
        }
    }
    let mut cats = Vec::new();
    let mut keys: [(&str, Vec<String>); 3] =
        [("fjall synced per put", vec![]), ("on Tailwind, Ack::Memory", vec![]), ("on Tailwind, Ack::Disk", vec![])];
    let _ = writeln!(md, "| transport, value | rounds | synced per put | Ack::Memory | × per round, median (range) | Ack::Disk | × per round, median (range) |\n|---|---|---|---|---|---|---|");
    for ((transport, value), rounds) in &by_round {
        let cat = format!("{transport}, {value} B");
        for (round, configs) in rounds {
            let Some(base) = fsync.get(&(*round, *value)).copied() else { continue };
            figs.add(format!("{cat}/store_fsync"), base);
            for c in ["tailwind_memory", "tailwind_disk"] {
                if let Some(p) = configs.get(c) {
                    figs.add(format!("{cat}/{c}"), *p);
                    figs.add(format!("{cat}/{c}/ratio"), p / base);
                }
            }
        }
        for (k, c) in keys.iter_mut().zip(["store_fsync", "tailwind_memory", "tailwind_disk"]) {
            k.1.push(format!("{cat}/{c}"));
        }
        let med = |k: &str| figs.median(&format!("{cat}/{k}")).map_or("-".into(), human);
        let ratio = |k: &str| {
            let r = figs.spread(&format!("{cat}/{k}/ratio"));
            r.map_or("-".into(), |r| format!("{:.1}× ({:.1}-{:.1})", r.median, r.min, r.max))
        };
        let _ = writeln!(
            md,
            "| {cat} | {} | {} | {} | {} | {} | {} |",
            rounds.len(),
            med("store_fsync"),
            med("tailwind_memory"),
            ratio("tailwind_memory"),
            med("tailwind_disk"),
            ratio("tailwind_disk")
        );
        cats.push(cat);
    }
    if cats.is_empty() {
        bench::usage("plots", "no kv_bench rows with a round, a value size and a transport in the input");
    }
    let of = |k: &str| rows.iter().find(|v| v["config"] == "tailwind_memory").and_then(|v| v[k].as_u64());
    // (kv_bench's rows name their replicas, not always their clients.)
    let named = |k: &str, what: &str| of(k).map_or(String::new(), |n| format!("{n} {what}; "));
    let (clients, replicas) = (named("clients", "clients"), named("replicas", "replicas"));
    let sub = format!("{clients}{replicas}bars: median of rounds, whiskers: min to max; {machine}");
    let keys: Vec<(&str, Vec<String>)> = keys.into_iter().collect();
    write("kv.svg", log_bars("The key-value store: puts/s", &sub, "puts/s", &cats, &series(&figs, &keys)));
}
