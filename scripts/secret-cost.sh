#!/usr/bin/env bash
# What a group secret costs on tcp: `bandwidth` (2 members, one sender) and
# `dds_perf` (Ordered, one writer -> one reader, full reads) with and without a
# secret, interleaved, per round, at 16 B, 1 KB and 1 MiB.
# With a secret every tcp data link is sealed (AES-256-GCM) and every control frame
# too.
#   usage: bash scripts/secret-cost.sh [ROUNDS]
# Prints one line per run, then per program and size: the medians without and with
# the secret, the median of the per-round ratios and the lowest ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
cargo build --release -q -p bench --bin bandwidth --bin dds_perf
B=target/release
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
KEY="$WORK/group.key"
head -c 32 /dev/urandom > "$KEY"
chmod 600 "$KEY"
RESULTS="$WORK/results"
field() { python3 -c "import json,sys; print(int([json.loads(l) for l in sys.stdin if l.startswith('{')][-1]['$1']))"; }
count() { case $1 in 16) echo 4000000;; 1024) echo 1500000;; *) echo 3000;; esac; }
for round in $(seq "$ROUNDS"); do
  echo "== round $round of $ROUNDS" >&2
  for size in 16 1024 1048576; do
    for secret in plain sealed; do
      extra=(); [ $secret = sealed ] && extra=(--secret-file "$KEY")
      v=$("$B/bandwidth" --json --transport tcp --nodes 2 --senders one --size $size --count "$(count $size)" "${extra[@]}" 2>/dev/null | field msgs_per_s)
      echo "$round bandwidth $size $secret $v" | tee -a "$RESULTS" >&2
      v=$("$B/dds_perf" --json --seconds 3 --transport tcp --size $size --read full "${extra[@]}" 2>/dev/null | field samples_per_s_per_sub)
      echo "$round dds_perf $size $secret $v" | tee -a "$RESULTS" >&2
    done
  done
done
python3 - "$RESULTS" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
runs = {}
for r, prog, size, secret, v in rows:
    runs.setdefault((prog, int(size)), {}).setdefault(r, {})[secret] = int(v)
print(f"{'program':10} {'size':>8} {'plain':>10} {'sealed':>10} {'ratio (median)':>15} {'lowest':>7}")
for (prog, size), by_round in sorted(runs.items()):
    plain = [x['plain'] for x in by_round.values()]
    sealed = [x['sealed'] for x in by_round.values()]
    ratios = [x['sealed'] / x['plain'] for x in by_round.values()]
    print(f"{prog:10} {size:>8} {st.median(plain):>10.0f} {st.median(sealed):>10.0f} {st.median(ratios):>14.2f}x {min(ratios):>6.2f}x")
PY
