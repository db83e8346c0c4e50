#!/usr/bin/env bash
# The project's whole test suite: lints, the docs, the tree's shape, unit/integration/doc
# tests of every crate (multi-process shm and tcp runs included), and the loom models.
set -euo pipefail
cd "$(dirname "$0")/.."
# One full build; incremental caches would double the disk a clean run needs.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Each phase's header says how long the run has taken so far (where the time goes).
phase() { echo "== [$((SECONDS / 60))m$((SECONDS % 60))s] $*"; }

phase "clippy (workspace lints, warnings are errors)"
cargo clippy --workspace --all-targets --quiet -- -D warnings

phase "docs (warnings are errors: broken intra-doc links fail)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

phase "packages (each product crate packs, and builds from its package, in dependency order)"
# (No repository address is published yet: cargo's warning about it is expected.)
# Verified in a target dir of its own. Cargo takes a registry crate of a version it
# built before as built, and keeps registry sources unpacked under CARGO_HOME: the
# spindle crates of the previous run (there, and unpacked from the local registry
# the check makes) are removed first, or a changed crate would be checked stale.
pkg_target=target/package-check
rm -rf "$pkg_target"/debug/.fingerprint/spindle* "$pkg_target"/debug/deps/*spindle* \
    "$pkg_target"/debug/build/spindle* "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/spindle*-[0-9]*
if ! packed=$(cargo package --quiet --allow-dirty --target-dir "$pkg_target" -p spindle-sst -p spindle-smc \
    -p spindle-views -p spindle-tailwind -p spindle-dds -p spindle-kv -p spindle -p spindle-cli 2>&1); then
    echo "$packed"
    exit 1
fi

phase "tree (file sizes, import circles)"
python3 scripts/check-tree.py

phase "tests"
cargo test --workspace

phase "the rdma feature (sst's RDMA transport)"
if command -v cmake >/dev/null && command -v clang >/dev/null; then
    cargo clippy --workspace --all-targets --quiet --features spindle-sst/rdma -- -D warnings
    # Unit tests of the handshake and the signalling schedule; the transport suite
    # runs over rdma where a device exists and says why it skips where none does.
    cargo test -p spindle-sst --features rdma --lib --test transports rdma
else
    echo "skipped: building the rdma feature needs cmake and clang (apt install cmake clang)"
fi

phase "loom models (LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:=2})"
# A separate target dir keeps the loom build from invalidating the normal one.
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="$LOOM_MAX_PREEMPTIONS" \
    cargo test -p loom-tests --release --target-dir target/loom --test models --test smc_models
phase "done"
