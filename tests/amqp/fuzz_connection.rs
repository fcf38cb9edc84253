//! The connection fuzz target's checks on stable (`dwellmq::fuzzing::run_connection`): every
//! input of the corpus in `fuzz/corpus/connection/` (seeds and past findings), then a few
//! thousand pseudo-random inputs built from a fixed seed. Any panic, in the test or in a broker
//! task, aborts the test binary; an accounting mismatch is a panic.
//!
//! The seeds are scripts for the interpreter in `src/fuzzing.rs`: regenerate them with
//! `cargo test --test amqp fuzz_connection -- --ignored regenerate_seed_corpus`.

use std::path::{Path, PathBuf};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/connection")
}

/// The start of every seed: frame_max choice (2 octets), then the PLAIN response choice.
const PREAMBLE: [u8; 3] = [0, 0, 0];
/// Channel choice: the next octet picks channel 1.
const CH1: [u8; 2] = [0, 0];

fn script(ops: &[&[u8]]) -> Vec<u8> {
    let mut out = PREAMBLE.to_vec();
    for op in ops {
        out.extend_from_slice(op);
    }
    out
}

/// One operation: opcode, channel 1, then its fields.
fn op(code: u8, fields: &[u8]) -> Vec<u8> {
    let mut out = vec![code];
    out.extend_from_slice(&CH1);
    out.extend_from_slice(fields);
    out
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let open = op(0, &[]);
    // queue.declare q0 (not passive, not durable/exclusive/auto-delete, wait, no arguments)
    let declare_q0 = op(4, &[0, 1, 0, 0, 0, 1, 0]);
    // queue.declare q1 with a TTL of 0x0100 ms and dead-lettering to x0
    let declare_q1_ttl = op(4, &[1, 1, 0, 0, 0, 1, 0b101, 0x01, 0x00, 0]);
    // queue.declare q2 exclusive + auto-delete
    let declare_q2_exclusive = op(4, &[2, 1, 0, 1, 1, 1, 0]);
    // exchange.declare d0 x-delayed-message (direct)
    let declare_d0 = op(5, &[1, 0, 1, 0, 0, 1, 1]);
    // exchange.declare x0 (direct)
    let declare_x0 = op(5, &[0, 0, 1, 0, 0, 1, 1]);
    // queue.bind q0 to d0 with k0; q0 to x0 with k0
    let bind_q0_d0 = op(6, &[0, 1, 0]);
    let bind_q0_x0 = op(6, &[0, 0, 0]);
    // basic.publish to d0/k0, not mandatory, x-delay 1000, 4-octet body 'a'
    let publish_delayed = op(8, &[1, 0, 0, 1, 1, 0x03, 0xe8, 4, 0, b'a', 2]);
    // basic.publish to ""/q1 (routing key q1 = KEYS[4]), mandatory, no properties
    let publish_q1 = op(8, &[3, 4, 1, 1, 0, 16, 1, b'b', 2]);
    // basic.publish mandatory to nowhere
    let publish_unroutable = op(8, &[3, 0, 1, 1, 0, 8, 0, b'c', 2]);
    let advance = op(19, &[0x07, 0xd0]);
    // basic.consume q0 as c0 with acks; basic.get q1
    let consume_q0 = op(11, &[0, 1, 0, 1]);
    let get_q1 = op(13, &[1, 0]);
    let ack_1 = op(14, &[1, 0]);
    let nack_all_requeue = op(15, &[0, 1, 1, 1]);
    let confirm = op(17, &[0, 0]);
    let tx = op(17, &[1]);
    let commit = op(17, &[2]);
    let delete_d0 = op(18, &[3, 1, 0]);
    let purge_q0 = op(18, &[0, 0]);
    let flush = op(20, &[]);
    let close_channel = op(2, &[]);
    let close = op(22, &[0]);
    vec![
        ("seed_open_close", script(&[&open, &close_channel, &close])),
        (
            "seed_delayed_release",
            script(&[
                &open,
                &declare_d0,
                &declare_q0,
                &bind_q0_d0,
                &publish_delayed,
                &flush,
                &advance,
                &consume_q0,
                &flush,
                &ack_1,
                &close,
            ]),
        ),
        (
            "seed_delayed_deleted_while_held",
            script(&[
                &open,
                &declare_d0,
                &declare_q0,
                &bind_q0_d0,
                &publish_delayed,
                &publish_delayed,
                &flush,
                &delete_d0,
                &advance,
                &close,
            ]),
        ),
        (
            "seed_ttl_dead_letter",
            script(&[
                &open,
                &declare_x0,
                &declare_q0,
                &bind_q0_x0,
                &declare_q1_ttl,
                &publish_q1,
                &flush,
                &advance,
                &get_q1,
                &consume_q0,
                &flush,
                &nack_all_requeue,
                &close,
            ]),
        ),
        (
            "seed_confirms_tx_returns",
            script(&[
                &open,
                &confirm,
                &publish_unroutable,
                &publish_q1,
                &declare_q2_exclusive,
                &tx,
                &publish_unroutable,
                &commit,
                &purge_q0,
                &close,
            ]),
        ),
        (
            "seed_no_close",
            script(&[&open, &declare_q0, &consume_q0, &publish_q1, &flush]),
        ),
    ]
}

