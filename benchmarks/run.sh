#!/usr/bin/env bash
# Runs every benchmark scenario of examples/bench.rs against a redis-server
# of its own on a free loopback port (never 6379), writes
# benchmarks/results/<date>-<scenario>.json, and stops the server.
#
#   benchmarks/run.sh                 # every scenario (about 5 minutes on 2 cores)
#   benchmarks/run.sh uncontended     # only the named scenarios
#   benchmarks/run.sh multi           # 8 keys at once against one (docs/PROTOCOL.md §6)
#
# Environment:
#   BENCH_WAIT_QUIET=SECONDS  wait up to SECONDS for the 1-min load average to
#                             drop below BENCH_QUIET_LOAD (default 0.7) first
#   BENCH_FLAGS="..."         extra flags for every scenario (e.g. "--front async")
#   BENCH_BIN=PATH            run this bench binary instead of building one (e.g.
#                             another commit's, to alternate before and after)
#   BENCH_PEER=none           contention without its peer (by default the scenario
#                             also runs rslock, built from benchmarks/peers/rslock)
set -euo pipefail

cd "$(dirname "$0")/.."

scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
    scenarios=(uncontended script-floor async-hops wakeup election contention semaphore rw many-keys multi scale memory core)
fi

command -v redis-server >/dev/null || { echo "redis-server is not on PATH" >&2; exit 1; }
command -v redis-benchmark >/dev/null || { echo "redis-benchmark is not on PATH" >&2; exit 1; }

if [ -n "${BENCH_BIN:-}" ]; then
    bench="$BENCH_BIN"
else
    cargo build --release --features bench-hooks --example bench
    bench="${CARGO_TARGET_DIR:-target}/release/examples/bench"
fi

# The contention scenario's peer, rslock, is a package of its own (its
# runtime features turn on the redis crate's TLS, which redlease's no_tls
# test must build without).
peer_flags=()
if [[ " ${scenarios[*]} " == *" contention "* && "${BENCH_PEER:-rslock}" != none ]]; then
    cargo build --release --manifest-path benchmarks/peers/rslock/Cargo.toml \
        --target-dir "${CARGO_TARGET_DIR:-target}/peers"
    peer_flags=(--rslock-bin "${CARGO_TARGET_DIR:-target}/peers/release/redlease-bench-rslock")
fi

quiet_load="${BENCH_QUIET_LOAD:-0.7}"
if [ -n "${BENCH_WAIT_QUIET:-}" ]; then
    waited=0
    while awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v q="$quiet_load" 'BEGIN { exit !(l >= q) }'; do
        if [ "$waited" -ge "$BENCH_WAIT_QUIET" ]; then
            echo "load average still $(cut -d' ' -f1-3 /proc/loadavg) after ${waited}s; running anyway" >&2
            break
        fi
        sleep 10
        waited=$((waited + 10))
    done
fi
echo "load average before the run: $(cut -d' ' -f1-3 /proc/loadavg) (nproc $(nproc))" >&2

port="$("$bench" free-port)"
workdir="$(mktemp -d)"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$workdir" --maxmemory-policy noeviction >"$workdir/redis.log" 2>&1 &
redis_pid=$!
cleanup() {
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    rm -rf "$workdir"
}
trap cleanup EXIT

for _ in $(seq 1 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
done
redis-cli -p "$port" ping >/dev/null
echo "redis-server $(redis-server --version | sed 's/.* v=\([^ ]*\).*/\1/') on port $port" >&2

url="redis://127.0.0.1:$port/0"
date="$(date +%F)"
mkdir -p benchmarks/results
# The one-line summaries of this run, next to the JSON files.
summary="benchmarks/results/$date-summary.txt"
{
    echo "# benchmarks/run.sh ${scenarios[*]} at $(date -u +%FT%TZ)"
    echo "# nproc $(nproc); redis-server $(redis-server --version | sed 's/.* v=\([^ ]*\).*/\1/')"
    echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$summary"
for scenario in "${scenarios[@]}"; do
    out="benchmarks/results/$date-$scenario.json"
    echo "== $scenario" | tee -a "$summary" >&2
    # shellcheck disable=SC2086
    flags=()
    [ "$scenario" = contention ] && flags=("${peer_flags[@]}")
    "$bench" "$scenario" --url "$url" --date "$date" --out "$out" "${flags[@]}" ${BENCH_FLAGS:-} \
        2> >(tee -a "$summary" >&2)
    redis-cli -p "$port" flushall >/dev/null
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$summary" >&2
