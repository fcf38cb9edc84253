//! Passwords as RabbitMQ stores them: `base64(salt ++ hash(salt ++ utf8(password)))` with a
//! 4-byte random salt, so that a `password_hash` from a RabbitMQ definitions file logs in here
//! and one exported from here logs in to RabbitMQ.

use base64::Engine;
use sha2::{Digest, Sha256, Sha512};

/// RabbitMQ's salt length (`rabbit_password:generate_salt/0`).
const SALT_LEN: usize = 4;

/// A hashing algorithm, by RabbitMQ's module name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HashingAlgorithm {
    /// `rabbit_password_hashing_sha256`, RabbitMQ's default since 3.6.
    Sha256,
    /// `rabbit_password_hashing_sha512`.
    Sha512,
}

impl HashingAlgorithm {
    /// RabbitMQ's name, as definitions carry it in `hashing_algorithm`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            HashingAlgorithm::Sha256 => "rabbit_password_hashing_sha256",
            HashingAlgorithm::Sha512 => "rabbit_password_hashing_sha512",
        }
    }

    /// The algorithm a definitions file names. MD5 (RabbitMQ before 3.6) is refused: its
    /// hashes are too cheap to keep.
    pub(crate) fn parse(name: &str) -> Result<Self, PasswordError> {
        match name {
            "rabbit_password_hashing_sha256" => Ok(HashingAlgorithm::Sha256),
            "rabbit_password_hashing_sha512" => Ok(HashingAlgorithm::Sha512),
            other => Err(PasswordError::UnsupportedAlgorithm(other.to_string())),
        }
    }

    fn digest(self, salt: &[u8], password: &str) -> Vec<u8> {
        match self {
            HashingAlgorithm::Sha256 => Sha256::new()
                .chain_update(salt)
                .chain_update(password.as_bytes())
                .finalize()
                .to_vec(),
            HashingAlgorithm::Sha512 => Sha512::new()
                .chain_update(salt)
                .chain_update(password.as_bytes())
                .finalize()
                .to_vec(),
        }
    }

    fn digest_len(self) -> usize {
        match self {
            HashingAlgorithm::Sha256 => 32,
            HashingAlgorithm::Sha512 => 64,
        }
    }
}

/// Why a stored hash cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PasswordError {
    #[error("unsupported hashing_algorithm '{0}' (dwellmq supports rabbit_password_hashing_sha256 and rabbit_password_hashing_sha512)")]
    UnsupportedAlgorithm(String),
    #[error("password_hash is not base64 of a 4-byte salt and a {0} hash")]
    Malformed(&'static str),
    #[error("the operating system's random source failed")]
    Random,
}

/// A stored password, or none (RabbitMQ's empty `password_hash`: password logins refused).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct PasswordHash {
    algorithm: HashingAlgorithm,
    /// Salt followed by the digest; empty for a user without a password.
    stored: Vec<u8>,
}

impl std::fmt::Debug for PasswordHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the hash: it is something to crack.
        f.debug_struct("PasswordHash")
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

impl PasswordHash {
    /// Hashes `password` with a fresh random salt.
    pub(crate) fn new(algorithm: HashingAlgorithm, password: &str) -> Result<Self, PasswordError> {
        let mut salt = [0u8; SALT_LEN];
        getrandom::fill(&mut salt).map_err(|_| PasswordError::Random)?;
        Ok(Self::with_salt(algorithm, salt, password))
    }

    /// No password: password logins are refused (RabbitMQ's empty `password_hash`).
    pub(crate) fn none() -> Self {
        PasswordHash {
            algorithm: HashingAlgorithm::Sha256,
            stored: Vec::new(),
        }
    }

    fn with_salt(algorithm: HashingAlgorithm, salt: [u8; SALT_LEN], password: &str) -> Self {
        let mut stored = salt.to_vec();
        stored.extend(algorithm.digest(&salt, password));
        PasswordHash { algorithm, stored }
    }

