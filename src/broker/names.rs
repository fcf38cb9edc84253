//! Server-generated names (`amq.gen-…` queues, `amq.ctag-…` consumer tags).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// `prefix` followed by 22 URL-safe base64 characters (128 bits), as RabbitMQ's names look.
///
/// Uniqueness, not secrecy, is what matters: a process-wide counter mixed with the start time.
pub(crate) fn server_generated_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut state = u128::from(splitmix(seed ^ n.rotate_left(32))) << 64 | u128::from(splitmix(n));
    let mut name = String::with_capacity(prefix.len() + 22);
    name.push_str(prefix);
    for _ in 0..22 {
        name.push(ALPHABET[(state & 63) as usize] as char);
        state >>= 6;
    }
    name
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_prefixed_and_distinct() {
        let a = super::server_generated_name("amq.gen-");
        let b = super::server_generated_name("amq.gen-");
        assert!(a.starts_with("amq.gen-") && a.len() == 30);
        assert_ne!(a, b);
    }
}
