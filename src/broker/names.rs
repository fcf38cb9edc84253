//! Server-generated names: `amq.gen-…` queues, `amq.ctag-…` consumer tags and direct reply-to
//! addresses.
//!
//! Each carries 128 bits from the operating system's CSPRNG, written as RabbitMQ writes them
//! (22 URL-safe base64 characters, no padding). They must be unguessable, not only unique: a
//! reply address is a capability (whoever knows it can send to that consumer), and a client
//! that learns one name must learn nothing about the next. A broker configured with
//! `BrokerConfig::name_seed` draws them from a seeded generator instead, so that a test run
//! can be reproduced name for name; that is for tests only.

use dwellmq_core::{BrokerError, BrokerResult};
use parking_lot::Mutex;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Random octets per name: RabbitMQ's `rabbit_guid` is 128 bits too.
const NAME_BYTES: usize = 16;

/// Characters a name adds to its prefix.
pub(crate) const NAME_CHARS: usize = (NAME_BYTES * 8).div_ceil(6);

/// Where the broker's names come from.
pub(crate) struct NameGenerator {
    /// `Some` only for a seeded (reproducible, guessable) test broker.
    seeded: Option<Mutex<u64>>,
}

impl NameGenerator {
    /// Names from the operating system's CSPRNG, or from `seed` when one is given.
    pub(crate) fn new(seed: Option<u64>) -> Self {
        NameGenerator {
            seeded: seed.map(Mutex::new),
        }
    }

    /// `prefix` followed by 22 random URL-safe base64 characters. Fails only when the
    /// operating system cannot supply random octets (541 `INTERNAL_ERROR`): a predictable
    /// fallback would quietly break what the names promise.
    pub(crate) fn generate(&self, prefix: &str) -> BrokerResult<String> {
        let mut bytes = [0u8; NAME_BYTES];
        match &self.seeded {
            Some(state) => {
                let mut state = state.lock();
                for chunk in bytes.chunks_mut(8) {
                    chunk.copy_from_slice(&splitmix(&mut state).to_le_bytes());
                }
            }
            None => getrandom::fill(&mut bytes).map_err(|error| {
                tracing::error!(%error, "the operating system supplied no random octets");
                BrokerError::InternalError(format!("cannot generate a name: {error}"))
            })?,
        }
        Ok(encode(prefix, &bytes))
    }
}

/// `prefix` and `bytes` in URL-safe base64 without padding (RFC 4648 §5), as RabbitMQ's
/// `rabbit_guid:binary/2` writes names.
fn encode(prefix: &str, bytes: &[u8]) -> String {
    let mut name = String::with_capacity(prefix.len() + NAME_CHARS);
    name.push_str(prefix);
    for group in bytes.chunks(3) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        // 3 octets make 4 characters; a final 1 or 2 make 2 or 3.
        for i in 0..=group.len() {
            name.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    name
}

/// SplitMix64: a small generator whose output is well mixed for any seed, including 0.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut x = *state;
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn is_rabbit_name(name: &str, prefix: &str) -> bool {
        let Some(rest) = name.strip_prefix(prefix) else {
            return false;
        };
        // 128 bits in 22 characters: the last one carries 2 bits followed by four zero bits.
        rest.len() == 22
            && rest.bytes().all(|c| ALPHABET.contains(&c))
            && rest.ends_with(['A', 'Q', 'g', 'w'])
    }

    #[test]
    fn encoding_matches_base64url_without_padding() {
        // RFC 4648 test vectors, with '+' and '/' as '-' and '_'.
        assert_eq!(encode("", b""), "");
        assert_eq!(encode("", b"f"), "Zg");
        assert_eq!(encode("", b"fo"), "Zm8");
        assert_eq!(encode("", b"foo"), "Zm9v");
        assert_eq!(encode("", b"foob"), "Zm9vYg");
        assert_eq!(encode("", &[0xfb, 0xff, 0xbf]), "-_-_");
        assert_eq!(
            encode("amq.gen-", &[0; 16]),
            "amq.gen-AAAAAAAAAAAAAAAAAAAAAA"
        );
        assert_eq!(encode("", &[0xff; 16]), "_____________________w");
    }

    #[test]
    fn names_from_the_os_look_like_rabbitmqs_and_all_differ() {
        let names = NameGenerator::new(None);
        let drawn: Vec<String> = (0..1000)
            .map(|_| names.generate("amq.gen-").unwrap())
            .collect();
        for name in &drawn {
            assert!(is_rabbit_name(name, "amq.gen-"), "{name}");
        }
        assert_eq!(drawn.iter().collect::<HashSet<_>>().len(), drawn.len());
        // Unpredictable, not a counter: consecutive names share no long common prefix, and
        // every position of the name takes many values.
        for pair in drawn.windows(2) {
            let common = pair[0]
                .bytes()
                .zip(pair[1].bytes())
                .skip("amq.gen-".len())
                .take_while(|(a, b)| a == b)
                .count();
            assert!(common < 8, "{} then {}", pair[0], pair[1]);
        }
        for position in 8..8 + 21 {
            let values: HashSet<u8> = drawn.iter().map(|n| n.as_bytes()[position]).collect();
            assert!(values.len() > 32, "position {position}: {values:?}");
        }
    }

    #[test]
    fn two_unseeded_generators_differ() {
        let a = NameGenerator::new(None).generate("amq.ctag-").unwrap();
        let b = NameGenerator::new(None).generate("amq.ctag-").unwrap();
        assert!(is_rabbit_name(&a, "amq.ctag-"), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn a_seed_reproduces_the_sequence() {
        let draw = |seed| {
            let names = NameGenerator::new(Some(seed));
            ["amq.gen-", "amq.ctag-", "amq.gen-"].map(|p| names.generate(p).unwrap())
        };
        let first = draw(7);
        assert_eq!(first, draw(7));
        assert_ne!(first, draw(8));
        assert_ne!(first[0], first[2]);
        assert!(is_rabbit_name(&first[1], "amq.ctag-"), "{}", first[1]);
    }
}
