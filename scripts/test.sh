#!/usr/bin/env bash
# Runs every test of the project. Set TAILOR_LONG_TESTS=1 for the long
# statistical oracle runs (10x the requests; CI does).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --release --locked 2>&1
