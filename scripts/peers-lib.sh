# Sourced by the peer comparisons (compare-peers.sh, one-host.sh): the output file, the
# build, whether Cyclone DDS can run, and `tag`. Expects OUT set; sets have_cyclone.
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
cargo build --release -q -p bench --bin bandwidth --bin dds_perf
have_cyclone=1
if ! command -v ddsperf >/dev/null; then
  apt-get install -y -qq cyclonedds-tools >/dev/null 2>&1 || { have_cyclone=0; echo "note: no ddsperf; Cyclone left out" >&2; }
fi
[ "$(id -u)" = 0 ] || { have_cyclone=0; echo "note: not root; Cyclone (needs unshare -n) left out" >&2; }

# Appends stdin's JSON lines to OUT with the round (argument 1) and the system's name
# (argument 2).
tag() {
  python3 -c '
import json, sys
for l in sys.stdin:
    l = l.strip()
    if l.startswith("{"):
        d = json.loads(l); d["round"] = int(sys.argv[1]); d["system"] = sys.argv[2]
        print(json.dumps(d))' "$1" "$2" | tee -a "$OUT"
}
