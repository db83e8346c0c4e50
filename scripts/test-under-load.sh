#!/usr/bin/env bash
# The README's test command (scripts/test.sh) while two busy-loop processes hold the
# cores, as a loaded 2-core machine would: tests that assume timing fail here.
#
#   bash scripts/test-under-load.sh [RUNS]     (RUNS in a row, default 1)
#
# The hogs are started and stopped by this script (also on Ctrl-C or a failure);
# it prints how long each run took and stops at the first failing run.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-1}"
case "$runs" in '' | *[!0-9]*) echo "usage: $0 [RUNS]" >&2; exit 2 ;; esac

source scripts/busy-loops.sh
echo "== two busy loops hold the cores (pids ${hogs[*]})"

for i in $(seq 1 "$runs"); do
    start=$(date +%s)
    echo "== run $i of $runs under load: bash scripts/test.sh"
    if bash scripts/test.sh; then
        echo "== run $i passed under load in $(( $(date +%s) - start )) s"
    else
        echo "== run $i FAILED under load after $(( $(date +%s) - start )) s" >&2
        exit 1
    fi
done
echo "== $runs of $runs runs passed under load"
