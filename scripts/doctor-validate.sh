#!/usr/bin/env bash
# Validates `tailor doctor` on servers not written in this project (docs/doctor.md):
# memcached and nginx from Debian, held at an open-loop Poisson load on loopback. Each source of
# Tales' Table 1 that this machine can produce is injected; for each run the script records
# what `tailor doctor` names and measured/ideal at p99 and p99.9 (`tailor doctor --ideal`),
# before and after the fix. Needs root (chrt -f, apt-get) and 2 CPUs: the servers run on CPU 1,
# the load generator on CPU 0. About 2 minutes.
#
#   bash scripts/doctor-validate.sh            # results in target/doctor-validate/results.md
#   RUN_SECONDS=10 bash scripts/doctor-validate.sh
#   SKIP_BUILD=1 bash scripts/doctor-validate.sh   # with target/release/{tailor,openloop} as built
#   ROUNDS=3 bash scripts/doctor-validate.sh       # every scenario 3 times: medians and ranges
#
# One 6 s run per row moves by up to 2x from one invocation to the next on this VM (the
# table in docs/results/doctor.md): judge a fix on several rounds.
set -euo pipefail
cd "$(dirname "$0")/.."

RUN_SECONDS=${RUN_SECONDS:-6}
ROUNDS=${ROUNDS:-1}
ROUND=1
RHO=${RHO:-0.4}
SERVER_CPU=1
CLIENT_CPU=0
OUT=target/doctor-validate
MC_PORT=21987
NGINX_PORT=21988

if [ "$(id -u)" != 0 ]; then echo "doctor-validate: needs root (chrt -f on the servers, apt-get)"; exit 2; fi
if [ "$(nproc)" -lt 2 ]; then echo "doctor-validate: needs 2 CPUs"; exit 2; fi
if ! command -v memcached >/dev/null || ! command -v nginx >/dev/null; then
    apt-get install -y memcached nginx-light >/dev/null || apt-get install -y memcached nginx >/dev/null
fi
[ -n "${SKIP_BUILD:-}" ] || chrt -i 0 cargo build --release -p tailor-cli -p tailor-bench --bin tailor --bin openloop
TAILOR=$PWD/target/release/tailor
OPENLOOP=$PWD/target/release/openloop
rm -rf "$OUT" && mkdir -p "$OUT"
: > "$OUT/runs.jsonl"

STARTED=()
cleanup() { for p in "${STARTED[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

wait_port() { # readiness: the port accepts a connection
    for _ in $(seq 1 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
    echo "doctor-validate: nothing listens on port $1" >&2; return 1
}
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

SERVER_PID=
start_memcached() { # $1 = worker threads
    taskset -c $SERVER_CPU memcached -u nobody -l 127.0.0.1 -p $MC_PORT -U 0 -t "$1" -c 4096 &
    SERVER_PID=$!; STARTED+=("$SERVER_PID"); wait_port $MC_PORT
}
start_nginx() { # $1 = workers, $2 = "reuseport" or ""
    mkdir -p "$OUT/nginx"
    cat > "$OUT/nginx/nginx.conf" <<CONF
worker_processes $1;
daemon off;
pid $PWD/$OUT/nginx/nginx.pid;
error_log $PWD/$OUT/nginx/error.log;
events { worker_connections 4096; accept_mutex off; }
http {
    access_log off;
    client_body_temp_path $PWD/$OUT/nginx/body;
    proxy_temp_path $PWD/$OUT/nginx/proxy;
    fastcgi_temp_path $PWD/$OUT/nginx/fastcgi;
    uwsgi_temp_path $PWD/$OUT/nginx/uwsgi;
    scgi_temp_path $PWD/$OUT/nginx/scgi;
    server { listen 127.0.0.1:$NGINX_PORT $2; location / { return 200 "ok\n"; } }
}
CONF
    taskset -c $SERVER_CPU nginx -c "$PWD/$OUT/nginx/nginx.conf" -p "$PWD/$OUT/nginx" &
    SERVER_PID=$!; STARTED+=("$SERVER_PID"); wait_port $NGINX_PORT
}
to_fifo() { # every thread of the server's processes to SCHED_FIFO 1 (Tales: realtime priority)
    for p in $SERVER_PID $(pgrep -P "$SERVER_PID" || true); do chrt -f -a -p 1 "$p" >/dev/null; done
}
to_other() { # the server's threads back to the normal class
    for p in $SERVER_PID $(pgrep -P "$SERVER_PID" || true); do chrt -o -a -p 0 "$p" >/dev/null; done
}
SPINNER=
start_spinner() { taskset -c $SERVER_CPU sh -c 'while :; do :; done' & SPINNER=$!; STARTED+=("$SPINNER"); }

load() { # $1 = kind (memcached|http), $2 = target, $3 = rate, $4 = seconds, $5 = records file
    taskset -c $CLIENT_CPU "$OPENLOOP" "$1" "$2" --rate "$3" --seconds "$4" --out "$5"
}
peak() { # one core's peak throughput: offered far above it, completions/s
    load "$1" "$2" "$3" 2 "$OUT/peak-$1.csv" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["throughput_rps"]))'
}

