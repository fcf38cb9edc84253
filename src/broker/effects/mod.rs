//! The vhost-level executor: what a queue cannot do on its own it hands up as an
//! [`Aftermath`], and this module carries it out for the queue's vhost (`impl QueueOwner for
//! VHost`). It sits above the vhost, the publish pipeline and the queue; none of them imports
//! it (a queue reaches it only through the `&dyn QueueOwner` its caller passes).
//!
//! The order, for one aftermath (the queue's lock is released by then):
//!
//! 1. **Arm**: the queue's next tick is armed in the broker's scheduler (one tick at the
//!    earliest deadline the command asked for).
//! 2. **Dead letters** of the command are routed through the dead-letter exchange by the
//!    publish pipeline ([`dead_letters`]); with at-least-once dead-lettering, what not every
//!    target took is handed back to the queue to keep.
//! 3. **Retries** of kept dead letters (a due retry, or a binding added) are routed likewise.
//!
//!    Steps 2 and 3 run inside the store group the queue opened under its lock with the
//!    removal of those messages, so that their removal and their copies commit together; the
//!    group ends here.
//! 4. **Keeping noted**: a queue that keeps dead letters is listed for the vhost's binds.
//! 5. **Expiry** (`x-expires`): the queue is deleted by the vhost's one delete cascade
//!    ([`expiry`]), last, since the deletion drops whatever the queue still keeps.

mod dead_letters;
mod expiry;

use std::sync::{Arc, Weak};

use crate::broker::queue::{Aftermath, Queue, QueueOwner};
use crate::broker::vhost::VHost;

impl QueueOwner for VHost {
    fn carry_out(&self, queue: &Arc<Queue>, aftermath: Aftermath<'_>, now_ms: u64) {
        let Aftermath {
            arm_at,
            dead,
            dead_letter_target,
            at_least_once,
            retry,
            keeps_dead_letters,
            group,
            expire,
        } = aftermath;
        if let Some(at_ms) = arm_at {
            queue.arm(&self.runtime().scheduler, QueueOwner::weak(self), at_ms);
        }
        if let Some(target) = &dead_letter_target {
            let route = dead_letters::Routing {
                vhost: self,
                queue,
                target,
                now_ms,
            };
            if !dead.is_empty() {
                route.dead(dead, at_least_once);
            }
            if !retry.is_empty() {
                route.attempt_at_least_once(retry, false);
            }
        }
        drop(group);
        if keeps_dead_letters {
            self.note_keeping_dead_letters(queue);
        }
        if expire {
            expiry::expire(self, queue);
        }
    }

    fn weak(&self) -> Weak<dyn QueueOwner> {
        self.me().clone()
    }
}
