#!/usr/bin/env bash
# Cyclone DDS ddsperf, one publisher -> SUBS subscribers of SIZE samples (reliable, loopback
# in a private network namespace, ../shared/bench/cyclone-lo.xml): the median of each
# subscriber's per-second rates (first and last second dropped), then their mean, as one
# JSON line {"peer":"cyclonedds","size":...,"subscribers":...,"msgs_per_s":...}.
# usage (as root, with Debian's cyclonedds-tools): bash scripts/cyclone-fanout.sh [SECONDS] [SUBS] [SIZE]
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-5}
SUBS=${2:-3}
SIZE=${3:-1k}
unshare -n bash -c '
  ip link set lo up
  export CYCLONEDDS_URI=file://'"$PWD"'/../shared/bench/cyclone-lo.xml
  d=$(mktemp -d)
  for i in $(seq '"$SUBS"'); do timeout '"$((T+20))"' ddsperf -TKS -D '"$((T+4))"' sub > $d/sub$i.txt 2>&1 & done
  sleep 1
  timeout '"$((T+15))"' ddsperf -TKS -D '"$T"' pub size '"$SIZE"' > $d/pub.txt 2>&1
  wait
  python3 - '"$SIZE"' $d/sub*.txt <<"PY"
import json, re, statistics, sys
size = sys.argv[1]
size = int(size[:-1]) * 1024 if size[-1] in "kK" else int(size)
meds = []
for f in sys.argv[2:]:
    r = [float(m.group(1)) * 1e3 for m in (re.search(r"rate (\d+(?:\.\d+)?) kS/s", l) for l in open(f)) if m]
    r = r[1:-1] or r
    if r:
        meds.append(statistics.median(r))
print(json.dumps({"peer": "cyclonedds", "size": size, "subscribers": len(sys.argv) - 2, "msgs_per_s": round(sum(meds) / max(len(meds), 1))}))
PY
  rm -rf $d'
