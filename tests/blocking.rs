//! The real-Redis behaviour suite for `redlease::blocking::Locker`, plus the
//! behaviours only the blocking front end has: release on drop, cancel
//! handles, and many threads contending for one key.

mod behaviour;
mod support;

behaviour::behaviour_suite!(behaviour::Blocking);

/// Blocking-only behaviours.
mod blocking_only {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use redlease::blocking::Locker;
    use redlease::{AcquireOptions, CancelHandle, Error, ReleaseOutcome};

    use crate::behaviour::common::{
        config, connect, exists, granted, lock_name, namespace, no_wait, refused, spawn,
        wait_for_stats, BOUND,
    };
    use crate::support::RedisServer;

    /// A lease dropped without `release` deletes its lock before `drop`
    /// returns.
    #[test]
    fn a_dropped_lease_releases_its_key() {
        let server = RedisServer::start();
        let ns = namespace("drop");
        let locker: Locker = connect(&server, config(&ns));
        let lease = granted(locker.acquire("k"), "acquire");
        assert!(exists(&server, &lock_name(&ns, "k")));

        drop(lease);
        assert!(!exists(&server, &lock_name(&ns, "k")));
        assert_eq!(locker.stats().tracked_leases, 0);
        let other: Locker = connect(&server, config(&ns));
        granted(other.acquire_with("k", no_wait()), "the key is free")
            .release()
            .unwrap();
    }

    /// Starts a waiter for `key` on `locker` that records `name` in `order`
    /// once it holds the lock, then releases it.
    fn queue_waiter(
        locker: &Arc<Locker>,
        key: &'static str,
        name: &'static str,
        cancel: Option<CancelHandle>,
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) -> crate::behaviour::common::Bounded<Result<ReleaseOutcome, Error>> {
        let (l, order) = (locker.clone(), order.clone());
        let queued = locker.stats().waiters;
        let t = spawn(name, move || {
            let options = match cancel {
                Some(handle) => AcquireOptions::new().cancel(handle),
                None => AcquireOptions::new(),
            };
            let lease = l.acquire_with(key, options)?;
            order.lock().unwrap().push(name);
            lease.release()
        });
        wait_for_stats(&**locker, &format!("{name} queued"), |s| {
            s.waiters == queued + 1
        });
        t
    }

    /// Cancelling a waiter in the middle of the line ends it with
    /// `CANCELLED` and leaves the others in their order.
    #[test]
    fn cancelling_a_waiter_in_the_middle_leaves_the_line_in_order() {
        let server = RedisServer::start();
        let ns = namespace("cancel-middle");
        let holder: Locker = connect(&server, config(&ns));
        let waiters = Arc::new(connect::<Locker>(
            &server,
            config(&ns).wait(Duration::from_secs(20)),
        ));
        let held = granted(holder.acquire("k"), "holder");
        let order = Arc::new(Mutex::new(Vec::new()));
        let cancel = CancelHandle::new();
        let first = queue_waiter(&waiters, "k", "first", None, &order);
        let middle = queue_waiter(&waiters, "k", "middle", Some(cancel.clone()), &order);
        let last = queue_waiter(&waiters, "k", "last", None, &order);

        cancel.cancel();
        let e = refused(middle.join_within(BOUND), "cancelled waiter");
        assert!(matches!(e, Error::Cancelled), "{e:?}");
        assert_eq!(e.code(), "CANCELLED");
        assert_eq!(waiters.stats().waiters, 2);

        assert_eq!(held.release().unwrap(), ReleaseOutcome::Released);
        assert_eq!(first.join_within(BOUND).unwrap(), ReleaseOutcome::Released);
        assert_eq!(last.join_within(BOUND).unwrap(), ReleaseOutcome::Released);
        assert_eq!(*order.lock().unwrap(), ["first", "last"]);
    }

    /// Cancelling the head of the line hands the line to the next waiter,
    /// which gets the lock once it is released.
    #[test]
    fn cancelling_the_head_waiter_hands_the_line_to_the_next() {
        let server = RedisServer::start();
        let ns = namespace("cancel-head");
        let holder: Locker = connect(&server, config(&ns));
        let waiters = Arc::new(connect::<Locker>(
            &server,
            config(&ns).wait(Duration::from_secs(20)),
        ));
        let held = granted(holder.acquire("k"), "holder");
        let order = Arc::new(Mutex::new(Vec::new()));
        let cancel = CancelHandle::new();
        let head = queue_waiter(&waiters, "k", "head", Some(cancel.clone()), &order);
        let next = queue_waiter(&waiters, "k", "next", None, &order);

        cancel.cancel();
        assert_eq!(refused(head.join_within(BOUND), "head").code(), "CANCELLED");
        assert_eq!(held.release().unwrap(), ReleaseOutcome::Released);
        assert_eq!(next.join_within(BOUND).unwrap(), ReleaseOutcome::Released);
        assert_eq!(*order.lock().unwrap(), ["next"]);
    }

    /// A handle cancelled before the acquire ends it at once with
    /// `CANCELLED`, even on a free key.
    #[test]
    fn an_acquire_with_an_already_cancelled_handle_ends_with_cancelled() {
        let server = RedisServer::start();
        let ns = namespace("cancel-sticky");
        let locker: Locker = connect(&server, config(&ns));
        let cancel = CancelHandle::new();
        cancel.cancel();
        let e = refused(
            locker.acquire_with("free", AcquireOptions::new().cancel(cancel)),
            "cancelled acquire",
        );
        assert_eq!(e.code(), "CANCELLED");
        assert_eq!(locker.stats().waiters, 0);
        granted(
            locker.acquire_with("free", no_wait()),
            "the key was not taken",
        )
        .release()
        .unwrap();
    }

    /// Sixteen threads on two lockers taking one key four times each never
    /// hold it at the same time, and see strictly increasing fences.
    #[test]
    fn sixteen_threads_contending_for_one_key_never_overlap() {
        const THREADS: usize = 16;
        const ROUNDS: usize = 4;
        let server = RedisServer::start();
        let ns = namespace("contend");
        let lockers: Vec<Arc<Locker>> = (0..2)
            .map(|_| Arc::new(connect(&server, config(&ns).wait(Duration::from_secs(30)))))
            .collect();
        let inside = Arc::new(AtomicBool::new(false));
        let fences = Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = (0..THREADS)
            .map(|i| {
                let locker = lockers[i % 2].clone();
                let (inside, fences) = (inside.clone(), fences.clone());
                spawn(&format!("contender-{i}"), move || {
                    for _ in 0..ROUNDS {
                        let lease = granted(locker.acquire("k"), "contender");
                        assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                        fences.lock().unwrap().push(lease.fence().get());
                        inside.store(false, Ordering::SeqCst);
                        assert_eq!(lease.release().unwrap(), ReleaseOutcome::Released);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join_within(Duration::from_secs(60));
        }
        let fences = fences.lock().unwrap();
        assert_eq!(fences.len(), THREADS * ROUNDS);
        for pair in fences.windows(2) {
            assert!(pair[0] < pair[1], "fences in grant order: {fences:?}");
        }
    }
}
