#!/usr/bin/env bash
# The relay where links, not cores, are the limit: every member a host of its own
# (a network namespace on a bridge, its link shaped to MBIT Mbit/s each way), one
# sender, 1 MiB and 16 MiB messages, per round and interleaved: 1 -> 1, 1 -> 3 with
# direct sends, 1 -> 3 relayed. Needs root (namespaces, tc).
#   usage: bash scripts/relay-links.sh [ROUNDS] [MBIT] [SECONDS]
# Appends one JSON line per run to bench/results/relay-links.jsonl (with the round)
# and prints, per size, the medians of GB/s per receiving member and of the
# per-round ratio to 1 -> 1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
MBIT=${2:-1000}
SECS=${3:-8}
cargo build --release -q -p bench --bin bandwidth
B=target/release/bandwidth
OUT=bench/results/relay-links.jsonl
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# Messages for about SECS seconds of the link at 1 -> 1 (at least 8).
count() { python3 -c "print(max(8, int($MBIT * 1e6 / 8 * $SECS / $1)))"; }
for round in $(seq "$ROUNDS"); do
  for size in 1048576 16777216; do
    n=$(count $size)
    for run in "one --nodes 2" "direct --nodes 4" "relay --nodes 4 --relay"; do
      set -- $run
      name=$1; shift
      echo "== round $round of $ROUNDS: $size B, $name, $n messages" >&2
      if ! line=$("$B" --json --transport tcp --senders one --size $size --count "$n" --link-mbit "$MBIT" "$@" 2>"$WORK/err" | grep '^{'); then
        cat "$WORK/err" >&2
        exit 1
      fi
      echo "$line" | python3 -c "import json,sys; d=json.load(sys.stdin); d['round']=$round; d['run']='$name'; d['date']='$(date +%F)'; print(json.dumps(d))" | tee -a "$OUT" >> "$WORK/rows"
    done
  done
done
python3 - "$WORK/rows" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r['size'], {}).setdefault(r['round'], {})[r['run']] = r['receiver_gb_per_s']
print(f"{'size':>9} {'1->1 GB/s':>10} {'1->3 direct':>12} {'1->3 relay':>11} {'direct/1->1':>12} {'relay/1->1 (rounds)':>20}")
for size, rounds in sorted(by.items()):
    med = lambda k: st.median(x[k] for x in rounds.values())
    d = [x['direct'] / x['one'] for x in rounds.values()]
    rl = [x['relay'] / x['one'] for x in rounds.values()]
    print(f"{size:>9} {med('one'):>10.3f} {med('direct'):>12.3f} {med('relay'):>11.3f} {st.median(d):>11.2f}x "
          f"{st.median(rl):>6.2f}x ({', '.join(f'{x:.2f}' for x in rl)})")
PY
