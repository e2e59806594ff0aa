//! Random operation sequences over three keys, driven the way a front
//! end drives the core and checked after every step against a small
//! reference model. The model lives in `crate::core::model` (shared with
//! the `line` fuzz target and its corpus replay); this drives it with
//! proptest's inputs and shrinking.

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_operation_sequences_keep_every_line_fifo_and_lose_no_waiter(
        data in proptest::collection::vec(any::<u8>(), 0..2048)
    ) {
        crate::core::model::check_line(&data);
    }
}
