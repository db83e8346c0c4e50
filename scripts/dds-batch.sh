#!/usr/bin/env bash
# DDS single writes against write_batch, beside the raw multicast: for shm and tcp
# at 16 B, 128 B and 1 KB, each round runs `dds_perf --batch 0` (one write per
# sample), `dds_perf --batch 64` (write_batch of 64) and `bandwidth`, interleaved.
# One line per run: round, transport, size, what, samples (messages) per second,
# and for DDS whether every sample arrived in order. With ZENOH=1, each tcp size
# also runs Zenoh with its subscriber copying payloads out
# (READ=full ../shared/bench/zenoh-perf.sh).
# usage: [ZENOH=1] bash scripts/dds-batch.sh [ROUNDS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
T=${2:-3}
cargo build --release -q -p bench --bin dds_perf --bin bandwidth
for r in $(seq "$ROUNDS"); do
  for t in shm tcp; do
    for z in 16 128 1024; do
      for b in 0 64; do
        v=$(./target/release/dds_perf --transport $t --size $z --read full --seconds "$T" --batch $b --json 2>/dev/null | tail -1)
        rate=$(echo "$v" | grep -o '"min_samples_per_s":[0-9.]*' | cut -d: -f2)
        order=$(echo "$v" | grep -o '"all_received_in_order":[a-z]*' | cut -d: -f2)
        echo "$r $t $z dds-batch$b ${rate:-0} ${order:-false}"
      done
      if [ "${ZENOH:-0}" = 1 ] && [ $t = tcp ]; then
        v=$(READ=full bash ../shared/bench/zenoh-perf.sh "$T" $z 2>/dev/null | tail -1)
        echo "$r $t $z zenoh $(echo "$v" | grep -o '"msgs_per_s": [0-9.]*' | cut -d' ' -f2)"
      fi
      c=$(( z == 1024 ? 4000000 : 8000000 ))
      v=$(./target/release/bandwidth --transport $t --size $z --count $c --json 2>/dev/null | tail -1)
      echo "$r $t $z raw $(echo "$v" | grep -o '"msgs_per_s":[0-9.]*' | cut -d: -f2)"
    done
  done
done
