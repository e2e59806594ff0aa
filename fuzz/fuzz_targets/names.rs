//! Key and namespace validation and the names stored in Redis
//! (`redlease::fuzzing::check_names`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redlease::fuzzing::check_names(data));
