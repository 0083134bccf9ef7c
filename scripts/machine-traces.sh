#!/bin/bash
# The machine tier's traces for a fixed set of seeds and flags, one line per
# run: the flags, the seed and the SHA-256 of the trace (its "wall time"
# line left out, the only line that differs between runs). A change that
# must not change behaviour (a move of the machine's code) prints the same
# lines before and after; ARCHITECTURE.md keeps the baseline.
#
#   cargo build --release -p tenure-sim
#   bash scripts/machine-traces.sh [path/to/tenure-sim]
set -eu
sim=${1:-${CARGO_TARGET_DIR:-target}/release/tenure-sim}
flagsets=("" "--nodes 3" "--skew random:200" "--notify off" "--notify random --nodes 5")
for flags in "${flagsets[@]}"; do
  for seed in 0 1 2 3 4 5 6 7; do
    # shellcheck disable=SC2086
    hash=$("$sim" --seed "$seed" --trace $flags 2>&1 | grep -v '^wall time' | sha256sum | cut -c1-16)
    echo "${flags:-default} seed $seed $hash"
  done
done
