//! The conveniences people reach for first, on both
//! front ends against a real server: `try_acquire`, `connect(&String)`,
//! the error classification helpers, and lockers that cross
//! `catch_unwind` without `AssertUnwindSafe`.

mod support;

use std::panic::{catch_unwind, RefUnwindSafe, UnwindSafe};

use redlease::{Config, ReleaseOutcome};
use support::RedisServer;

const NS: &str = "conveniences";

fn unwind_safe<T: UnwindSafe + RefUnwindSafe>() {}

#[test]
fn lockers_are_unwind_safe() {
    unwind_safe::<redlease::blocking::Locker>();
    unwind_safe::<&redlease::blocking::Locker>();
    #[cfg(feature = "aio")]
    {
        unwind_safe::<redlease::aio::Locker>();
        unwind_safe::<&redlease::aio::Locker>();
    }
}

#[test]
fn blocking_connect_takes_a_borrowed_string_and_try_acquire_tries_once() {
    let server = RedisServer::start();
    let url: String = server.url();
    let locker = redlease::blocking::Locker::connect(&url, Config::new(NS)).unwrap();
    let other = redlease::blocking::Locker::connect(url.clone(), Config::new(NS)).unwrap();

    let lease = locker.try_acquire("job").unwrap();
    let busy = other.try_acquire("job").unwrap_err();
    assert!(busy.is_busy(), "{busy:?}");
    assert!(busy.is_retryable() && !busy.is_timeout() && !busy.is_outcome_unknown());
    assert_eq!(busy.code(), "LOCK_BUSY");
    assert!(busy.holder_remaining().is_some());
    assert_eq!(lease.release().unwrap(), ReleaseOutcome::Released);
    let again = other.try_acquire("job").unwrap();
    assert_eq!(again.release().unwrap(), ReleaseOutcome::Released);

    // A user's catch_unwind around the locker compiles as is.
    let shut = catch_unwind(|| locker.shutdown());
    assert!(matches!(shut, Ok(Ok(()))));
    other.shutdown().unwrap();
}

#[cfg(feature = "aio")]
#[test]
fn aio_connect_takes_a_borrowed_string_and_try_acquire_tries_once() {
    use futures::executor::block_on;

    let server = RedisServer::start();
    let url: String = server.url();
    block_on(async {
        let locker = redlease::aio::Locker::connect(&url, Config::new(NS))
            .await
            .unwrap();
        let other = redlease::aio::Locker::connect(url.as_str(), Config::new(NS))
            .await
            .unwrap();
        let lease = locker.try_acquire("job").await.unwrap();
        let busy = other.try_acquire("job").await.unwrap_err();
        assert!(busy.is_busy(), "{busy:?}");
        assert_eq!(lease.release().await.unwrap(), ReleaseOutcome::Released);
        let again = other.try_acquire("job").await.unwrap();
        assert_eq!(again.release().await.unwrap(), ReleaseOutcome::Released);
        locker.shutdown().await.unwrap();
        other.shutdown().await.unwrap();
    });
}

#[test]
fn a_bad_borrowed_url_is_invalid_config() {
    let url = String::from("not-a-url");
    let e = redlease::blocking::Locker::connect(&url, Config::new(NS)).unwrap_err();
    assert_eq!(e.code(), "INVALID_CONFIG");
    assert!(!e.is_retryable());
}
