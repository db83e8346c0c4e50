#!/usr/bin/env bash
# The longer run of the sharded store's kill check (bench/tests/kv_kill.rs runs a
# few rounds): ROUNDS migrations over shm and over tcp, each with a shard primary
# killed (SIGKILL) in the middle of the pull and started again. One JSON line per
# round on stderr, the summary last; stops at the first failing round.
#   usage: bash scripts/kv-chaos.sh [ROUNDS] [SEED]   (default 50 rounds, seed 1)
set -euo pipefail
cd "$(dirname "$0")/.."
R=${1:-50}
S=${2:-1}
cargo build -q --release -p bench --bin kv_chaos
for t in shm tcp; do
    echo "== $t: $R rounds, seed $S" >&2
    target/release/kv_chaos --transport "$t" --rounds "$R" --seed "$S"
done
