#!/usr/bin/env bash
# The project's three deterministic simulators over many seeds, in release builds: the
# multicast core (smc), the group (views) and the topic layer (dds). Each prints the
# first failing seed with the command that replays it, and stops there.
#   usage: bash scripts/sim-long.sh [SEEDS] [START]   (default 100000 seeds from 0)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}
S=${2:-0}
echo "== smc: $N seeds from $S" >&2
SMC_SIM_SEEDS=$N SMC_SIM_START=$S cargo test -q --release -p spindle-smc --test sim -- --nocapture
echo "== views: $N seeds" >&2
VIEWS_SIM_SEEDS=$N cargo test -q --release -p spindle-views --test sim -- --nocapture
echo "== dds: $N seeds from $S" >&2
DDS_SIM_SEEDS=$N DDS_SIM_START=$S cargo test -q --release -p spindle-dds --lib sim::tests::seeds -- --nocapture
