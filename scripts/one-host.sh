#!/usr/bin/env bash
# One host, one writer -> one reader, against the peers built for the fastest messaging
# between processes on one machine, side by side and interleaved (every system once per
# size per round, ROUNDS rounds), message sizes 16 B to 64 KB:
#   spindle `bandwidth --transport shm --fill` (ordered; the sender copies the whole payload
#       in, as the peers' publishers do; the upcall reads one word in place),
#   spindle `dds_perf --transport shm --read full` (Ordered, every sample copied out),
#   Aeron IPC (../shared/bench/aeron-perf.sh; its subscriber only counts),
#   iceoryx2 (../shared/bench/iceoryx2-perf.sh, READ=full),
#   Cyclone DDS ddsperf over loopback in a private netns (root only; left out otherwise);
# then 16 B round trips: `dds_perf --latency --transport shm` and Aeron's cping/cpong over
# IPC. Every measurement is one JSON line in OUT (default bench/results/one-host.jsonl),
# tagged with "round" and "system"; `cargo run -p bench --bin plots -- OUT docs/charts
# --one-host` draws one-host.svg and one-host-latency.svg and prints the median tables.
# usage: bash scripts/one-host.sh [SECONDS] [ROUNDS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-3}
ROUNDS=${2:-3}
OUT=${3:-bench/results/one-host.jsonl}
PEERS=../shared/bench
SIZES="16 128 1024 8192 65536"
# The output file, the build, have_cyclone and `tag`.
source scripts/peers-lib.sh
# Messages for about T seconds of `bandwidth` at a guessed rate per size.
count() { case $1 in 16|128) echo $((T * 4000000));; 1024) echo $((T * 3000000));; 8192) echo $((T * 600000));; *) echo $((T * 80000));; esac; }

for round in $(seq "$ROUNDS"); do
  echo "== round $round of $ROUNDS" >&2
  for size in $SIZES; do
    echo "-- $size B" >&2
    ./target/release/bandwidth --json --fill --transport shm --size "$size" --count "$(count "$size")" 2>/dev/null |
      tag "$round" spindle
    ./target/release/dds_perf --json --seconds "$T" --transport shm --size "$size" --read full 2>/dev/null | tail -1 |
      tag "$round" spindle-dds
    CHANNELS=ipc bash $PEERS/aeron-perf.sh "$T" "$size" 2>/dev/null | tag "$round" aeron
    READ=full bash $PEERS/iceoryx2-perf.sh "$T" "$size" 2>/dev/null | tag "$round" iceoryx2
    if [ "$have_cyclone" = 1 ]; then
      unshare -n bash $PEERS/cyclone-ddsperf.sh "$T" "$size" 2>/dev/null | tag "$round" cyclonedds
    fi
  done
  ./target/release/dds_perf --json --transport shm --latency --size 16 --count 20000 2>/dev/null | tail -1 |
    tag "$round" spindle-dds
  PING=1 CHANNELS=ipc bash $PEERS/aeron-perf.sh 1 16 2>/dev/null | grep rtt | tag "$round" aeron
done
echo "wrote $OUT" >&2
