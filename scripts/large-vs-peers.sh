#!/usr/bin/env bash
# Samples of 64 KiB to 64 MiB: spindle (`dds_perf`, one writer, 1 and 3 member readers,
# shm and tcp, readers copying every byte out (`--read full`) and reading in place
# (`--read word`)) against Cyclone DDS `ddsperf` at the same size and readers
# (scripts/cyclone-fanout.sh), Zenoh 1 -> 1 with its subscriber copying every payload
# out (../shared/bench/zenoh-perf.sh, READ=full; it has no fan-out run), and the same
# round's raw limits (`limits`: a streaming memcpy and one loopback TCP socket). Every
# run once per round, rounds interleaved; one JSON line per run in OUT, then a table of
# medians (GB/s delivered per reader) with every round's value.
# `cargo run --release -p bench --bin plots -- OUT docs/charts --large` draws the charts.
# usage (as root, with Debian's cyclonedds-tools): bash scripts/large-vs-peers.sh [SECONDS] [ROUNDS] [OUT]
# (SIZES="..." to choose the sizes; without root or ddsperf, Cyclone is left out.)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-3}
ROUNDS=${2:-3}
OUT=${3:-bench/results/large.jsonl}
SIZES=${SIZES:-65536 1048576 16777216 67108864}
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
cargo build --release -q -p bench --bin dds_perf --bin limits
tag() { python3 -c 'import json,sys
r, what = sys.argv[1], sys.argv[2]
for l in sys.stdin:
    l = l.strip()
    if l.startswith("{"):
        d = json.loads(l); d["round"] = int(r); d["what"] = what; print(json.dumps(d))' "$@"; }
for r in $(seq "$ROUNDS"); do
  for size in $SIZES; do
    echo "round $r/$ROUNDS, $size bytes" >&2
    ./target/release/limits --size "$size" --seconds 1 | tag "$r" limits >> "$OUT"
    for subs in 1 3; do
      for t in shm tcp; do
        for read in full word; do
          timeout $((T + 120)) ./target/release/dds_perf --transport "$t" --size "$size" --subscribers "$subs" \
            --seconds "$T" --read "$read" --json 2>/dev/null | tail -1 | tag "$r" "spindle-$t-$read" >> "$OUT" || true
        done
      done
      timeout $((T + 90)) bash scripts/cyclone-fanout.sh "$T" "$subs" "$size" 2>/dev/null | tag "$r" cyclone >> "$OUT" || true
    done
    READ=full timeout $((T + 120)) bash ../shared/bench/zenoh-perf.sh "$T" "$size" 2>/dev/null | tag "$r" zenoh >> "$OUT" || true
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def gb(d):
    if d["what"] == "cyclone":
        return d["per_sub_msgs_per_s"] * d["size"] / 1e9
    if d["what"] == "zenoh":
        return d.get("msgs_per_s", 0.0) * d["size"] / 1e9
    return d.get("gb_per_s_per_sub", 0.0) if d.get("all_received_in_order", True) else 0.0
def cell(vals):
    if not vals:
        return "-"
    return f"{statistics.median(vals):.2f} ({', '.join(f'{v:.2f}' for v in vals)})"
sizes = sorted({d["size"] for d in rows})
print("| size | readers | shm copy-out | shm in place | tcp copy-out | tcp in place | Cyclone | Zenoh | memcpy | loopback tcp |")
print("|---|---|---|---|---|---|---|---|---|---|")
for size in sizes:
    lim = [d for d in rows if d["what"] == "limits" and d["size"] == size]
    mem = [d["memcpy_gb_per_s"] for d in lim]
    tcp = [d["tcp_gb_per_s"] for d in lim]
    for subs in (1, 3):
        pick = lambda w: [gb(d) for d in rows if d["what"] == w and d["size"] == size and d.get("subscribers", 1) == subs]
        whats = ("spindle-shm-full", "spindle-shm-word", "spindle-tcp-full", "spindle-tcp-word", "cyclone", "zenoh")
        cols = [pick(w) for w in whats]
        print(f"| {size} | {subs} | " + " | ".join(cell(c) for c in cols) + f" | {cell(mem)} | {cell(tcp)} |")
PY