# One run: load the server, inspect it while loaded, compare with the ideal.
run() { # $1 = scenario, $2 = phase (baseline, before, after-<fix>), $3 = kind, $4 = target, $5 = rate, $6 = peak
    local name="$1-$2-r$ROUND" records="$OUT/$1-$2-r$ROUND.csv"
    load "$3" "$4" "$5" "$RUN_SECONDS" "$records" > "$OUT/$name.load.json" &
    local load_pid=$!
    sleep 1   # let the load reach its rate before sampling (the doctor samples 1 s of it)
    # nginx is a master and its workers: inspect them all by name.
    local spec=(--pid "$SERVER_PID"); [ "$3" = http ] && spec=(--service nginx)
    "$TAILOR" doctor "${spec[@]}" -o json > "$OUT/$name.doctor.json"
    "$TAILOR" doctor "${spec[@]}" --interval-ms 500 > "$OUT/$name.doctor.txt"
    wait "$load_pid"
    "$TAILOR" doctor --ideal --records "$records" --peak-rps "$6" --cpus 1 -o json > "$OUT/$name.ideal.json"
    python3 - "$OUT" "$1" "$2" "$name" "$ROUND" >> "$OUT/runs.jsonl" <<'PY'
import json, sys
out, scenario, phase, name, rnd = sys.argv[1:]
doctor = json.load(open(f"{out}/{name}.doctor.json"))
ideal = json.load(open(f"{out}/{name}.ideal.json"))
load = json.load(open(f"{out}/{name}.load.json"))
named = [f'{f["check"]}:{f["severity"]}' for f in doctor["findings"] if f["severity"] in ("warn", "problem")]
print(json.dumps({"scenario": scenario, "phase": phase, "round": int(rnd), "named": named,
                  "p99_ms": ideal["measured_ms"]["p99"], "p999_ms": ideal["measured_ms"]["p999"],
                  "ideal_p99_ms": ideal["ideal_ms"]["p99"], "ideal_p999_ms": ideal["ideal_ms"]["p999"],
                  "ratio_p99": ideal["ratio"]["p99"], "ratio_p999": ideal["ratio"]["p999"],
                  "utilization": ideal["utilization"], "dropped": load["dropped"], "timeouts": load["timeouts"]}))
PY
    tail -1 "$OUT/runs.jsonl"
}

MC=127.0.0.1:$MC_PORT
URL=http://127.0.0.1:$NGINX_PORT/

