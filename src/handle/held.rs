//! Operator control of held messages that the handle and the HTTP API share: moving one to
//! another due time.

use crate::broker::delayed::{DelayedId, DelayedMove, MoveDelayedError};
use crate::broker::BrokerState;

/// Moves the held message `id` (of the delayed exchange `of`, any with `None`) as `to` says,
/// the due time checked against the broker's clock; returns its new id. Under a manual clock
/// a message moved to now is released before this returns, as time would under the system
/// clock (nothing else is due then: the clock's last step served everything up to now).
pub(crate) fn move_held(
    state: &BrokerState,
    of: Option<(&str, &str)>,
    id: DelayedId,
    to: DelayedMove,
) -> Result<DelayedId, MoveDelayedError> {
    let now_ms = state.clock.now_ms();
    let due_ms = to.due_ms(now_ms)?;
    let moved = state.delayed.move_held(id, of, due_ms)?;
    if let Some(clock) = state.manual_clock.as_deref() {
        if due_ms <= now_ms {
            super::clock::release_due(state, clock, now_ms);
        }
    }
    Ok(moved)
}
