//! Without feature `tls-rustls` (the crate docs' "Deployments"), a `rediss://` URL given to
//! `connect` or `connect_cluster` is `INVALID_CONFIG` naming the feature to
//! enable, on both front ends, and echoes neither the URL nor its password.
//! Built only without the feature: `cargo nextest run --test no_tls`.
#![cfg(not(feature = "tls-rustls"))]

mod support;

#[allow(
    dead_code,
    unused_imports,
    unused_macros,
    reason = "this binary uses the suite's helpers, not its bodies"
)]
mod behaviour;

use redlease::{Config, Error};

use behaviour::common::namespace;
use behaviour::front::ClusterFront;

const URL: &str = "rediss://user:hunter2@127.0.0.1:6380/0";

fn names_the_feature(e: Error) {
    assert_eq!(e.code(), "INVALID_CONFIG", "{e:?}");
    let shown = e.to_string();
    assert!(shown.contains("tls-rustls"), "{shown}");
    for text in [shown, format!("{e:?}")] {
        assert!(
            !text.contains("hunter2") && !text.contains("127.0.0.1") && !text.contains("6380"),
            "{text}"
        );
    }
}

fn a_rediss_url_without_the_feature_is_invalid_config_naming_it<F: ClusterFront>() {
    match F::connect(URL, Config::new(namespace("no-tls"))) {
        Ok(_) => panic!("rediss:// must be refused without the feature"),
        Err(e) => names_the_feature(e),
    }
    match F::connect_cluster(&[URL.to_owned()], Config::new(namespace("no-tls"))) {
        Ok(_) => panic!("rediss:// cluster nodes must be refused without the feature"),
        Err(e) => names_the_feature(e),
    }
}

#[test]
fn blocking_a_rediss_url_without_the_feature_is_invalid_config_naming_it() {
    a_rediss_url_without_the_feature_is_invalid_config_naming_it::<behaviour::Blocking>();
}

#[cfg(feature = "aio")]
#[test]
fn aio_a_rediss_url_without_the_feature_is_invalid_config_naming_it() {
    a_rediss_url_without_the_feature_is_invalid_config_naming_it::<behaviour::front::Async>();
}
