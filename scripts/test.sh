#!/usr/bin/env bash
# The project's whole test suite: lints, unit/integration/doc tests of every crate
# (multi-process shm and tcp runs included), and the loom models.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== clippy (workspace lints, warnings are errors)"
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== tests"
cargo test --workspace

echo "== loom models (LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:=2})"
# A separate target dir keeps the loom build from invalidating the normal one.
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="$LOOM_MAX_PREEMPTIONS" \
    cargo test -p loom-tests --release --target-dir target/loom --test models --test smc_models
