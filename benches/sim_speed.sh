#!/usr/bin/env bash
# Simulator speed, single-threaded: events/s on the M/M/c FIFO scenario and on
# the three-tier orf chain, median of 5 runs each, run back to back so both see
# the same machine. Usage: bash benches/sim_speed.sh
#
# `bash benches/sim_speed.sh --callgrind` instead counts instructions per event
# inside `tailor_sim::engine::run` with valgrind (repeatable on a noisy machine;
# shorter runs: 200,000 M/M/4 requests, 2,000 chain requests).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p tailor-cli
tailor=target/release/tailor

if [[ "${1:-}" == "--callgrind" ]]; then
  instructions_per_event() { # args: tailor sim arguments
    local out ir events
    out=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect='tailor_sim::engine::run' \
      "$tailor" sim "$@" --json "$out.json" >/dev/null 2>"$out"
    ir=$(grep -o 'Collected : [0-9]*' "$out" | awk '{print $3}')
    events=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["events"])' "$out.json")
    rm -f "$out" "$out.json"
    awk -v i="$ir" -v e="$events" 'BEGIN{printf "%d instructions, %d events, %.1f instructions/event\n", i, e, i/e}'
  }
  echo "M/M/4 FIFO:  $(instructions_per_event scenarios/mmc-fifo.toml --single --requests 200000 --warmup 0)"
  echo "orf chain:   $(instructions_per_event scenarios/tailclipper-chain-exp.toml --single --rps 270 --policy orf --requests 2000 --warmup 200)"
  exit 0
fi

median_rate() { # args: tailor sim arguments; prints "median_events/s events requests/s"
  local rates=() out
  for _ in 1 2 3 4 5; do
    out=$("$tailor" sim "$@" --json - | python3 -c 'import json,sys; r=json.load(sys.stdin)["runs"][0]; print(r["events_per_sec"], r["events"], r["arrivals_per_sec"])')
    rates+=("$out")
  done
  printf '%s\n' "${rates[@]}" | sort -g | sed -n 3p
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-44s %14s %12s %16s\n' scenario "M events/s" events "requests/s"
read -r r e q < <(median_rate scenarios/mmc-fifo.toml --single)
printf '%-44s %14.1f %12d %16.0f\n' "M/M/4 FIFO, rho 0.8 (scenarios/mmc-fifo.toml)" "$(awk -v r="$r" 'BEGIN{print r/1e6}')" "$e" "$q"
read -r r e q < <(median_rate scenarios/tailclipper-chain-exp.toml --single --rps 270 --policy orf)
printf '%-44s %14.1f %12d %16.0f\n' "3-tier chain, orf c=6 30us, 270 rps" "$(awk -v r="$r" 'BEGIN{print r/1e6}')" "$e" "$q"
read -r r e q < <(median_rate scenarios/tailclipper-chain-exp.toml --single --rps 270 --policy rr)
printf '%-44s %14.1f %12d %16.0f\n' "3-tier chain, rr 30us, 270 rps" "$(awk -v r="$r" 'BEGIN{print r/1e6}')" "$e" "$q"
