//! Where an entry lives in the wheel: pure arithmetic on due times.
//!
//! Level `L` slot `S` holds entries whose due time agrees with the wheel's
//! `now` on every bit above level `L`, and whose level-`L` digit (bits
//! `6L..6L+6`) is `S`. So the level is decided by the highest bit in which
//! `due` and `now` differ, and the slot is just a digit of `due`.

/// Bits of the due time consumed by each level.
pub(super) const SLOT_BITS: u32 = 6;

/// Slots per level; one bit each in a `u64` occupancy mask.
pub(super) const SLOTS: usize = 1 << SLOT_BITS;

/// Enough levels to cover all 64 bits of a due time (11 × 6 = 66 ≥ 64), so
/// any `u64` due time has a slot and no overflow list is needed. The top
/// level only ever uses its first 16 slots.
pub(super) const LEVELS: usize = 11;

const DIGIT_MASK: u64 = SLOTS as u64 - 1;

/// The level for an entry due at `due` while the wheel is at `now`.
///
/// `due == now` lands on level 0, in the slot `now` points at.
pub(super) fn level_for(now: u64, due: u64) -> usize {
    // OR-ing the lowest digit in keeps `leading_zeros` below 64, and maps
    // every difference confined to the lowest digit to level 0.
    let differing = (now ^ due) | DIGIT_MASK;
    let highest_differing_bit = 63 - differing.leading_zeros();
    (highest_differing_bit / SLOT_BITS) as usize
}

/// The slot of `due` on `level`: its level-`level` digit.
pub(super) fn slot_for(due: u64, level: usize) -> usize {
    ((due >> level_shift(level)) & DIGIT_MASK) as usize
}

/// The earliest time that can be stored in `slot` of `level` while the
/// wheel is at `now`: `now`'s bits above the level, the slot as the level's
/// digit, zeros below.
///
/// For level 0 this is the exact due time of every entry in the slot.
pub(super) fn slot_start(now: u64, level: usize, slot: usize) -> u64 {
    let shift = level_shift(level);
    let ring_bits = shift + SLOT_BITS;
    let above = if ring_bits >= u64::BITS {
        0
    } else {
        (now >> ring_bits) << ring_bits
    };
    above | ((slot as u64) << shift)
}

fn level_shift(level: usize) -> u32 {
    // LEVELS is 11, so the cast cannot truncate and the shift stays < 64.
    level as u32 * SLOT_BITS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_and_nearby_times_are_level_zero() {
        assert_eq!(level_for(0, 0), 0);
        assert_eq!(level_for(100, 100), 0);
        assert_eq!(level_for(64, 127), 0);
        assert_eq!(level_for(63, 64), 1);
    }

    #[test]
    fn level_follows_highest_differing_digit() {
        assert_eq!(level_for(0, 1 << 6), 1);
        assert_eq!(level_for(0, (1 << 12) - 1), 1);
        assert_eq!(level_for(0, 1 << 12), 2);
        assert_eq!(level_for(0, u64::MAX), LEVELS - 1);
        assert_eq!(level_for(u64::MAX - 1, u64::MAX), 0);
    }

    #[test]
    fn slot_start_rebuilds_the_due_prefix() {
        let now = 0x1234_5678_9abc_def0;
        for due in [
            now,
            now + 1,
            now + 64,
            now + 5_000,
            now + (1 << 40),
            u64::MAX,
        ] {
            let level = level_for(now, due);
            let slot = slot_for(due, level);
            let start = slot_start(now, level, slot);
            let span_mask = (1u64 << level_shift(level)) - 1;
            assert_eq!(start, due & !span_mask, "due {due:#x} level {level}");
        }
    }

    #[test]
    fn top_level_slot_start_does_not_overflow() {
        assert_eq!(slot_start(0, LEVELS - 1, 15), 15 << 60);
        assert_eq!(slot_for(u64::MAX, LEVELS - 1), 15);
    }
}
