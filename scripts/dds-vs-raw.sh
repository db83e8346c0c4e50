#!/usr/bin/env bash
# DDS full reads against the raw multicast, per round: `dds_perf --read full` (Ordered,
# 1 writer -> 1 reader) and `bandwidth --senders one` (2 members), interleaved, at
# 16 B, 128 B and 1 KB on shm and tcp. With several build directories (each holding
# both programs), every build runs once per round, in the order given: a before/after
# comparison on the same machine state.
# "raw" is `bandwidth` as Derecho's test runs it (the sender stores only the first
# word of each message, the receiver reads only that word); "raw, same bytes" adds
# `--fill --read full`: the sender writes every byte and the receiver copies every
# byte out, the memory traffic a DDS sample's writer and full reader have.
#   usage: bash scripts/dds-vs-raw.sh [SECONDS] [ROUNDS] [BUILD_DIR...]
#   default BUILD_DIR: target/release (built here first)
# Prints one line per run, then per build, size and transport: the median of DDS and
# of the raw path, the median of the per-round ratios, and the lowest ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-3}
ROUNDS=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
DIRS=("$@")
if [ ${#DIRS[@]} -eq 0 ]; then
  cargo build --release -q -p bench --bin bandwidth --bin dds_perf
  DIRS=(target/release)
fi
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
count() { case $1 in 16|128) echo $((T * 3000000));; *) echo $((T * 1500000));; esac; }
for round in $(seq "$ROUNDS"); do
  echo "== round $round of $ROUNDS" >&2
  for t in shm tcp; do
    for size in 16 128 1024; do
      for d in "${DIRS[@]}"; do
        raw=$("$d/bandwidth" --json --transport $t --nodes 2 --senders one --size $size --count "$(count $size)" 2>/dev/null \
          | python3 -c 'import json,sys; print(int([json.loads(l) for l in sys.stdin if l.startswith("{")][-1]["msgs_per_s"]))')
        same=$("$d/bandwidth" --json --transport $t --nodes 2 --senders one --size $size --count "$(count $size)" --fill --read full 2>/dev/null \
          | python3 -c 'import json,sys; print(int([json.loads(l) for l in sys.stdin if l.startswith("{")][-1]["msgs_per_s"]))')
        dds=$("$d/dds_perf" --json --seconds "$T" --transport $t --size $size --read full 2>/dev/null \
          | python3 -c 'import json,sys; print(int([json.loads(l) for l in sys.stdin if l.startswith("{")][-1]["samples_per_s_per_sub"]))')
        echo "$round $d $t $size $dds $raw $same" | tee -a "$RESULTS" >&2
      done
    done
  done
done
python3 - "$RESULTS" <<'EOF'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
keys = []
for r in rows:
    k = (r[1], r[2], int(r[3]))
    if k not in keys: keys.append(k)
print("| build | transport | size | DDS full read (median) | raw (median) | DDS/raw per round: median (lowest) | raw, same bytes (median) | DDS/same per round: median (lowest) |")
print("|---|---|---|---|---|---|---|---|")
for k in keys:
    sel = [r for r in rows if (r[1], r[2], int(r[3])) == k]
    dds = [int(r[4]) for r in sel]; raw = [int(r[5]) for r in sel]
    same = [int(r[6]) for r in sel]
    ratios = [a / b for a, b in zip(dds, raw) if b > 0]
    vs_same = [a / b for a, b in zip(dds, same) if b > 0]
    print(f"| {k[0]} | {k[1]} | {k[2]} B | {st.median(dds)/1e6:.2f} M | {st.median(raw)/1e6:.2f} M | "
          f"{st.median(ratios):.2f}× ({min(ratios):.2f}×) | {st.median(same)/1e6:.2f} M | "
          f"{st.median(vs_same):.2f}× ({min(vs_same):.2f}×) |")
EOF
