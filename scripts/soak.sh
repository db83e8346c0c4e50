#!/usr/bin/env bash
# One integration test binary run again and again while two busy-loop processes hold
# the cores: a failure that a single run meets by chance shows up here, with its
# output kept.
#
#   bash scripts/soak.sh PACKAGE TEST [RUNS]     (default 50 runs)
#   e.g. bash scripts/soak.sh bench tailwind_failover 200
#
# Each run's line (number, ok or FAILED, seconds) goes to stdout; a failed run's
# output is kept in target/soak/TEST.N.log (every run's with SOAK_KEEP=1, to count
# how often a rare path ran). It goes on past failures and ends with the count; the
# exit code is 1 if any run failed. Each run is bounded (10 min).
set -euo pipefail
cd "$(dirname "$0")/.."
pkg="${1:-}"; test="${2:-}"; runs="${3:-50}"
if [ -z "$pkg" ] || [ -z "$test" ]; then echo "usage: $0 PACKAGE TEST [RUNS]" >&2; exit 2; fi
case "$runs" in '' | *[!0-9]*) echo "usage: $0 PACKAGE TEST [RUNS]" >&2; exit 2 ;; esac

bin=$(cargo test -q -p "$pkg" --test "$test" --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$test" | tail -1) || true
if [ -z "$bin" ]; then echo "no test binary $test in package $pkg" >&2; exit 2; fi
dir="target/soak"; mkdir -p "$dir"
# The test runs from its package's directory, as cargo runs it.
pkgdir=$(cargo metadata --no-deps --format-version 1 \
    | python3 -c 'import json,sys,os; m=json.load(sys.stdin); print(next(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"]==sys.argv[1]))' "$pkg")

source scripts/busy-loops.sh
echo "== $test ($bin), $runs runs beside two busy loops"
failed=0
for i in $(seq 1 "$runs"); do
    start=$(date +%s)
    log="$dir/$test.$i.log"
    if (cd "$pkgdir" && timeout 600 "$bin") > "$log" 2>&1; then
        [ "${SOAK_KEEP:-0}" = 1 ] || rm -f "$log"
        echo "$i ok $(( $(date +%s) - start ))s"
    else
        failed=$((failed + 1))
        echo "$i FAILED $(( $(date +%s) - start ))s (output: $log)"
    fi
done
echo "== $((runs - failed)) of $runs runs passed"
[ "$failed" -eq 0 ]