/// A small deterministic generator (xorshift64*), so that CI runs the same inputs every time.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn the_corpus_runs_clean() {
    let mut inputs: Vec<(String, Vec<u8>)> = seeds()
        .into_iter()
        .map(|(name, bytes)| (name.to_string(), bytes))
        .collect();
    // The corpus is checked in: a missing or unreadable directory is a failure, not a skip.
    let dir = std::fs::read_dir(corpus_dir())
        .unwrap_or_else(|e| panic!("the corpus {} is missing: {e}", corpus_dir().display()));
    let mut on_disk = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // A fuzzer running meanwhile replaces inputs as it reduces them: one gone is skipped.
        if let Ok(bytes) = std::fs::read(entry.path()) {
            on_disk.push((name, bytes));
        }
    }
    // The seeds on disk are the ones written here (the fuzzer starts from those files).
    for (name, bytes) in seeds() {
        let file = format!("{name}.bin");
        let found = on_disk.iter().find(|(n, _)| *n == file);
        assert!(
            found.is_some_and(|(_, b)| *b == bytes),
            "{file} is missing from the corpus or stale: regenerate_seed_corpus rewrites it"
        );
    }
    inputs.extend(on_disk);
    for (name, bytes) in inputs {
        eprintln!("corpus input {name}");
        dwellmq::fuzzing::run_connection(&bytes);
    }
}

#[test]
fn pseudo_random_scripts_run_clean() {
    let mut rng = Rng(0x5eed_d3e1_1a7e_0001);
    let seeds = seeds();
    for i in 0..2_000 {
        // Half are mutated seeds (the interesting paths), half are noise.
        let input = if i % 2 == 0 {
            let mut bytes = seeds[i / 2 % seeds.len()].1.clone();
            for _ in 0..(rng.next() % 6) {
                let at = (rng.next() as usize) % bytes.len();
                bytes[at] = rng.next() as u8;
            }
            if rng.next().is_multiple_of(3) {
                let extra = (rng.next() % 64) as usize;
                bytes.extend(rng.bytes(extra));
            }
            bytes
        } else {
            let len = (rng.next() % 256) as usize;
            rng.bytes(len)
        };
        dwellmq::fuzzing::run_connection(&input);
    }
}

#[test]
#[ignore = "writes the seed corpus; run by hand after changing src/fuzzing.rs"]
fn regenerate_seed_corpus() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in seeds() {
        std::fs::write(dir.join(format!("{name}.bin")), bytes).unwrap();
    }
}
