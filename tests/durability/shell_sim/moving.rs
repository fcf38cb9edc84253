//! An operator moving held messages: released now, or held until another time up to 4 s
//! ahead. A move of the durable delayed exchange's message is one store commit: until it is
//! known committed, a power cut may leave the message held at any due time it had since
//! the last known commit (`Model::moved`).

use dwellmq::{DelayedMove, MoveDelayedError};

use super::{held_id, Sim, LATER};

impl Sim {
    pub(super) fn move_one(&mut self) -> String {
        let held = self.broker().delayed_messages("/", LATER, 10_000);
        if held.is_empty() {
            return "move: nothing held".into();
        }
        let info = &held[self.rng.below(held.len() as u64) as usize];
        let id = held_id(&info.routing_key).0;
        let now = self.broker().now_ms();
        let (to, due) = if self.rng.below(3) == 0 {
            (DelayedMove::Now, now)
        } else {
            let after = 1 + self.rng.below(4_000);
            (DelayedMove::After(after), now + after)
        };
        match self.broker().move_delayed(info.id, to) {
            Ok(_) => {
                // The next look checks its due time.
                self.model.moved(id, due);
                self.report.moves += 1;
                if due <= now {
                    // Released before the move returned, as an advance to now releases it.
                    self.model.advance(now);
                }
                format!("move held {id} to {due}")
            }
            Err(MoveDelayedError::NotFound(_)) => format!("move held {id}: already gone"),
            Err(e) => self.fail(&format!("moving held message {id} to {due} failed: {e}")),
        }
    }
}
