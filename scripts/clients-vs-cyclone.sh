#!/usr/bin/env bash
# Subscribers outside the group against Cyclone DDS's subscribers, back to back on this
# machine at 1 KB: Cyclone's `ddsperf` with one publisher and K subscriber processes
# (reliable, loopback in a private network namespace, as ../shared/bench/cyclone-ddsperf.sh
# runs it) and spindle's `dds_perf --transport tcp --subscribers 2 --clients K` (one writer
# and two reader members over tcp, K client readers over tcp spread over the readers).
# Per K and round, interleaved: Cyclone's per-subscriber rate (the mean of each
# subscriber's median per-second rate, first and last second dropped) and spindle's per-client
# rate (mean and minimum), then the medians over the rounds. Needs root and Debian's
# cyclonedds-tools (installed if missing). Prints JSON lines, then a table.
# usage: bash scripts/clients-vs-cyclone.sh [SECONDS] [ROUNDS] [K...]
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-5}
ROUNDS=${2:-3}
shift 2 || true
KS=${*:-1 8 64}
command -v ddsperf >/dev/null || { echo "installing cyclonedds-tools" >&2; apt-get install -y -qq cyclonedds-tools >/dev/null; }
cargo build --release -q -p bench --bin dds_perf
out=$(mktemp)
trap 'rm -f "$out"' EXIT

cyclone() { # K: one publisher, K subscribers of 1 KB samples
  bash scripts/cyclone-fanout.sh "$T" "$1" 1k
}

spindle() { # K
  target/release/dds_perf --transport tcp --subscribers 2 --clients "$1" --size 1024 --seconds "$T" --json | tail -1 |
    python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
r = d["client_samples_per_s"]
print(json.dumps({"peer": "spindle", "size": 1024, "clients": d["clients"], "per_client_msgs_per_s": round(sum(r) / len(r)),
                  "min_client_msgs_per_s": d["min_client_samples_per_s"], "member_cpu_pct": d["member_cpu_pct"],
                  "view_changes_during_run": d["view_changes_during_run"], "all_received_in_order": d["all_received_in_order"]}))'
}

for round in $(seq "$ROUNDS"); do
  for k in $KS; do
    echo "round $round, K=$k" >&2
    cyclone "$k" | tee -a "$out"
    spindle "$k" | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'K':>4} {'cyclone per sub':>16} {'spindle per client':>19} {'spindle min':>12} {'ratio':>6}")
for k in sorted({r.get('subscribers', r.get('clients')) for r in rows}):
    c = statistics.median(r['per_sub_msgs_per_s'] for r in rows if r['peer'] == 'cyclonedds' and r['subscribers'] == k)
    s = statistics.median(r['per_client_msgs_per_s'] for r in rows if r['peer'] == 'spindle' and r['clients'] == k)
    m = statistics.median(r['min_client_msgs_per_s'] for r in rows if r['peer'] == 'spindle' and r['clients'] == k)
    print(f"{k:>4} {c:>16,.0f} {s:>19,.0f} {m:>12,.0f} {s / max(c, 1):>6.2f}")
PY
