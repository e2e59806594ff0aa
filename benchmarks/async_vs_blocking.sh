#!/usr/bin/env bash
# Issue 22: the async locker's uncontended cycle against the blocking one,
# in one process, under each executor and over each connection kind
# (`bench async-vs-blocking`). Starts its own servers on free loopback
# ports (never 6379): one redis-server listening on TCP, a unix socket and
# TLS (certificates made here with openssl), and with KINDS containing
# `cluster` a 3-primary Cluster; then stops them.
#
#   benchmarks/async_vs_blocking.sh [OUT.json] [extra bench flags...]
#   KINDS="tcp unix tls cluster" benchmarks/async_vs_blocking.sh out.json --cycles 6000
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-benchmarks/results/$(date +%F)-async-vs-blocking.json}"
shift || true
kinds="${KINDS:-tcp}"

# BENCH_BIN: a bench built elsewhere (e.g. without feature `tokio`, to
# compare); by default built here with it.
if [[ -z "${BENCH_BIN:-}" ]]; then
    cargo build --release --features bench-hooks,tls-rustls,tokio --example bench
fi
bench="${BENCH_BIN:-target/release/examples/bench}"


workdir="$(mktemp -d)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$workdir"
}
trap cleanup EXIT

wait_ping() {
    for _ in $(seq 1 100); do
        redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    redis-cli -p "$1" ping >/dev/null
}

port="$("$bench" free-port)"
args=(--port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir"
      --maxmemory-policy noeviction --unixsocket "$workdir/redis.sock" --unixsocketperm 700)
flags=()
if [[ " $kinds " == *" tls "* ]]; then
    tls_port="$("$bench" free-port)"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=bench CA" \
        -keyout "$workdir/ca.key" -out "$workdir/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
        -keyout "$workdir/server.key" -out "$workdir/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$workdir/ext.cnf"
    openssl x509 -req -in "$workdir/server.csr" -CA "$workdir/ca.crt" -CAkey "$workdir/ca.key" \
        -CAcreateserial -days 2 -extfile "$workdir/ext.cnf" -out "$workdir/server.crt" 2>/dev/null
    args+=(--tls-port "$tls_port" --tls-cert-file "$workdir/server.crt"
           --tls-key-file "$workdir/server.key" --tls-ca-cert-file "$workdir/ca.crt"
           --tls-auth-clients no)
    flags+=(--tls-url "rediss://127.0.0.1:$tls_port/0" --tls-ca "$workdir/ca.crt")
fi
redis-server "${args[@]}" >"$workdir/redis.log" 2>&1 &
pids+=($!)
wait_ping "$port"
if [[ " $kinds " == *" unix "* ]]; then
    flags+=(--unix-url "redis+unix://$workdir/redis.sock?db=0")
fi
if [[ " $kinds " == *" cluster "* ]]; then
    nodes=()
    for i in 1 2 3; do
        p="$("$bench" free-port)"
        mkdir -p "$workdir/c$i"
        redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir/c$i" \
            --cluster-enabled yes --cluster-config-file nodes.conf \
            --maxmemory-policy noeviction >"$workdir/c$i.log" 2>&1 &
        pids+=($!)
        wait_ping "$p"
        nodes+=("127.0.0.1:$p")
    done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
    for _ in $(seq 1 100); do
        redis-cli -p "${nodes[0]#*:}" cluster info | grep -q 'cluster_state:ok' && break
        sleep 0.2
    done
    urls="$(printf 'redis://%s,' "${nodes[@]}")"
    flags+=(--cluster-urls "${urls%,}")
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) (nproc $(nproc))" >&2
"$bench" async-vs-blocking --url "redis://127.0.0.1:$port/0" --date "$(date +%F)" \
    --out "$out" "${flags[@]}" "$@"
