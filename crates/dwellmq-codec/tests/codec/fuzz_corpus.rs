//! Runs the fuzz target's body (`dwellmq_codec::fuzzing::check_decode_roundtrip`) on stable:
//! over the seed corpus in `fuzz/corpus/decode_frames/`, mutations of it, and deterministic
//! pseudo-random inputs, so the invariants are checked by `cargo test` too.

use std::path::PathBuf;

use dwellmq_codec::fuzzing::check_decode_roundtrip;
use dwellmq_codec::methods::ALL_METHOD_IDS;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/decode_frames")
}

/// The checked-in corpus files: `seed_*`, `raw_*` and `regression_*`. Files libFuzzer adds
/// during local runs are named by hash, ignored by git, and skipped here.
fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(corpus_dir())
        .expect("fuzz/corpus/decode_frames exists")
        .filter_map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let named = ["seed_", "raw_", "regression_"]
                .iter()
                .any(|p| name.starts_with(p));
            named.then(|| (name, std::fs::read(&path).unwrap()))
        })
        .collect();
    files.sort();
    files
}

/// xorshift64*: deterministic, no dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
}

#[test]
fn seed_corpus_files_pass() {
    let files = corpus();
    assert!(files.len() >= 8, "seed corpus is missing files");
    for (name, data) in &files {
        // Run under catch_unwind only to name the failing file.
        let r = std::panic::catch_unwind(|| check_decode_roundtrip(data));
        assert!(r.is_ok(), "corpus file {name} failed");
    }
}

/// The seed files (except `raw_*` and `regression_*` inputs) hold only complete, valid frames.
#[test]
fn seed_corpus_files_are_valid_frames() {
    for (name, data) in corpus() {
        if name.starts_with("regression") || name.starts_with("raw_") {
            continue;
        }
        let mut buf = bytes::BytesMut::from(&data[..]);
        let mut n = 0;
        while let Some(_f) =
            dwellmq_codec::decode_frame(&mut buf, 1 << 20).unwrap_or_else(|e| panic!("{name}: {e}"))
        {
            n += 1;
        }
        assert!(
            n > 0 && buf.is_empty(),
            "{name}: {n} frames, {} left",
            buf.len()
        );
    }
}

#[test]
fn mutations_of_the_corpus_pass() {
    let mut rng = Rng(0x0dd_c0de);
    for (_, data) in corpus() {
        // Every truncation.
        for len in 0..data.len() {
            check_decode_roundtrip(&data[..len]);
        }
        // Every single-bit flip in the first 64 octets (framing, ids, flags, lengths).
        for at in 0..data.len().min(64) {
            for bit in 0..8 {
                let mut d = data.clone();
                d[at] ^= 1 << bit;
                check_decode_roundtrip(&d);
            }
        }
        // Random multi-octet mutations anywhere, keeping or fixing the size field.
        for _ in 0..200 {
            let mut d = data.clone();
            for _ in 0..1 + rng.below(4) {
                match rng.below(4) {
                    0 if !d.is_empty() => {
                        let at = rng.below(d.len());
                        d[at] = rng.byte();
                    }
                    1 if !d.is_empty() => {
                        let at = rng.below(d.len());
                        d.remove(at);
                    }
                    2 => {
                        let at = rng.below(d.len() + 1);
                        d.insert(at, rng.byte());
                    }
                    _ if !d.is_empty() => {
                        let at = rng.below(d.len());
                        d[at] = [0x00, 0x01, 0x7f, 0x80, 0xff, 0xce][rng.below(6)];
                    }
                    _ => {}
                }
            }
            check_decode_roundtrip(&d);
            // The same mutation with the first frame's size field made consistent again.
            if d.len() >= 8 {
                let size = (d.len() - 8) as u32;
                d[3..7].copy_from_slice(&size.to_be_bytes());
                *d.last_mut().unwrap() = 0xce;
                check_decode_roundtrip(&d);
            }
        }
    }
}

/// Correctly framed frames with random payloads: a known method id followed by random
/// arguments, random content headers, random bodies, and the odd garbage frame.
fn random_frame(rng: &mut Rng, out: &mut Vec<u8>) {
    let kind = match rng.below(10) {
        0..=4 => 1,
        5 | 6 => 2,
        7 => 3,
        8 => 8,
        _ => rng.byte(),
    };
    let channel: u16 = if rng.below(2) == 0 {
        0
    } else {
        rng.next() as u16
    };
    let mut payload = Vec::new();
    match kind {
        1 => {
            let (c, m) = ALL_METHOD_IDS[rng.below(ALL_METHOD_IDS.len())];
            payload.extend_from_slice(&c.to_be_bytes());
            payload.extend_from_slice(&m.to_be_bytes());
            // Plausible argument bytes: small lengths are more likely to parse.
            for _ in 0..rng.below(40) {
                payload.push(if rng.below(3) == 0 {
                    rng.byte()
                } else {
                    rng.byte() % 8
                });
            }
        }
        2 => {
            payload.extend_from_slice(&[0, 60, 0, 0]);
            payload.extend_from_slice(&rng.bytes(8));
            payload.push(rng.byte());
            payload.push(rng.byte() & 0xfc);
            let n = rng.below(60);
            payload.extend(rng.bytes(n).iter().map(|b| b % 16));
        }
        8 => {}
        _ => {
            let n = rng.below(64);
            payload = rng.bytes(n);
        }
    }
    out.push(kind);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&payload);
    out.push(if rng.below(50) == 0 { rng.byte() } else { 0xce });
}

#[test]
fn pseudo_random_inputs_pass() {
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    for n in 0..4000 {
        let data = if n % 4 == 0 {
            // Unstructured bytes.
            let len = rng.below(64);
            rng.bytes(len)
        } else {
            let mut d = Vec::new();
            for _ in 0..1 + rng.below(4) {
                random_frame(&mut rng, &mut d);
            }
            if rng.below(4) == 0 {
                let cut = rng.below(d.len() + 1);
                d.truncate(cut);
            }
            d
        };
        check_decode_roundtrip(&data);
    }
}

#[test]
fn protocol_headers_pass() {
    for data in [
        &b""[..],
        b"A",
        b"AMQP",
        b"AMQP\x00\x00\x09",
        b"AMQP\x00\x00\x09\x01",
        b"AMQP\x00\x00\x09\x01\x01\x00\x00",
        b"AMQP\x01\x01\x00\x0a",
        b"GET / HTTP/1.1\r\n",
        b"\x16\x03\x01",
    ] {
        check_decode_roundtrip(data);
    }
}

/// Writes the seed corpus from `crate::common::sample_frames` (run with `--ignored` after changing
/// the samples; the files are checked in). Names must not start with `0-9a-f`: `.gitignore`
/// keeps libFuzzer's hash-named discoveries out of git with that pattern.
#[test]
#[ignore]
fn regenerate_seed_corpus() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for (name, frames) in crate::common::sample_frames() {
        let bytes = crate::common::encode_all(&frames);
        std::fs::write(dir.join(format!("seed_{name}.bin")), bytes).unwrap();
    }
    let mut all = Vec::new();
    for (_, frames) in crate::common::sample_frames() {
        all.extend(frames);
    }
    std::fs::write(
        dir.join("seed_all_samples.bin"),
        crate::common::encode_all(&all),
    )
    .unwrap();
    std::fs::write(dir.join("raw_protocol_header.bin"), b"AMQP\x00\x00\x09\x01").unwrap();
}
