#!/usr/bin/env bash
# The polyglot chain in one command: builds what it runs (tailor, the Rust example
# service; the harness builds the Go tier), then measures edge → Go → Python → Rust
# under each ordering next to the Rust-only chain (docs/sdk.md, "The polyglot chain").
# Flags go to the harness, e.g. `bash sdk/polyglot/run.sh --seeds 1 --loads 0.7`.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p tailor-cli -p tailor-bench --bin tailor --bin polyglot 2>&1
cargo build --release -p tailor-runtime --example service 2>&1
exec target/release/polyglot "$@"
