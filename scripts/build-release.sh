#!/usr/bin/env bash
# Builds the release `tailor` with profile-guided optimisation (PGO): an instrumented build,
# a training run of the proxies, the simulator and the runtime (scripts/pgo-train.py), then
# the build that uses the profile. The result is target/pgo/optimized/release/tailor.
#
# Why: laid out and inlined for the paths the training runs, the sidecar takes 17-23% less
# CPU per request than in `cargo build --release` (docs/results/proxy.md, "Cost"). Deploy
# this build; `cargo build --release` stays the quick one for development.
#
#   bash scripts/build-release.sh            # ~10 min on 2 CPUs (two full builds)
#   TRAIN_SECONDS=40 bash scripts/build-release.sh
#
# Needs llvm-profdata of rustc's LLVM: `rustup component add llvm-tools` (done here when
# rustup is there), and python3 for the training run. Everything it writes is under target/pgo.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=$root/target/pgo

host=$(rustc -vV | sed -n 's/^host: //p')
profdata=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$profdata" ] && command -v rustup >/dev/null; then
  echo "build-release: installing llvm-profdata (rustup component add llvm-tools)"
  rustup component add llvm-tools
fi
if [ ! -x "$profdata" ]; then
  echo "build-release: $profdata is missing: install the llvm-tools component of this toolchain" \
    "(rustup component add llvm-tools); another LLVM's llvm-profdata cannot read rustc's profiles" >&2
  exit 1
fi
command -v python3 >/dev/null || { echo "build-release: python3 is needed for the training run" >&2; exit 1; }

echo "build-release: 1/4 instrumented build (target/pgo/instrumented)"
rm -rf "$out/raw"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$out/raw" \
  cargo build --release --locked -p tailor-cli --target-dir "$out/instrumented"

echo "build-release: 2/4 training run"
LLVM_PROFILE_FILE="$out/raw/%p-%m.profraw" \
  python3 scripts/pgo-train.py --tailor "$out/instrumented/release/tailor" \
  --seconds "${TRAIN_SECONDS:-20}" --out "$out/train"

echo "build-release: 3/4 merging $(ls "$out/raw" | wc -l) profiles"
"$profdata" merge -o "$out/tailor.profdata" "$out/raw"

echo "build-release: 4/4 optimised build (target/pgo/optimized)"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$out/tailor.profdata -Cllvm-args=-pgo-warn-missing-function=false" \
  cargo build --release --locked -p tailor-cli --target-dir "$out/optimized"

echo "build-release: done: $out/optimized/release/tailor"
echo "build-release: its container image (the Helm chart's): python3 scripts/build-image.py"
