#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, every crate's tests
# (unit, simulation, conformance, CLI end-to-end, real servers) and doctests.
# Installs and starts what the tests need; stops it again on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

# A shared target directory keeps repeat runs incremental (also across clones).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/tenure-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export CI="${CI:-false}"

step() { printf '\n==> %s\n' "$*"; }

if ! cargo nextest --version >/dev/null 2>&1; then
  step "installing cargo-nextest"
  cargo install --locked cargo-nextest
fi

if [ -x scripts/servers.sh ]; then
  step "starting real servers"
  # shellcheck source=/dev/null
  source scripts/servers.sh
  servers_start
  trap servers_stop EXIT
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

step "tests (nextest)"
cargo nextest run --workspace --all-features --locked --profile ci

step "doctests"
cargo test --workspace --all-features --locked --doc
