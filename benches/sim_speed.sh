#!/usr/bin/env bash
# Simulator speed, single-threaded: events/s on the M/M/c FIFO scenario and on
# the three-tier orf chain, median of 5 runs each, run back to back so both see
# the same machine. Usage: bash benches/sim_speed.sh
#
# `bash benches/sim_speed.sh --callgrind` instead counts instructions per event
# inside `tailor_sim::engine::run` with valgrind (repeatable on a noisy machine;
# shorter runs: 200,000 M/M/4 requests, 2,000 chain requests).
#
# `bash benches/sim_speed.sh --against OLD_TAILOR` compares this tree's build
# with another `tailor` binary (e.g. one built from an older commit), side by
# side: old and new runs alternate, 5 of each per scenario, medians printed.
# With --callgrind as well, it counts instructions for both.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p tailor-cli
tailor=target/release/tailor

callgrind=0
against=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --callgrind) callgrind=1 ;;
    --against) against="$2"; shift ;;
    *) echo "usage: $0 [--callgrind] [--against OLD_TAILOR]" >&2; exit 2 ;;
  esac
  shift
done
binaries=("$tailor")
[[ -n "$against" ]] && binaries=("$against" "$tailor")

if [[ $callgrind == 1 ]]; then
  instructions_per_event() { # args: binary, tailor sim arguments
    local bin=$1 out ir events
    shift
    out=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect='tailor_sim::engine::run' \
      "$bin" sim "$@" --json "$out.json" >/dev/null 2>"$out"
    ir=$(grep -o 'Collected : [0-9]*' "$out" | awk '{print $3}')
    events=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["events"])' "$out.json")
    rm -f "$out" "$out.json"
    awk -v i="$ir" -v e="$events" 'BEGIN{printf "%d instructions, %d events, %.1f instructions/event\n", i, e, i/e}'
  }
  for bin in "${binaries[@]}"; do
    echo "$bin"
    echo "  M/M/4 FIFO:  $(instructions_per_event "$bin" scenarios/mmc-fifo.toml --single --requests 200000 --warmup 0)"
    echo "  orf chain:   $(instructions_per_event "$bin" scenarios/tailclipper-chain-exp.toml --single --rps 270 --policy orf --requests 2000 --warmup 200)"
  done
  exit 0
fi

one_rate() { # args: binary, tailor sim arguments; prints "events/s events requests/s"
  local bin=$1
  shift
  "$bin" sim "$@" --json - | python3 -c 'import json,sys; r=json.load(sys.stdin)["runs"][0]; print(r["events_per_sec"], r["events"], r["arrivals_per_sec"])'
}

median_rates() { # args: tailor sim arguments; one line per binary: "median_events/s events requests/s"
  local -A rates=()
  for _ in 1 2 3 4 5; do
    for bin in "${binaries[@]}"; do
      rates[$bin]+="$(one_rate "$bin" "$@")"$'\n'
    done
  done
  for bin in "${binaries[@]}"; do
    printf '%s' "${rates[$bin]}" | sort -g | sed -n 3p
  done
}

print_rates() { # args: label, tailor sim arguments
  local label=$1 i=0 r e q
  shift
  while read -r r e q; do
    local who=""
    [[ ${#binaries[@]} -gt 1 ]] && who=$([[ $i == 0 ]] && echo " [old]" || echo " [new]")
    printf '%-50s %14.1f %12d %16.0f\n' "$label$who" "$(awk -v r="$r" 'BEGIN{print r/1e6}')" "$e" "$q"
    i=$((i + 1))
  done < <(median_rates "$@")
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
[[ -n "$against" ]] && echo "old: $against; new: $tailor (runs alternate)"
printf '%-50s %14s %12s %16s\n' scenario "M events/s" events "requests/s"
print_rates "M/M/4 FIFO, rho 0.8 (scenarios/mmc-fifo.toml)" scenarios/mmc-fifo.toml --single
print_rates "3-tier chain, orf c=6 30us, 270 rps" scenarios/tailclipper-chain-exp.toml --single --rps 270 --policy orf
print_rates "3-tier chain, rr 30us, 270 rps" scenarios/tailclipper-chain-exp.toml --single --rps 270 --policy rr
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
