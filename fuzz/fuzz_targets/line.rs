//! The per-key FIFO lines and wait decisions against a reference model
//! (`redlease::fuzzing::check_line`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redlease::fuzzing::check_line(data));
