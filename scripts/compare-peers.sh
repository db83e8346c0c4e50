#!/usr/bin/env bash
# Spindle against the pub/sub systems a user would pick instead, on this machine, side by
# side and interleaved (every system once per round, ROUNDS rounds), 1 -> 1 unless said:
#   tcp 16 B, 128 B, 1 KB: spindle `bandwidth` (ordered), `dds_perf --read full` (Ordered),
#       Zenoh (../shared/bench/zenoh-perf.sh)
#   shm 128 B, 1 KB: spindle `bandwidth`, `dds_perf --read full` (Ordered and Unordered),
#       iceoryx2 (../shared/bench/iceoryx2-perf.sh, READ=full)
#   DDS 128 B, 1 KB and 1 -> 3 at 1 KB: Cyclone DDS ddsperf (loopback, private netns)
#       against dds_perf on shm (Ordered, full reads)
#   group size: `bandwidth` over shm and tcp, 1 KB, 2..5 members, one sender and all
#   latency: tcp 16 B round trip, `dds_perf --latency` against Zenoh's zping/zpong
# Every measurement is one JSON line in OUT (default bench/results/peers.jsonl), tagged
# with "round" and "system"; `cargo run -p bench --bin plots -- OUT docs/charts` draws
# the charts and prints the median table.
# usage: bash scripts/compare-peers.sh [SECONDS] [ROUNDS] [OUT]
# Needs root for Cyclone's netns (`unshare -n`); Cyclone is left out, saying so, without it.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-4}
ROUNDS=${2:-3}
OUT=${3:-bench/results/peers.jsonl}
PEERS=../shared/bench
# The output file, the build, have_cyclone and `tag`.
source scripts/peers-lib.sh
# Messages for about T seconds of `bandwidth` at a guessed rate per size.
count() { case $1 in 16|128) echo $((T * 3000000));; 1024) echo $((T * 1500000));; *) echo $((T * 300000));; esac; }
bw() { ./target/release/bandwidth --json "$@" 2>/dev/null; }
dds() { ./target/release/dds_perf --json --seconds "$T" "$@" 2>/dev/null | tail -1; }

for round in $(seq "$ROUNDS"); do
  echo "== round $round of $ROUNDS" >&2
  for size in 16 128 1024; do
    bw --transport tcp --size $size --count "$(count $size)" | tag "$round" spindle
    dds --transport tcp --size $size --read full | tag "$round" spindle-dds
    bash $PEERS/zenoh-perf.sh "$T" $size 2>/dev/null | tag "$round" zenoh
  done
  for size in 128 1024; do
    bw --transport shm --size $size --count "$(count $size)" | tag "$round" spindle
    dds --transport shm --size $size --read full --qos ordered | tag "$round" spindle-dds
    dds --transport shm --size $size --read full --qos unordered | tag "$round" spindle-dds
    READ=full bash $PEERS/iceoryx2-perf.sh "$T" $size 2>/dev/null | tag "$round" iceoryx2
  done
  if [ "$have_cyclone" = 1 ]; then
    unshare -n bash $PEERS/cyclone-ddsperf.sh "$T" 128 1k 2>/dev/null | tag "$round" cyclonedds
    bash scripts/cyclone-fanout.sh "$T" 3 1k | tag "$round" cyclonedds
  fi
  dds --transport shm --size 1024 --read full --subscribers 3 | tag "$round" spindle-dds
  for transport in shm tcp; do
    for nodes in 2 3 4 5; do
      for senders in one all; do
        # 2 members, one sender, 1 KB was measured above (the size rows).
        [ $nodes = 2 ] && [ $senders = one ] && continue
        per=1; [ $senders = all ] && per=$nodes
        n=$(( $(count 1024) / per / 2 ))
        bw --transport $transport --nodes $nodes --senders $senders --size 1024 --count $n | tag "$round" spindle
      done
    done
  done
  dds --transport tcp --latency --size 16 --count 20000 | tag "$round" spindle-dds
  PING=1 bash $PEERS/zenoh-perf.sh 1 16 2>/dev/null | grep rtt | tag "$round" zenoh
done
echo "wrote $OUT" >&2
