//! The dwellmq scheduler: a hierarchical timing wheel and the clocks that
//! drive it.
//!
//! The broker keeps every delayed delivery and expiry in a [`TimerWheel`],
//! asks it for [`TimerWheel::next_due`] to know how long to sleep, and
//! calls [`TimerWheel::advance`] with the time from its [`Clock`] when it
//! wakes. Nothing here does IO, spawns tasks or reads the system clock,
//! except [`SystemClock`] (the wall clock once, then monotonic time) and its
//! [`WallSource`]s; tests use [`ManualClock`] and are deterministic.
//!
//! # Design
//!
//! **Levels and slots.** Due times are absolute milliseconds (`u64`). The
//! wheel has 11 levels of 64 slots; level `L` looks at bits `6L..6L+6` of
//! a due time (its level-`L` *digit*). An entry goes on the level of the
//! highest digit in which its due time differs from the wheel's `now`, in
//! the slot named by that digit. Level 0 therefore holds the next 64 ms
//! to the millisecond, level 1 the rest of the current ~4 s in 64 ms
//! slots, and so on; 11 × 6 = 66 bits cover every `u64`, so there is no
//! overflow list and a due time of `u64::MAX` is an ordinary entry.
//!
//! **Advancing.** Each level keeps a 64-bit mask of its non-empty slots.
//! The earliest pending entry is always in the lowest non-empty level's
//! first non-empty slot (all entries of a lower level share more leading
//! digits with `now`, so they are earlier). `advance` repeatedly takes that
//! slot: on level 0 it fires the slot's entries; above level 0 it moves
//! `now` to the slot's start and *cascades* the entries to lower levels.
//! Empty slots and levels cost nothing, so a jump of a year costs about as
//! much as a jump of a millisecond, plus one cascade per entry per level.
//!
//! **Ordering.** Entries fire by due time, then insertion order. Where an
//! entry lives is a function of `(now, due)` only, so entries with equal
//! due times are always in the same slot. Slot lists are only appended to,
//! and a cascade walks its list front to back while appending to the lower
//! slots, so equal due times stay in insertion order through any number of
//! cascades. Entries inserted already due (`due < now`) go to a separate
//! overdue list, which the next `advance` stable-sorts by due time and
//! fires first: they are all earlier than anything in the wheel proper.
//!
//! **Storage.** Entries live in a slab (a `Vec` of nodes with a free
//! list), and each slot is an intrusive doubly-linked list threaded through
//! the nodes by index. A timer costs one slab node and no allocation of
//! its own; freed nodes are reused, so a wheel in steady state does not
//! allocate. Insert, cancel and unlink from a slot are O(1) without
//! searching. A [`TimerKey`] is the node index plus a generation that is
//! bumped whenever the node is freed, so cancelling with a key whose timer
//! already fired or was cancelled returns `None` even if the node now
//! holds another timer.
//!
//! **`next_due`.** Each slot caches the minimum due time of its entries.
//! Cancelling a slot's minimum only marks the cache stale (recomputing it
//! would cost a walk on the cancel path); `next_due` then walks that one
//! slot. Level-0 slots need no cache: all their entries share one due time.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod clock;
mod system_clock;
mod wheel;

pub use clock::{Clock, ManualClock, SharedClock};
pub use system_clock::{HostWall, SteppableWall, SystemClock, WallSource};
pub use wheel::{Fired, TimerKey, TimerWheel};
