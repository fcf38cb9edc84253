//! Arbitrary bytes as a script of client operations over one whole connection, through the real
//! connection state machine in memory: no input may panic (in the harness or in a broker task),
//! and once the connection is gone and what it left is deleted, the broker's accounting must be
//! back to zero (memory counted, output buffered, delayed messages held). The driver lives in
//! `dwellmq::fuzzing` so that a stable test (`tests/amqp/fuzz_connection.rs`) runs it over the corpus
//! too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    dwellmq::fuzzing::run_connection(data);
});
