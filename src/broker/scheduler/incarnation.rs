//! Incarnations: an exchange (or queue) gets a number at declare, from one counter, and a
//! delayed exchange's held messages are its incarnation's. Deleting an exchange retires its
//! incarnation, purging one moves the exchange to a fresh one: the old incarnation's messages
//! are then simply not the exchange's any more, whatever is declared or published meanwhile,
//! and a namesake declared later is another incarnation.

use std::sync::atomic::{AtomicU64, Ordering};

/// The incarnation of a deleted exchange: no message is held for it, and none of its held
/// messages is released.
pub(crate) const RETIRED: u64 = 0;

/// Process-wide rather than per broker, so that numbers never repeat even across brokers in
/// one process (the tests run many): an incarnation is never taken for another's.
static NEXT: AtomicU64 = AtomicU64::new(RETIRED + 1);

/// A number no exchange or queue had before.
pub(crate) fn next_incarnation() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}
