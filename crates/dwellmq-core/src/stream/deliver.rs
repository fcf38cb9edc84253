//! Moving records to consumers: delivering what a consumer fetched as its credit allows,
//! asking for the next read of its window, and handing what commits straight to the consumers
//! waiting at the tail.

use super::*;

impl<C: Clone> StreamState<C> {
    /// Delivers what consumer `at` fetched while its credit and channel allow, then asks for
    /// the next read of its window if it needs one.
    pub(super) fn pump(&mut self, at: usize, fx: &mut StreamEffects<C>) {
        let committed_end = self.committed_end;
        let first = self.log.first_offset();
        let read_bytes = self.settings.read_bytes;
        let Some(consumer) = self.consumers.get_mut(at) else {
            return;
        };
        while !consumer.fetched.is_empty() && consumer.slot.credit.can_take() {
            let Some(delivery) = consumer.fetched.pop_front() else {
                break;
            };
            consumer.slot.credit.took();
            fx.push(StreamEffect::Deliver {
                consumer: consumer.slot.handle.clone(),
                consumer_id: consumer.slot.id,
                delivery,
            });
        }
        let window = window_of(consumer.slot.credit.prefetch);
        // Double buffering: the next read is asked for while half the window is still there
        // to deliver, so a consumer replaying the log does not wait for each read.
        if consumer.reading.is_some()
            || consumer.retry_at.is_some()
            || consumer.fetched.len() > window / 2
        {
            return;
        }
        let from = consumer.cursor.max(first);
        consumer.cursor = from;
        if from >= committed_end {
            return;
        }
        let read_id = self.next_read;
        self.next_read += 1;
        consumer.reading = Some(read_id);
        fx.push(StreamEffect::Read(ReadRequest {
            read_id,
            consumer_id: consumer.slot.id,
            from_offset: from,
            end_offset: committed_end,
            limit: window - consumer.fetched.len(),
            max_bytes: read_bytes,
            not_before_ms: consumer.not_before_ms,
        }));
    }

    pub(super) fn pump_all(&mut self, fx: &mut StreamEffects<C>) {
        for at in 0..self.consumers.len() {
            self.pump(at, fx);
        }
    }

    /// Appends that just committed (offsets from `old_end` on, in order) go to the consumers
    /// that had fetched everything before: they take them from memory, as many as their window
    /// holds, and read the rest from the store later.
    pub(super) fn hand_over(&mut self, old_end: u64, committed: &[Pending]) {
        let new_end = self.committed_end;
        for consumer in &mut self.consumers {
            if !consumer.at_tail(old_end) {
                continue;
            }
            let window = window_of(consumer.slot.credit.prefetch);
            let mut complete = true;
            let start = consumer.cursor;
            for p in committed.iter().filter(|p| p.offset >= start) {
                if consumer.fetched.len() >= window {
                    complete = false;
                    break;
                }
                consumer.cursor = p.offset + 1;
                if consumer.wants(p.timestamp_ms) {
                    consumer.fetched.push_back(StreamDelivery {
                        offset: p.offset,
                        message: StreamMessage::Live(Arc::clone(&p.message)),
                    });
                }
            }
            if complete {
                // Past the gaps failed appends left too.
                consumer.cursor = consumer.cursor.max(new_end);
            }
        }
    }

    /// Asks for a tick at the next deadline: the head segment's age cut, a failed read's
    /// retry.
    pub(super) fn arm(&mut self, fx: &mut StreamEffects<C>) {
        let age = self
            .settings
            .max_age_ms
            .and_then(|age| self.log.next_age_cut(age));
        let retry = self.consumers.iter().filter_map(|c| c.retry_at).min();
        let Some(at) = [age, retry].into_iter().flatten().min() else {
            return;
        };
        if self.armed_at.is_none_or(|armed| at < armed) {
            self.armed_at = Some(at);
            fx.push(StreamEffect::Arm { at_ms: at });
        }
    }
}

/// A consumer's window: the records it may hold fetched and not delivered (its prefetch).
fn window_of(prefetch: u32) -> usize {
    (prefetch as usize).max(1)
}
