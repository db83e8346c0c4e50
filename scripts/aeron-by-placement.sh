#!/usr/bin/env bash
# One writer -> one reader on shm against Aeron IPC, each measurement bracketed by the
# vCPUs' cache-line round trip (`core_rtt`), so that rounds are compared within one
# placement of the guest's CPUs on the host. Per round and size: core_rtt, Aeron IPC
# (../shared/bench/aeron-perf.sh), core_rtt, `bandwidth --transport shm --nodes 2
# --senders one`, core_rtt, `dds_perf --transport shm --read full`, core_rtt.
# A measurement's placement is "near" if both probes around it are below THRESHOLD_NS,
# "far" if both are above, "mixed" otherwise; the summary gives each system's median
# per placement with the ratios of those medians, and raw/Aeron and DDS/Aeron per
# round for the rounds whose three measurements share one placement.
# usage: bash scripts/aeron-by-placement.sh [ROUNDS] [SECONDS] [OUT]
#   env: SIZES (default "128 1024"), THRESHOLD_NS (default 200), AERON (the script,
#   default ../shared/bench/aeron-perf.sh), AERON_BUILD (passed on), WAIT_NEAR=S: before
#   each size of a round, probe every half second for up to S seconds until the placement
#   is near (the near placement came in short stretches here; this catches their start).
#   ONE_CPU=1: after the four probes, the same three runs again with every thread on CPU 0
#   (`taskset -c 0`), where no cache line crosses between the vCPUs whatever the
#   placement: the summary adds their medians and their ratios to Aeron on both CPUs.
#   DDS_BATCHING=1: a fourth run after the DDS one (and a fifth probe): `dds_perf
#   --batching` (the writer's batching on), "ddsb" in the output; with ONE_CPU, on CPU 0
#   as well.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-6}
T=${2:-2}
OUT=${3:-bench/results/aeron-by-placement.jsonl}
SIZES=${SIZES:-128 1024}
THRESHOLD_NS=${THRESHOLD_NS:-200}
AERON=${AERON:-../shared/bench/aeron-perf.sh}
[ -f "$AERON" ] || { echo "no Aeron script at $AERON (set AERON)" >&2; exit 2; }
cargo build --release -q -p bench --bin bandwidth --bin dds_perf --bin core_rtt
B=target/release
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
num() { python3 -c 'import json,sys
for l in sys.stdin:
    l = l.strip()
    if l.startswith("{"):
        d = json.loads(l)
        if sys.argv[1] in d: print(d[sys.argv[1]]); break' "$1"; }
rtt() { "$B/core_rtt" --json "$@" | num rtt_ns; }
# The three systems at $size for $T seconds, each run under "$@" (nothing, or
# `taskset -c 0`); each prints its rate, or nothing if the run gave none.
aeron_run() { CHANNELS=ipc "$@" bash "$AERON" "$T" "$size" 2>/dev/null | num msgs_per_s || true; }
raw_run() {
  "$@" "$B/bandwidth" --transport shm --nodes 2 --senders one --size "$size" \
    --count $((T * (size > 512 ? 3000000 : 5000000))) --json 2>/dev/null | num msgs_per_s || true
}
# DDS_X: extra arguments of dds_perf (set for the batching run).
DDS_X=""
dds_run() {
  "$@" "$B/dds_perf" --transport shm --size "$size" --read full --seconds "$T" --json $DDS_X 2>/dev/null |
    num samples_per_s_per_sub || true
}

for round in $(seq "$ROUNDS"); do
  for size in $SIZES; do
    echo "== round $round of $ROUNDS, $size B" >&2
    if [ -n "${WAIT_NEAR:-}" ]; then
      until_t=$((SECONDS + WAIT_NEAR))
      while [ $SECONDS -lt $until_t ] &&
        python3 -c 'import sys; sys.exit(float(sys.argv[1]) < float(sys.argv[2]))' \
          "$(rtt --probes 2 --round-trips 5000)" "$THRESHOLD_NS"; do
        sleep 0.5
      done
    fi
    r1=$(rtt)
    a=$(aeron_run)
    r2=$(rtt)
    raw=$(raw_run)
    r3=$(rtt)
    dds=$(dds_run)
    r4=$(rtt)
    ddsb="" r5=""
    if [ -n "${DDS_BATCHING:-}" ]; then
      DDS_X=--batching
      ddsb=$(dds_run)
      DDS_X=""
      r5=$(rtt)
    fi
    a1="" raw1="" dds1="" ddsb1=""
    if [ -n "${ONE_CPU:-}" ]; then
      a1=$(aeron_run taskset -c 0)
      raw1=$(raw_run taskset -c 0)
      dds1=$(dds_run taskset -c 0)
      if [ -n "${DDS_BATCHING:-}" ]; then
        DDS_X=--batching
        ddsb1=$(dds_run taskset -c 0)
        DDS_X=""
      fi
    fi
    python3 -c 'import json,sys
r, s, a, raw, dds, ddsb, a1, raw1, dds1, ddsb1 = sys.argv[1:11]
rtts = [float(x) for x in sys.argv[11:] if x]
f = lambda x: float(x) if x else None
row = {"round": int(r), "size": int(s), "aeron": f(a), "raw": f(raw), "dds": f(dds),
       "aeron_one": f(a1), "raw_one": f(raw1), "dds_one": f(dds1), "rtt_ns": rtts}
if ddsb or ddsb1:
    row.update({"ddsb": f(ddsb), "ddsb_one": f(ddsb1)})
print(json.dumps(row))' \
      "$round" "$size" "$a" "$raw" "$dds" "$ddsb" "$a1" "$raw1" "$dds1" "$ddsb1" "$r1" "$r2" "$r3" "$r4" "$r5" |
      tee -a "$OUT"
  done
done

python3 - "$OUT" "$THRESHOLD_NS" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
limit = float(sys.argv[2])
# Each measurement is bracketed by two probes: Aeron by the 1st and 2nd, raw by the
# 2nd and 3rd, DDS by the 3rd and 4th, DDS with batching (if run) by the 4th and 5th.
BRACKET = {"aeron": (0, 1), "raw": (1, 2), "dds": (2, 3)}
if any(r.get("ddsb") for r in rows):
    BRACKET["ddsb"] = (3, 4)
def placement(r, system):
    a, b = (r["rtt_ns"][i] for i in BRACKET[system])
    return "near" if max(a, b) < limit else "far" if min(a, b) > limit else "mixed"
print(f"placement of a measurement: near if both core_rtt probes around it are < {limit:.0f} ns, "
      "far if both are above, else mixed")
med = lambda v: statistics.median(v) if v else None
for size in sorted({r["size"] for r in rows}):
    for p in ("near", "far"):
        rate = {k: [r[k] for r in rows if r["size"] == size and r.get(k) and placement(r, k) == p] for k in BRACKET}
        if not any(rate.values()):
            continue
        parts = [f"{k} {med(v) / 1e6:.2f} M ({len(v)})" for k, v in rate.items() if v]
        line = f"{size} B {p}: medians " + ", ".join(parts)
        if rate["aeron"]:
            for k in [k for k in BRACKET if k != "aeron"]:
                if rate[k]:
                    line += f"; {k}/Aeron {med(rate[k]) / med(rate['aeron']):.2f}"
        print(line)
    # Rounds whose three measurements all fell in one placement, ratio per round.
    for p in ("near", "far"):
        same = [r for r in rows if r["size"] == size and r["aeron"] and all(placement(r, k) == p for k in BRACKET)]
        if same:
            show = lambda k: " ".join(f"{r[k] / r['aeron']:.2f}" for r in same if r.get(k))
            print(f"{size} B, rounds wholly {p} ({len(same)}): " +
                  "; ".join(f"{k}/Aeron {show(k)}" for k in BRACKET if k != "aeron"))
    # Every thread on CPU 0 (ONE_CPU=1): no placement to tell apart.
    one = {k: [r[k + "_one"] for r in rows if r["size"] == size and r.get(k + "_one")] for k in BRACKET}
    if any(one.values()):
        parts = [f"{k} {med(v) / 1e6:.2f} M ({len(v)})" for k, v in one.items() if v]
        line = f"{size} B on CPU 0: medians " + ", ".join(parts)
        if one["aeron"]:
            line += "; against Aeron on CPU 0: " + ", ".join(
                f"{k} {med(one[k]) / med(one['aeron']):.2f}" for k in BRACKET if k != "aeron" and one[k])
        print(line)
        for p in ("near", "far"):
            both = [r for r in rows if r["size"] == size and r["aeron"] and placement(r, "aeron") == p]
            show = lambda k: " ".join(f"{r[k + '_one'] / r['aeron']:.2f}" for r in both if r.get(k + "_one"))
            if both and any(show(k) for k in BRACKET if k != "aeron"):
                print(f"{size} B on CPU 0 against Aeron on both CPUs ({p}), per round: " +
                      "; ".join(f"{k} {show(k)}" for k in BRACKET if k != "aeron"))
EOF
