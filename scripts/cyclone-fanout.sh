#!/usr/bin/env bash
# Cyclone DDS ddsperf, one publisher -> SUBS subscribers of SIZE samples (reliable, loopback
# in a private network namespace, ../shared/bench/cyclone-lo.xml; past 20 participants on
# the host a copy of that config with room for them): each subscriber's median per-second
# rate (first and last second dropped), as one JSON line
# {"peer":"cyclonedds","size":...,"subscribers":SUBS,"reporting":N,"msgs_per_s":...,
#  "per_sub_msgs_per_s":...,"min_sub_msgs_per_s":...}, where msgs_per_s (= per_sub_msgs_per_s)
# is the sum of the medians over SUBS (a subscriber that reported nothing counts as 0) and
# min_sub_msgs_per_s is 0 unless all reported.
# usage (as root, with Debian's cyclonedds-tools): bash scripts/cyclone-fanout.sh [SECONDS] [SUBS] [SIZE]
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-5}
SUBS=${2:-3}
SIZE=${3:-1k}
cfg=$(mktemp --suffix=.xml)
trap 'rm -f "$cfg"' EXIT
sed "s|<MaxAutoParticipantIndex>20<|<MaxAutoParticipantIndex>$(( SUBS + 10 > 20 ? SUBS + 10 : 20 ))<|" \
  ../shared/bench/cyclone-lo.xml > "$cfg"
unshare -n bash -c '
  ip link set lo up
  export CYCLONEDDS_URI=file://'"$cfg"'
  d=$(mktemp -d)
  for i in $(seq '"$SUBS"'); do timeout '"$((T+30))"' ddsperf -TKS -D '"$((T+6))"' sub > $d/sub$i.txt 2>&1 & done
  sleep 2
  timeout '"$((T+25))"' ddsperf -TKS -D '"$T"' pub size '"$SIZE"' > $d/pub.txt 2>&1
  wait
  python3 - '"$SIZE"' '"$SUBS"' $d/sub*.txt <<"PY"
import json, re, statistics, sys
size = sys.argv[1]
size = int(size[:-1]) * 1024 if size[-1] in "kK" else int(size)
k = int(sys.argv[2])
meds = []
for f in sys.argv[3:]:
    # The rate in kS/s has two decimals: below 10 kS/s (large samples) it is
    # derived from the Mb/s that follows it instead.
    pat = r"rate (\d+(?:\.\d+)?) kS/s (\d+(?:\.\d+)?) Mb/s"
    r = [float(m.group(1)) * 1e3 if float(m.group(1)) >= 10 else float(m.group(2)) * 1e6 / 8 / size
         for m in (re.search(pat, l) for l in open(f)) if m]
    r = r[1:-1] or r
    if r:
        meds.append(statistics.median(r))
rnd = lambda x: round(x, 1) if x < 100 else round(x)
per = rnd(sum(meds) / k)
print(json.dumps({"peer": "cyclonedds", "size": size, "subscribers": k, "reporting": len(meds), "msgs_per_s": per,
                  "per_sub_msgs_per_s": per, "min_sub_msgs_per_s": rnd(min(meds) if len(meds) == k else 0)}))
PY
  rm -rf $d'
