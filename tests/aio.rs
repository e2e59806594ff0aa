//! The real-Redis behaviour suite for `redlease::aio::Locker`: the same
//! bodies as `tests/blocking.rs`, each call driven by
//! `futures::executor::block_on`. Async-only behaviours are in
//! `tests/aio_specific.rs` and the executors in `tests/aio_executors.rs`.

mod behaviour;
mod support;

behaviour::behaviour_suite!(behaviour::Async);
