#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, every crate's tests
# (unit, simulation, conformance, CLI end-to-end, real servers) and doctests.
# Installs and starts what the tests need; stops it again on exit.
#
# CI=true is the default here: a test whose real server is missing then
# fails instead of skipping, so a green run means every real-server test
# ran. Export CI=false to let such tests skip (a machine without the
# servers, while iterating).
set -euo pipefail
cd "$(dirname "$0")/.."

# A target directory outside the checkout keeps repeat runs incremental
# (a fresh clone of the same path included). One per checkout path: cargo
# names and fingerprints the workspace's own crates by their paths within
# the workspace and by file times, so two checkouts of different commits
# sharing one directory could each link the other's build of a crate whose
# sources look older.
checkout_key=$(pwd -P | cksum | cut -d' ' -f1)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/tenure-target/$checkout_key}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export CI="${CI:-true}"

# Each step prints the seconds the run has taken so far: where CI's time goes.
step() { printf '\n==> [%ss] %s\n' "$SECONDS" "$*"; }

# Sourced, not executed: a lost executable bit must not turn into skipped
# servers. The stop trap goes in before anything starts, so that a start
# that fails half-way leaves nothing running.
# shellcheck source=scripts/servers.sh
source scripts/servers.sh
trap servers_stop EXIT

if command -v rustup >/dev/null; then
  step "rustup component add rustfmt clippy"
  rustup component add rustfmt clippy
fi

if ! cargo nextest --version >/dev/null 2>&1; then
  step "installing cargo-nextest"
  cargo install --locked cargo-nextest
fi

step "starting real servers"
servers_start
servers_check

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

# Broken intra-doc links are warnings to rustdoc: refused here. (The CLI's
# binary is named like the library, so its docs would overwrite them.)
step "cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --locked --exclude tenure-cli

# The declared rust-version of every crate against what its locked
# dependencies declare (no second toolchain can be installed here; see the
# script for what this does and does not check).
step "MSRV: declared rust-version against the locked dependencies"
python3 scripts/msrv.py

# The public API of the tenure crate against the committed listing
# (api/tenure.txt): growing the surface is a decision made in a diff.
step "public API of tenure against api/tenure.txt"
python3 scripts/public_api.py

# Every publishable crate packs (files, metadata, path dependencies that
# carry a version), in dependency order: `--workspace` resolves each
# against the workspace's packages before any is on crates.io. Not
# verified by a build of each tarball (that is the workspace build above,
# from the same files).
step "cargo package (every publishable crate)"
cargo package --workspace --locked --no-verify --allow-dirty \
  --exclude tenure-sim --exclude tenure-model --exclude tenure-kube-testserver

step "tests (nextest)"
cargo nextest run --workspace --all-features --locked --profile ci

step "doctests"
cargo test --workspace --all-features --locked --doc

step "done"
