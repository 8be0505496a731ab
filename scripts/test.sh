#!/usr/bin/env bash
# Runs every test of the project. Set TAILOR_LONG_TESTS=1 for the long
# statistical oracle runs (10x the requests; CI does).
# `--build-only` compiles the Rust tests and stops (CI compiles while it installs the
# other tools, then runs this script again).
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
case "${1:-}" in
  "") ;;
  --build-only) build_only=1 ;;
  *) echo "scripts/test.sh: unknown argument '$1' (the only one is --build-only)" >&2; exit 2 ;;
esac
# Tests build everything, test binaries included, with the `release` profile (check with
# `cargo test --release -v`: thin LTO, one codegen unit; cargo does not use `bench` here),
# and thin-linking the whole dependency graph into each of ~70 test binaries was most of the
# build (~15 s of wall time per binary, however small; ~1 s without; docs/results/build.md). Tests compare ratios, not absolute speed,
# so they build without LTO and in 16 codegen units; `cargo build --release`, the demo and
# the benchmarks keep the shipped profile (the two builds sit side by side in target/release).
export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
cargo_test=(cargo test --workspace --release --locked)
if [ "$build_only" = 1 ]; then
  exec "${cargo_test[@]}" --no-run 2>&1
fi
"${cargo_test[@]}" 2>&1
# The Go and Python context codecs pass the same vectors as core
# (testdata/context). -count=1 because go caches test results and does not
# notice a change to the vectors, which live outside the Go module.
# The Go SDK: the core module (codec, gate, net/http middleware, kernel
# registration: its agent test uses target/release/tailor, which the cargo
# test above builds) and its sub-modules, kept apart so that the core stays free
# of grpc-go and OpenTelemetry (modules come from the Go module proxy).
(cd sdk/go && go test -count=1 ./... 2>&1)
(cd sdk/go/tailorgrpc && go test -count=1 ./... 2>&1)
(cd sdk/go/tailorotel && go test -count=1 ./... 2>&1)
python3 -m pytest -q sdk/python 2>&1
# The container image the chart runs (scripts/build-image.py), built from the test build:
# an OCI archive skopeo reads, and (as root) the sidecar served from its files alone.
TAILOR_BIN="$PWD/target/release/tailor" python3 -m pytest -q scripts/tests 2>&1
# The training run of the PGO release build (scripts/build-release.sh) still drives every
# proxy path it trains without a failed request, and the simulator runs it trains.
python3 scripts/pgo-train.py --tailor target/release/tailor --seconds 3 --no-demo 2>&1
# The Kubernetes chart and manifests: helm lint/template and API-schema validation
# (skips with a message when helm or kubernetes-validate is missing, except in CI).
bash scripts/k8s-validate.sh 2>&1
