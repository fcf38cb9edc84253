//! Arbitrary bytes through `decode_protocol_header` and `decode_frame` (repeatedly): no input
//! may panic, and every frame that decodes must re-encode (`encode_frame`) to bytes that decode
//! to an equal frame. The checks live in `dwellmq_codec::fuzzing` so that a stable test
//! (`crates/dwellmq-codec/tests/fuzz_corpus.rs`) runs them over the corpus too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    dwellmq_codec::fuzzing::check_decode_roundtrip(data);
});
