#!/usr/bin/env bash
# Runs the test suites CI runs (.ci/run), in the same order and with the
# same flags; keep the two in sync (see the comment in .ci/run).
# Needs redis-server on PATH: the tests start their own servers on free
# loopback ports and never touch one on 6379.
set -euo pipefail

cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
    echo "redis-server is not on PATH (Debian/Ubuntu: sudo apt-get install redis-server;" >&2
    echo "macOS: brew install redis)" >&2
    exit 1
fi

if ! cargo nextest --version >/dev/null 2>&1; then
    cargo install cargo-nextest --locked
fi

set -x
cargo nextest run --all-targets --all-features --test-threads 2 --no-fail-fast
# Default features: rediss:// without tls-rustls.
cargo nextest run --test no_tls --test-threads 2
cargo test --doc --all-features
