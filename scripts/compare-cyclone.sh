#!/usr/bin/env bash
# Side-by-side throughput: Eclipse Cyclone DDS (ddsperf, reliable, 1 pub -> 1 sub,
# loopback) and spindle's bandwidth benchmark (2 nodes, 1 sender, ordered), back to
# back on this machine. Needs root (a private network namespace for Cyclone) and
# Debian's cyclonedds-tools. Prints one JSON line per measurement.
# usage: bash scripts/compare-cyclone.sh [SECONDS_PER_CYCLONE_SIZE]
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-10}
command -v ddsperf >/dev/null || { echo "installing cyclonedds-tools" >&2; apt-get install -y -qq cyclonedds-tools >/dev/null; }
cargo build --release -q -p bench
unshare -n bash ../shared/bench/cyclone-ddsperf.sh "$T" 128 1k 10k
for t in shm tcp; do
  for size in 1 128 1024 10240; do
    count=$(( size >= 10240 ? 200000 : 2000000 ))
    ./target/release/bandwidth --transport $t --nodes 2 --senders one --size $size \
      --count $count --window 256 --mode ordered --baseline --json
  done
done