scenarios() {
# memcached, one worker thread on CPU 1.
start_memcached 1
MC_PEAK=$(peak memcached $MC 80000)
MC_RATE=$(python3 -c "print(round($MC_PEAK * $RHO))")
echo "memcached -t 1: peak $MC_PEAK req/s on one core; runs at $MC_RATE req/s"
run quiet baseline memcached $MC "$MC_RATE" "$MC_PEAK"
# Background process: a CFS spinner on the server's CPU. The doctor's two fixes, one at a
# time: the server in SCHED_FIFO; then the server back in CFS and the spinner in SCHED_IDLE.
start_spinner
run background before memcached $MC "$MC_RATE" "$MC_PEAK"
to_fifo
run background after-fifo memcached $MC "$MC_RATE" "$MC_PEAK"
to_other; chrt -i -p 0 "$SPINNER"
run background after-idle memcached $MC "$MC_RATE" "$MC_PEAK"
stop "$SPINNER"; stop "$SERVER_PID"

# Non-FIFO scheduling and per-thread queues: memcached -t 4 on one CPU under CFS.
# Fix 1: its threads in SCHED_FIFO (FIFO among them). Fix 2: one worker thread (-t 1).
start_memcached 4
run threads before memcached $MC "$MC_RATE" "$MC_PEAK"
to_fifo
run threads after-fifo memcached $MC "$MC_RATE" "$MC_PEAK"
stop "$SERVER_PID"

# nginx: per-worker accept queues (2 workers, reuseport) vs one shared queue vs one worker.
start_nginx 1 ""
NG_PEAK=$(peak http "$URL" 20000)
NG_RATE=$(python3 -c "print(round($NG_PEAK * $RHO))")
echo "nginx 1 worker: peak $NG_PEAK req/s on one core; runs at $NG_RATE req/s"
run nginx-1-worker baseline http "$URL" "$NG_RATE" "$NG_PEAK"
stop "$SERVER_PID"
start_nginx 2 reuseport
run nginx-reuseport before http "$URL" "$NG_RATE" "$NG_PEAK"
stop "$SERVER_PID"
start_nginx 2 ""
run nginx-reuseport after-shared-queue http "$URL" "$NG_RATE" "$NG_PEAK"
stop "$SERVER_PID"
# Background process under nginx: spinner beside it; the same two fixes.
start_nginx 1 ""
start_spinner
run nginx-background before http "$URL" "$NG_RATE" "$NG_PEAK"
to_fifo
run nginx-background after-fifo http "$URL" "$NG_RATE" "$NG_PEAK"
to_other; chrt -i -p 0 "$SPINNER"
run nginx-background after-idle http "$URL" "$NG_RATE" "$NG_PEAK"
stop "$SPINNER"; stop "$SERVER_PID"

}
for ROUND in $(seq 1 "$ROUNDS"); do
    echo "doctor-validate: round $ROUND of $ROUNDS"
    scenarios
done

# Interrupts: loopback traffic raises no device interrupts, so IRQ affinity cannot be injected
# here; record what the VM allows.
IRQ=$(awk -F: '/virtio.*input/ {gsub(/ /,"",$1); print $1; exit}' /proc/interrupts)
if [ -n "$IRQ" ] && cp /proc/irq/"$IRQ"/smp_affinity_list "$OUT/irq-$IRQ.affinity" 2>/dev/null \
   && (cat "$OUT/irq-$IRQ.affinity" > /proc/irq/"$IRQ"/smp_affinity_list) 2>/dev/null; then
    echo "irq: /proc/irq/$IRQ/smp_affinity_list is writable here (restored unchanged), but loopback load raises no device interrupts"
else
    echo "irq: /proc/irq/N/smp_affinity_list is not writable on this VM"
fi

python3 - "$OUT" > "$OUT/results.md" <<'PY'
import json, sys
from collections import Counter
from statistics import median
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/runs.jsonl")]
groups = {}
for r in rows:
    groups.setdefault((r["scenario"], r["phase"]), []).append(r)
rounds = max(r["round"] for r in rows)
def spread(rs, key):
    v = [r[key] for r in rs]
    return f"{median(v):.1f}" if len(v) == 1 else f"{median(v):.1f} [{min(v):.1f}–{max(v):.1f}]"
print(f"{rounds} round(s); with more than one, medians and [min–max] over the rounds; a finding named in fewer than all rounds shows in how many.\n")
print("| scenario | phase | doctor names (warn/problem) | p99 ms | p99.9 ms | ideal p99 / p99.9 ms | measured/ideal p99 | p99.9 | ρ | dropped |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (scenario, phase), rs in groups.items():
    n = len(rs)
    counts = Counter(f for r in rs for f in r["named"])
    named = ", ".join(f if c == n else f"{f} ({c}/{n})" for f, c in counts.most_common()) or "—"
    print(f'| {scenario} | {phase} | {named} | {median(r["p99_ms"] for r in rs):.3f} | {median(r["p999_ms"] for r in rs):.3f} | '
          f'{median(r["ideal_p99_ms"] for r in rs):.3f} / {median(r["ideal_p999_ms"] for r in rs):.3f} | '
          f'{spread(rs, "ratio_p99")} | {spread(rs, "ratio_p999")} | {median(r["utilization"] for r in rs):.2f} | '
          f'{sum(r["dropped"] + r["timeouts"] for r in rs)} |')
PY
cat "$OUT/results.md"
echo "commit $(git rev-parse --short HEAD), $(date -u +%F), RUN_SECONDS=$RUN_SECONDS RHO=$RHO ROUNDS=$ROUNDS"
