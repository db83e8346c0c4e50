# Sourced by the scripts that run tests under load (test-under-load.sh, soak.sh):
# starts two busy-loop processes that hold the cores, as a loaded 2-core machine
# would, and stops them when the sourcing script exits (also on Ctrl-C or a failure).
hogs=()
stop_hogs() {
    for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop_hogs EXIT
for _ in 1 2; do
    bash -c 'while :; do :; done' &
    hogs+=("$!")
done