    /// A hash as definitions carry it (`password_hash`, base64). An empty one means the user
    /// has no password, as in RabbitMQ.
    pub(crate) fn decode(
        algorithm: HashingAlgorithm,
        encoded: &str,
    ) -> Result<Self, PasswordError> {
        let stored = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| PasswordError::Malformed(algorithm.name()))?;
        if !stored.is_empty() && stored.len() != SALT_LEN + algorithm.digest_len() {
            return Err(PasswordError::Malformed(algorithm.name()));
        }
        Ok(PasswordHash { algorithm, stored })
    }

    /// A hash from its raw octets (salt, then digest; empty: no password), as the durable
    /// store keeps it.
    pub(crate) fn from_raw(
        algorithm: HashingAlgorithm,
        stored: &[u8],
    ) -> Result<Self, PasswordError> {
        if !stored.is_empty() && stored.len() != SALT_LEN + algorithm.digest_len() {
            return Err(PasswordError::Malformed(algorithm.name()));
        }
        Ok(PasswordHash {
            algorithm,
            stored: stored.to_vec(),
        })
    }

    /// The raw octets: salt, then digest (empty: no password).
    pub(crate) fn raw(&self) -> &[u8] {
        &self.stored
    }

    /// The `password_hash` definitions carry.
    pub(crate) fn encode(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.stored)
    }

    pub(crate) fn algorithm(&self) -> HashingAlgorithm {
        self.algorithm
    }

    /// Whether `password` is this one. A user without a password matches nothing.
    pub(crate) fn verify(&self, password: &str) -> bool {
        let Some((salt, digest)) = self.stored.split_at_checked(SALT_LEN) else {
            return false;
        };
        if digest.is_empty() {
            return false;
        }
        let computed = self.algorithm.digest(salt, password);
        // Constant time over the digest, so the comparison leaks nothing of it.
        computed.len() == digest.len()
            && computed
                .iter()
                .zip(digest)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_as_rabbitmq_does() {
        // base64(salt ++ sha256(salt ++ "guest")) for salt 908DC60A, computed apart from this
        // code (Python's hashlib), as RabbitMQ's rabbit_password:salted_hash/3 forms it.
        let hash =
            PasswordHash::with_salt(HashingAlgorithm::Sha256, [0x90, 0x8D, 0xC6, 0x0A], "guest");
        assert_eq!(
            hash.encode(),
            "kI3GCrswBLNZQzHJJ95QLoyfAVooYhnvf7jbqiW9BjOYUloe"
        );
        assert!(hash.verify("guest"));
        assert!(!hash.verify("guesT"));
        let decoded = PasswordHash::decode(HashingAlgorithm::Sha256, &hash.encode()).unwrap();
        assert!(decoded.verify("guest"));
    }

    #[test]
    fn a_hash_exported_by_rabbitmq_verifies() {
        // guest's hash from a RabbitMQ 3.13 definitions export.
        let hash = PasswordHash::decode(
            HashingAlgorithm::Sha256,
            "BMfxN8drrYcIqXZMr+pWTpDT0nMcOagMduLX0bjr4jwud/pN",
        )
        .unwrap();
        assert!(hash.verify("guest"));
        assert!(!hash.verify("guest "));
    }

    #[test]
    fn fresh_hashes_verify_and_differ() {
        for algorithm in [HashingAlgorithm::Sha256, HashingAlgorithm::Sha512] {
            let a = PasswordHash::new(algorithm, "s3cret").unwrap();
            let b = PasswordHash::new(algorithm, "s3cret").unwrap();
            assert!(a.verify("s3cret") && b.verify("s3cret"));
            assert_ne!(a.encode(), b.encode(), "salted");
            assert!(PasswordHash::decode(algorithm, &a.encode())
                .unwrap()
                .verify("s3cret"));
        }
    }

    #[test]
    fn bad_hashes_are_refused_and_empty_ones_match_nothing() {
        assert!(PasswordHash::decode(HashingAlgorithm::Sha256, "!!").is_err());
        assert!(PasswordHash::decode(HashingAlgorithm::Sha256, "AAAA").is_err());
        let none = PasswordHash::decode(HashingAlgorithm::Sha256, "").unwrap();
        assert!(!none.verify(""));
        assert!(HashingAlgorithm::parse("rabbit_password_hashing_md5").is_err());
    }
}
