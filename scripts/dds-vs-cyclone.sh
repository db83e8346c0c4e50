#!/usr/bin/env bash
# DDS throughput, back to back on this machine: Eclipse Cyclone DDS (`ddsperf`, reliable,
# loopback in a private network namespace; ../shared/bench/cyclone-ddsperf.sh) and spindle's
# dds_perf (shm, loans, in-place reads), 1 writer -> 1 reader at 128 B, 1 KB and 10 KB for
# every QoS level (readers read each sample's first word in place, as Derecho's bandwidth
# test does) and for Ordered with readers that copy every sample out (`--read full`, as
# ddsperf's subscriber touches every byte), then 1 writer -> 3 readers at 1 KB for both. Needs root and Debian's
# cyclonedds-tools (installed if missing). Prints JSON lines, then a table.
# usage: bash scripts/dds-vs-cyclone.sh [SECONDS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-5}
ROUNDS=${2:-1}
command -v ddsperf >/dev/null || { echo "installing cyclonedds-tools" >&2; apt-get install -y -qq cyclonedds-tools >/dev/null; }
cargo build --release -q -p bench --bin dds_perf
out=$(mktemp)
trap 'rm -f "$out"' EXIT

for round in $(seq "$ROUNDS"); do
  echo "round $round of $ROUNDS" >&2
  unshare -n bash ../shared/bench/cyclone-ddsperf.sh "$T" 128 1k 10k | tee -a "$out"
  for size in 128 1024 10240; do
    for qos in unordered ordered volatile logged; do
      ./target/release/dds_perf --size $size --qos $qos --subscribers 1 --seconds "$T" --json | tee -a "$out"
    done
    ./target/release/dds_perf --size $size --qos ordered --read full --subscribers 1 --seconds "$T" --json | tee -a "$out"
  done
  bash scripts/cyclone-fanout.sh "$T" 3 1k | tee -a "$out"
  ./target/release/dds_perf --size 1024 --qos ordered --subscribers 3 --seconds "$T" --json | tee -a "$out"
done

python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def med(xs):
    return statistics.median(xs) if xs else float("nan")
def cyc(size, subs=1):
    return med([r["msgs_per_s"] for r in rows if r.get("peer") == "cyclonedds" and r.get("size") == size
                and r.get("subscribers", 1) == subs and "msgs_per_s" in r])
def ours(size, qos, subs=1, read="word"):
    return med([r["samples_per_s_per_sub"] for r in rows if r.get("bench") == "dds_perf" and r["size"] == size
                and r["qos"] == qos and r["subscribers"] == subs and r.get("read", "word") == read])
print("\n| size | readers | Cyclone samples/s | spindle Unordered | Ordered | Volatile | Logged (disk baseline) | Ordered, full read | Ordered / Cyclone | full read / Cyclone |")
print("|---|---|---|---|---|---|---|---|---|---|")
for size in (128, 1024, 10240):
    c = cyc(size)
    o = ours(size, "ordered")
    disk = med([r["disk_baseline_samples_per_s"] for r in rows if r.get("bench") == "dds_perf" and r["size"] == size and r["qos"] == "logged"])
    f = ours(size, "ordered", 1, "full")
    print(f"| {size} | 1 | {c:,.0f} | {ours(size,'unordered'):,.0f} | {o:,.0f} | {ours(size,'volatile'):,.0f} | {ours(size,'logged'):,.0f} ({disk:,.0f}) | {f:,.0f} | {o / c:.2f}x | {f / c:.2f}x |")
c3, o3 = cyc(1024, 3), ours(1024, "ordered", 3)
print(f"| 1024 | 3 | {c3:,.0f} | | {o3:,.0f} | | | | {o3 / c3:.2f}x | |")
PY
