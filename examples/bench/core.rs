//! Core micro-benchmarks: reply classification, name building (SHA-256)
//! and a FIFO line's hand-over, timed in a loop through the hidden
//! `redlease::micro` hooks (feature `bench-hooks`). No Redis involved.

#[cfg(feature = "bench-hooks")]
use std::hint::black_box;
use std::time::Instant;

use super::json::J;
use super::{Args, BoxResult};

/// Runs `f` `n` times after a warm-up; nanoseconds per call.
fn time_per_call(n: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..n / 10 {
        f();
    }
    let started = Instant::now();
    for _ in 0..n {
        f();
    }
    started.elapsed().as_nanos() as f64 / f64::from(n)
}

#[cfg(feature = "bench-hooks")]
pub(crate) fn run(args: &Args) -> BoxResult<J> {
    use redis::Value;
    use redlease::micro;

    let n: u32 = args.num("iterations", 200_000)?;
    let fence = Value::BulkString(b"1796125348218781".to_vec());
    let busy = Value::Int(1500);
    let released = Value::Int(1);
    let classify_fence = time_per_call(n, || {
        black_box(micro::classify_acquire_reply(black_box(&fence)));
    });
    let classify_busy = time_per_call(n, || {
        black_box(micro::classify_acquire_reply(black_box(&busy)));
    });
    let classify_release = time_per_call(n, || {
        black_box(micro::classify_release_reply(black_box(&released)));
    });
    let key = "invoice:2026-12-01:customer-42";
    let names = time_per_call(n, || {
        black_box(micro::build_names(black_box("my-service"), black_box(key)));
    });
    let now = Instant::now();
    let rounds = (n / 100).max(1);
    let line_16 = time_per_call(rounds, || {
        black_box(micro::line_round(now, black_box(16)));
    }) / 16.0;
    let line_128 = time_per_call(rounds / 4 + 1, || {
        black_box(micro::line_round(now, black_box(128)));
    }) / 128.0;
    eprintln!(
        "core: classify fence {classify_fence:.0} ns, busy {classify_busy:.0} ns, release \
         {classify_release:.0} ns; names {names:.0} ns; line hand-over {line_16:.0} ns/waiter (16), \
         {line_128:.0} ns/waiter (128)"
    );
    Ok(J::obj([
        ("iterations", J::from(u64::from(n))),
        ("classify_acquire_fence_ns", J::round(classify_fence, 1)),
        ("classify_acquire_busy_ns", J::round(classify_busy, 1)),
        ("classify_release_ns", J::round(classify_release, 1)),
        ("build_names_sha256_ns", J::round(names, 1)),
        (
            "line_join_attempt_grant_release_handover_ns_per_waiter_16",
            J::round(line_16, 1),
        ),
        (
            "line_join_attempt_grant_release_handover_ns_per_waiter_128",
            J::round(line_128, 1),
        ),
    ]))
}

#[cfg(not(feature = "bench-hooks"))]
pub(crate) fn run(_args: &Args) -> BoxResult<J> {
    let _: fn(u32, fn()) -> f64 = time_per_call;
    Err("the core scenario needs the crate's internals: build with --features bench-hooks".into())
}
