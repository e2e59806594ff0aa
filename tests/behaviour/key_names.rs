//! The connect-time key-names marker (docs/PROTOCOL.md §2): lockers of one
//! namespace must agree on `Config::key_hash_tags`, checked at connect in
//! `<ns>:key-names`.

use redlease::Error;

use super::common::{config, connect, granted, namespace, no_wait, spawn, BOUND};
use super::front::Front;
use super::input::invalid_option;
use crate::support::RedisServer;

/// What `<ns>:key-names` holds, if anything.
fn marker(server: &RedisServer, ns: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(format!("{ns}:key-names"))
        .query(&mut server.conn())
        .unwrap()
}

/// The first locker records its scheme; a locker with the other setting
/// is refused at connect with `InvalidConfig` (naming neither namespace,
/// key nor address), one with the same setting connects and works, and a
/// later connect costs a single `GET`. Each setting is checked the same
/// way in a namespace of its own.
pub(crate) fn a_locker_whose_key_hash_tags_differ_from_the_namespaces_is_refused<F: Front>() {
    let server = RedisServer::start();
    for (first, other, recorded) in [(false, true, "plain"), (true, false, "tagged")] {
        let ns = namespace("key-names");
        let locker: F = connect(&server, config(&ns).key_hash_tags(first));
        assert_eq!(marker(&server, &ns).as_deref(), Some(recorded));

        let e = match F::connect(&server.url(), config(&ns).key_hash_tags(other)) {
            Ok(_) => panic!("a locker with key_hash_tags({other}) connected beside {recorded}"),
            Err(e) => e,
        };
        assert_eq!(invalid_option(&e), "key_hash_tags", "{e:?}");
        for shown in [e.to_string(), format!("{e:?}")] {
            assert!(!shown.contains(&ns), "names the namespace: {shown}");
            assert!(!shown.contains(&server.port().to_string()), "{shown}");
        }
        assert_eq!(marker(&server, &ns).as_deref(), Some(recorded));

        server.reset_stats();
        let same: F = connect(&server, config(&ns).key_hash_tags(first));
        let stats = server.commandstats();
        assert_eq!(stats.get("get"), Some(&1), "{stats:?}");
        assert_eq!(stats.get("set"), None, "{stats:?}");
        let lease = granted(
            same.acquire_with("acct:{7}:in", no_wait()),
            "the agreeing locker",
        );
        assert!(
            locker.acquire_with("acct:{7}:in", no_wait()).is_err(),
            "both name the key alike: one lock"
        );
        F::release(lease).unwrap();
    }
}

/// Two lockers with different settings connecting to a fresh namespace at
/// once: whichever records first, the other is refused (`SET NX GET`).
pub(crate) fn of_two_lockers_racing_to_record_different_settings_one_is_refused<F: Front>() {
    let server = RedisServer::start();
    for _ in 0..4 {
        let ns = namespace("key-names-race");
        let url = server.url();
        let racers: Vec<_> = [false, true]
            .into_iter()
            .map(|tags| {
                let (url, config) = (url.clone(), config(&ns).key_hash_tags(tags));
                spawn("racer", move || F::connect(&url, config).map(drop))
            })
            .collect();
        let results: Vec<Result<(), Error>> =
            racers.into_iter().map(|r| r.join_within(BOUND)).collect();
        let connected = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(connected, 1, "{results:?}");
        let winner = if results[0].is_ok() {
            "plain"
        } else {
            "tagged"
        };
        assert_eq!(marker(&server, &ns).as_deref(), Some(winner));
    }
}

/// After Redis lost its data the marker is gone, and the next locker to
/// connect records its scheme again (the check covers lockers connecting
/// while a marker is there). A marker holding something this version does
/// not know refuses every locker.
pub(crate) fn a_lost_marker_is_recorded_again_and_an_unknown_one_refuses<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("key-names-lost");
    let plain: F = connect(&server, config(&ns));
    F::release(granted(plain.acquire_with("k", no_wait()), "plain")).unwrap();
    server.restart();
    assert_eq!(marker(&server, &ns), None);
    let _tagged: F = connect(&server, config(&ns).key_hash_tags(true));
    assert_eq!(marker(&server, &ns).as_deref(), Some("tagged"));

    let ns = namespace("key-names-unknown");
    let _: () = redis::cmd("SET")
        .arg(format!("{ns}:key-names"))
        .arg("scheme-v9")
        .query(&mut server.conn())
        .unwrap();
    for tags in [false, true] {
        match F::connect(&server.url(), config(&ns).key_hash_tags(tags)) {
            Ok(_) => panic!("connected beside an unknown naming scheme"),
            Err(e) => assert_eq!(invalid_option(&e), "key_hash_tags", "{e:?}"),
        }
    }
}
