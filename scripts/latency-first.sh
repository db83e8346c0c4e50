#!/usr/bin/env bash
# Round trips on one host with and without latency first, beside Aeron IPC's
# cping/cpong, interleaved: per round, Aeron (`PING=1 CHANNELS=ipc aeron-perf.sh`),
# `dds_perf --latency` (16 B, shm) sleeping and latency first, raw `latency`
# (16 B, shm, send to own delivery) sleeping and with `--lend`, and `dds_perf`
# full-read throughput (128 B, shm) both ways (what the setting costs a stream).
#   usage: bash scripts/latency-first.sh [ROUNDS] [AERON_SCRIPT]
#   default AERON_SCRIPT: ../shared/bench/aeron-perf.sh (skipped if missing)
# Prints one line per run, then the median of each measure over the rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
AERON=${2:-../shared/bench/aeron-perf.sh}
cargo build --release -q -p bench --bin latency --bin dds_perf
B=target/release
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
field() { python3 -c "import json,sys; d=[json.loads(l) for l in sys.stdin if l.startswith('{')][-1]; print(' '.join(str(d.get(k)) for k in sys.argv[1:]))" "$@"; }
for round in $(seq "$ROUNDS"); do
  echo "== round $round of $ROUNDS" >&2
  if [ -f "$AERON" ]; then
    a=$(PING=1 CHANNELS=ipc bash "$AERON" 2 16 2>/dev/null | grep rtt_us_p50 | field rtt_us_p50 rtt_us_p99)
    echo "$round aeron_rtt $a" | tee -a "$RESULTS" >&2
  fi
  for lf in "" --latency-first; do
    d=$("$B/dds_perf" --json --transport shm --latency --size 16 --count 50000 $lf 2>/dev/null | field rtt_p50_us rtt_p99_us)
    echo "$round dds_rtt${lf:+_lf} $d" | tee -a "$RESULTS" >&2
  done
  for l in "" --lend; do
    r=$("$B/latency" --json --transport shm --nodes 2 --senders one --size 16 --count 100000 $l 2>/dev/null | field lat_us_p50 lat_us_p99)
    echo "$round raw_own${l:+_lend} $r" | tee -a "$RESULTS" >&2
  done
  for lf in "" --latency-first; do
    t=$("$B/dds_perf" --json --transport shm --size 128 --read full --seconds 3 $lf 2>/dev/null | field samples_per_s_per_sub)
    echo "$round dds_thr_128${lf:+_lf} $t" | tee -a "$RESULTS" >&2
  done
done
python3 - "$RESULTS" <<'PY'
import sys, statistics as st, collections
rows = collections.defaultdict(list)
for l in open(sys.argv[1]):
    p = l.split()
    if 'None' in p: continue
    rows[p[1]].append([float(x) for x in p[2:]])
for k, v in rows.items():
    cols = list(zip(*v))
    print(k, ' '.join(f"{st.median(c):g} ({', '.join(f'{x:g}' for x in c)})" for c in cols))
PY
