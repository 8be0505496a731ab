#!/usr/bin/env bash
# Tailor's simulator against the TailGuard authors' C++ simulator on their own
# fan-out workload: Masstree task times, N = 100 one-core servers, fan-outs
# 1/10/100 with P(k) ∝ 1/k, TF-EDFQ (their `new_query_budget`), p99 SLO 0.8 ms,
# 400,000 queries at load 0.3. Whole processes, runs alternating, wall clock.
#
# Usage: bash benches/tailguard_vs_cpp.sh TAILGUARD_CHECKOUT [RUNS] [TAILOR_BINARY] [OLD_TAILOR_BINARY]
#   TAILGUARD_CHECKOUT: a clone of https://github.com/zjwang68/Tailguard (read only;
#   it is copied and built with g++ -O2 in a temporary directory).
#   OLD_TAILOR_BINARY: another build of tailor, timed in the same rounds (before/after).
# Their parameters are #defines in query.h; the README's fan-out case sets
# ARATE = x·111/3/0.176 for load x and PCT = {100/111, 110/111, 1}; RTAIL is the SLO.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: $0 TAILGUARD_CHECKOUT [RUNS] [TAILOR_BINARY]}
runs=${2:-7}
tailor=${3:-target/release/tailor}
old=${4:-}
[[ -x $tailor ]] || cargo build --release -q -p tailor-cli
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src"/*.cpp "$src"/*.h "$src"/Mastree_cdf "$src"/RUT_Mastree "$work"/
python3 - "$work/query.h" <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
for old, new in [
    ("#define ARATE  0.7*100./63.1", "#define ARATE  (0.3*111./3./0.176)"),
    ("double RTAIL[CLS]={20.,20.,20.};", "double RTAIL[CLS]={0.8,0.8,0.8};"),
    ("double PCT[CLS]={0.1,0.4, 1.0};", "double PCT[CLS]={100./111.,110./111., 1.0};"),
]:
    if new in s:
        continue  # a checkout already set to the fan-out case
    if old not in s:
        sys.exit(f"{p}: expected {old!r}; the authors' file changed, update this script")
    s = s.replace(old, new)
open(p, "w").write(s)
EOF
(cd "$work" && g++ -O2 -o tailguard tailguard.cpp)
ours=("$tailor" sim scenarios/seeds/tailguard/fig04a-masstree.toml --single --policy edf
  --utilization 0.3 --requests 400000 --warmup 0)
echo "C++:    (cd $work && ./tailguard)"
echo "Tailor: ${ours[*]}"
[[ -z $old ]] || echo "old Tailor: $old ${ours[*]:1}"
wall() { # prints the wall seconds of one run of its arguments
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.4f\n", b - a}'
}
cpp=() tl=() ol=()
for ((i = 0; i < runs; i++)); do
  cpp+=("$(cd "$work" && wall ./tailguard)")
  tl+=("$(wall "${ours[@]}")")
  [[ -z $old ]] || ol+=("$(wall "$old" "${ours[@]:1}")")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END{print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
echo "C++ runs (s):    ${cpp[*]}"
echo "Tailor runs (s): ${tl[*]}"
mc=$(median "${cpp[@]}") mt=$(median "${tl[@]}")
awk -v c="$mc" -v t="$mt" 'BEGIN{printf "medians: C++ %.3f s, Tailor %.3f s; C++ / Tailor = %.2f\n", c, t, c/t}'
if [[ -n $old ]]; then
  echo "old Tailor runs (s): ${ol[*]}"
  mo=$(median "${ol[@]}")
  awk -v c="$mc" -v o="$mo" -v t="$mt" \
    'BEGIN{printf "old Tailor median %.3f s; C++ / old = %.2f; old / Tailor = %.2f\n", o, c/o, o/t}'
fi
