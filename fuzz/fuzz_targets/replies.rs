//! Classification of acquire (lock and semaphore), release and renew replies from arbitrary
//! `redis::Value` trees
//! (`redlease::fuzzing::check_replies`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redlease::fuzzing::check_replies(data));
