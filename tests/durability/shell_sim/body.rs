//! Message bodies: each a function of its message's id and length, so that every sighting
//! and every delivery can be checked byte for byte without the model storing any body.

/// Bodies over this are kept as published rather than packed by the broker
/// (`dwellmq_core::PACK_BODY_LIMIT`): a few of the simulation's bodies are above it.
const PACK_BODY_LIMIT: usize = 4096;

/// The longest filler a body has (beyond its id and colon).
pub const MAX_FILLER: usize = PACK_BODY_LIMIT + 4_096;

/// The largest body: an id of up to 20 digits, a colon, the longest filler.
pub const MAX_BODY: usize = 21 + MAX_FILLER;

/// The body of message `id` with `filler` octets after its prefix: its id in decimal, a
/// colon, then pseudo-random octets drawn from the id (not UTF-8 in general).
pub fn body_for(id: u64, filler: usize) -> Vec<u8> {
    let mut body = format!("{id}:").into_bytes();
    let prefix = body.len();
    let mut state = id;
    while body.len() < prefix + filler {
        state = mix(state);
        body.extend_from_slice(&state.to_le_bytes());
    }
    body.truncate(prefix + filler);
    body
}

/// A filler length for a message to a queue that cannot page (quorum queues, whose bodies
/// all stay in memory): mostly short, a quarter up to 2 KiB.
pub fn small_filler(roll: u64) -> usize {
    let filler = match roll % 100 {
        0..=74 => (roll >> 8) % 49,
        _ => 49 + (roll >> 8) % 2_000,
    };
    filler as usize
}

/// A filler length for a message to a classic queue: as [`small_filler`], but one in ten
/// is over [`PACK_BODY_LIMIT`], so that unpacked messages page, spill and restart too.
pub fn classic_filler(roll: u64) -> usize {
    if roll.is_multiple_of(10) {
        PACK_BODY_LIMIT + 1 + ((roll >> 8) % 4_096) as usize
    } else {
        small_filler(roll >> 4)
    }
}

/// The id a body starts with (`u64::MAX` if it is not one of ours).
pub fn id_of(body: &[u8]) -> u64 {
    let end = body.iter().position(|&b| b == b':').unwrap_or(body.len());
    std::str::from_utf8(&body[..end])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX)
}

/// Checks that `body` is message `id`'s, byte for byte: returns its filler's length (which
/// the model compares with the length published), or what differs.
pub fn check_body(id: u64, body: &[u8]) -> Result<usize, String> {
    let prefix = format!("{id}:").len();
    let filler = body.len().saturating_sub(prefix);
    let expected = body_for(id, filler);
    if body == expected.as_slice() {
        return Ok(filler);
    }
    let first_difference = body
        .iter()
        .zip(&expected)
        .position(|(a, b)| a != b)
        .unwrap_or(body.len().min(expected.len()));
    Err(format!(
        "message {id}'s body ({} octets) differs from what was published at octet {first_difference}",
        body.len()
    ))
}

/// SplitMix64's finaliser: a well-spread function of its input.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn bodies_carry_their_id_and_are_checked_byte_for_byte() {
    for (id, filler) in [(1, 0), (42, 7), (1_999, 5_000)] {
        let body = body_for(id, filler);
        assert_eq!(id_of(&body), id);
        assert_eq!(check_body(id, &body), Ok(filler));
        assert!(check_body(id + 1, &body).is_err());
        if filler > 0 {
            let mut changed = body.clone();
            *changed.last_mut().unwrap() ^= 1;
            assert!(check_body(id, &changed).is_err());
        }
    }
    assert!((0..1_000).any(|r| classic_filler(r) > PACK_BODY_LIMIT));
    assert!((0..1_000).all(|r| small_filler(r) < 2_049));
}
