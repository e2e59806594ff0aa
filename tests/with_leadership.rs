//! `with_leadership` on both front ends against a real Redis
//! (docs/PROTOCOL.md §7): it campaigns, runs the closure with the
//! leadership and its loss signal, and always resigns afterwards; on the
//! async front end a loss drops the closure's future and returns
//! `LockLost`.
#![allow(clippy::disallowed_methods)]

mod support;

#[allow(
    dead_code,
    unused_imports,
    unused_macros,
    reason = "this binary uses the suite's helpers, not its bodies"
)]
mod behaviour;

use std::time::Duration;

use redlease::{Error, WithLock};

use crate::behaviour::common::{config, key_sha, namespace};
use crate::support::{wait_until, RedisServer};

/// `<ns>:elect:{<sha>}`
fn lease_name(ns: &str, name: &str) -> String {
    format!("{ns}:elect:{{{}}}", key_sha(name))
}

mod blocking {
    use std::panic::{catch_unwind, AssertUnwindSafe};

    use redlease::blocking::Locker;

    use super::*;

    #[test]
    fn with_leadership_runs_the_closure_as_leader_and_resigns_after() {
        let server = RedisServer::start();
        let ns = namespace("wl-blocking");
        let locker = Locker::connect(server.url(), config(&ns)).unwrap();
        let election = locker.election("scheduler").unwrap();
        let term = election
            .with_leadership(b"a", WithLock::new(), |leadership, lost| {
                assert!(!lost.is_lost());
                let leader = election.leader()?.expect("leading inside the closure");
                assert_eq!(leader.term, leadership.term());
                Ok::<_, Error>(leadership.term())
            })
            .unwrap();
        assert!(term.get() > 0);
        assert_eq!(election.leader().unwrap(), None, "resigned afterwards");

        // A panic resumes after the resign.
        let panicked = catch_unwind(AssertUnwindSafe(|| {
            election.with_leadership(b"a", WithLock::new(), |_, _| -> Result<(), Error> {
                panic!("the job failed")
            })
        }));
        assert!(panicked.is_err());
        assert_eq!(election.leader().unwrap(), None, "resigned after the panic");

        // Not leading: the campaign's error, and the closure is not called.
        let held = election.campaign(b"b").unwrap();
        let busy = WithLock::new().wait(Duration::ZERO);
        let e = election
            .with_leadership(b"a", busy, |_, _| -> Result<(), Error> {
                unreachable!("not leading")
            })
            .unwrap_err();
        assert!(e.is_busy(), "{e:?}");
        held.resign().unwrap();
    }
}

mod aio {
    use std::future::pending;

    use futures::executor::block_on;
    use redlease::aio::Locker;

    use super::*;

    #[test]
    fn with_leadership_runs_the_future_as_leader_and_resigns_after() {
        let server = RedisServer::start();
        let ns = namespace("wl-aio");
        let locker = block_on(Locker::connect(server.url(), config(&ns))).unwrap();
        let election = locker.election("scheduler").unwrap();
        let term =
            block_on(
                election.with_leadership(b"a", WithLock::new(), async |leadership, _lost| {
                    let leader = election.leader().await?.expect("leading inside");
                    assert_eq!(leader.term, leadership.term());
                    Ok::<_, Error>(leadership.term())
                }),
            )
            .unwrap();
        assert!(term.get() > 0);
        assert_eq!(block_on(election.leader()).unwrap(), None, "resigned");
    }

    #[test]
    fn a_loss_drops_the_future_and_returns_lock_lost() {
        let server = RedisServer::start();
        let ns = namespace("wl-aio-lost");
        let short = config(&ns).lease(Duration::from_millis(300));
        let locker = block_on(Locker::connect(server.url(), short)).unwrap();
        let election = locker.election("scheduler").unwrap();
        let name = lease_name(&ns, "scheduler");
        let result = block_on(
            election.with_leadership(b"a", WithLock::new(), async |_, _| {
                wait_until(Duration::from_secs(5), "the leadership is set", || {
                    !server.keys(&name).is_empty()
                });
                server.query(redis::cmd("DEL").arg(&name));
                pending::<Result<(), Error>>().await
            }),
        );
        let e = result.unwrap_err();
        assert_eq!(e.code(), "LOCK_LOST", "{e:?}");
        assert_eq!(block_on(election.leader()).unwrap(), None);
    }
}
