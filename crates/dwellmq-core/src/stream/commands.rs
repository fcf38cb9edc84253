//! The commands a stream takes: each carries `now` in and leaves its effects in the sink.

use super::*;

impl<C: Clone> StreamState<C> {
    /// A message routed to the stream: it takes the next offset, returned. The `Append` effect
    /// carries it to the store; consumers see it once its commit is known ([`Self::sync`]).
    pub fn publish(
        &mut self,
        message: Arc<Message>,
        now_ms: u64,
        fx: &mut StreamEffects<C>,
    ) -> u64 {
        let bytes = record_bytes(&message);
        let placed = self.log.append(
            now_ms,
            bytes,
            self.settings.max_segment_bytes,
            self.settings.chunk_bytes(),
        );
        self.pending.push_back(Pending {
            offset: placed.offset,
            timestamp_ms: placed.timestamp_ms,
            bytes,
            message: Arc::clone(&message),
        });
        fx.push(StreamEffect::Append {
            offset: placed.offset,
            timestamp_ms: placed.timestamp_ms,
            segment: placed.segment,
            chunk: placed.chunk,
            message,
        });
        if placed.rolled {
            self.apply_retention(now_ms, fx);
        }
        placed.offset
    }

    /// Takes in the append completions `progress` holds: committed records become readable
    /// (and go straight to the consumers waiting at the tail, without a store read), failed
    /// ones leave gaps.
    pub fn sync(&mut self, progress: &StreamProgress, _now_ms: u64, fx: &mut StreamEffects<C>) {
        let settled_below = progress.settled_below().min(self.log.next_offset());
        if settled_below <= self.committed_end {
            return;
        }
        let failed = progress.take_failed_below(settled_below);
        let old_end = self.committed_end;
        // Appends retention dropped before they committed are gone from the log already.
        let first = self.log.first_offset();
        let mut committed = Vec::new();
        while self
            .pending
            .front()
            .is_some_and(|p| p.offset < settled_below)
        {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            let ok = failed.binary_search(&p.offset).is_err();
            self.log.settle(p.offset, p.bytes, ok);
            if ok && p.offset >= first {
                self.last_committed = Some(p.offset);
                committed.push(p);
            }
        }
        self.committed_end = settled_below;
        self.hand_over(old_end, &committed);
        self.pump_all(fx);
    }

    /// Attaches a consumer that starts where `spec` says, and delivers what it can take.
    pub fn consume(
        &mut self,
        slot: StreamConsumerSlot<C>,
        spec: OffsetSpec,
        now_ms: u64,
        fx: &mut StreamEffects<C>,
    ) -> Result<(), StreamConsumeRefused> {
        if self.deleted {
            return Err(StreamConsumeRefused::Deleted);
        }
        if self.consumer_index(slot.id).is_some() {
            return Err(StreamConsumeRefused::DuplicateId);
        }
        let first = self.log.first_offset();
        let (cursor, not_before_ms) = match spec {
            OffsetSpec::First => (first, None),
            OffsetSpec::Last => (
                self.last_committed
                    .filter(|&last| last >= first)
                    .unwrap_or(self.log.next_offset()),
                None,
            ),
            OffsetSpec::Next => (self.log.next_offset(), None),
            OffsetSpec::Offset(n) => (n.max(first), None),
            OffsetSpec::Timestamp { ms } => (self.log.start_for_timestamp(ms), Some(ms)),
            OffsetSpec::Ago { ms } => {
                let at = now_ms.saturating_sub(ms);
                (self.log.start_for_timestamp(at), Some(at))
            }
        };
        self.consumers
            .push(StreamConsumer::new(slot, cursor, not_before_ms));
        let at = self.consumers.len() - 1;
        self.pump(at, fx);
        Ok(())
    }

    /// Removes a consumer; its handle, if it was attached. A read in flight for it is dropped
    /// when it comes back.
    pub fn cancel(&mut self, consumer_id: u64) -> Option<C> {
        let at = self.consumer_index(consumer_id)?;
        Some(self.consumers.remove(at).slot.handle)
    }

    /// Deliveries of this consumer were settled (acked, nacked or rejected, whatever the
    /// requeue flag, or recovered): the shell gave their credit back
    /// ([`crate::queue::ConsumerCredit::settled`]); the consumer reads on. A stream removes
    /// nothing and redelivers nothing.
    pub fn settled(&mut self, consumer_id: u64, _now_ms: u64, fx: &mut StreamEffects<C>) {
        if let Some(at) = self.consumer_index(consumer_id) {
            self.pump(at, fx);
        }
    }

    /// Delivers to every consumer what it can take now (a channel's flow came back, or its
    /// connection's output drained).
    pub fn drain(&mut self, _now_ms: u64, fx: &mut StreamEffects<C>) {
        self.pump_all(fx);
    }

    /// A `Read` came back. A read for a consumer gone, or superseded, is dropped.
    pub fn read_done(&mut self, result: ReadResult, _now_ms: u64, fx: &mut StreamEffects<C>) {
        let Some(at) = self.consumer_index(result.consumer_id) else {
            return;
        };
        let consumer = &mut self.consumers[at];
        if consumer.reading != Some(result.read_id) {
            return;
        }
        consumer.reading = None;
        for record in result.records {
            if record.offset < consumer.cursor || !consumer.wants(record.timestamp_ms) {
                continue;
            }
            consumer.cursor = record.offset + 1;
            consumer.fetched.push_back(StreamDelivery {
                offset: record.offset,
                message: StreamMessage::Stored(record.message),
            });
        }
        consumer.cursor = consumer.cursor.max(result.next_offset);
        self.pump(at, fx);
    }

    /// A `Read` could not be carried out (the store could not be read): it is asked again
    /// [`READ_RETRY_MS`] later.
    pub fn read_failed(&mut self, request: &ReadRequest, now_ms: u64, fx: &mut StreamEffects<C>) {
        let Some(at) = self.consumer_index(request.consumer_id) else {
            return;
        };
        let consumer = &mut self.consumers[at];
        if consumer.reading == Some(request.read_id) {
            consumer.reading = None;
            consumer.retry_at = Some(now_ms.saturating_add(READ_RETRY_MS));
            self.arm(fx);
        }
    }

    /// Deadlines: retention by age, failed reads asked again.
    pub fn tick(&mut self, now_ms: u64, fx: &mut StreamEffects<C>) {
        self.armed_at = None;
        self.apply_retention(now_ms, fx);
        for consumer in &mut self.consumers {
            if consumer.retry_at.is_some_and(|at| at <= now_ms) {
                consumer.retry_at = None;
            }
        }
        self.pump_all(fx);
        self.arm(fx);
    }

    /// New settings (a policy changed): a lower retention takes effect at once, a segment
    /// size from the next segment on.
    pub fn set_settings(
        &mut self,
        settings: StreamSettings,
        now_ms: u64,
        fx: &mut StreamEffects<C>,
    ) {
        self.settings = settings;
        self.armed_at = None;
        self.apply_retention(now_ms, fx);
        self.arm(fx);
    }

    /// The stream is deleted: its consumers' handles, to tell them (`basic.cancel`). The
    /// store's log goes with the queue's deletion (`Op::DeleteQueue` of its id).
    pub fn delete(&mut self) -> Vec<C> {
        self.deleted = true;
        self.pending.clear();
        self.consumers.drain(..).map(|c| c.slot.handle).collect()
    }

    /// Drops the head segments retention no longer keeps.
    fn apply_retention(&mut self, now_ms: u64, fx: &mut StreamEffects<C>) {
        let cut = self.log.retention_cut(
            self.settings.max_length_bytes,
            self.settings.max_age_ms,
            now_ms,
        );
        if let Some(before_offset) = cut {
            self.log.drop_before(before_offset);
            if self.last_committed.is_some_and(|last| last < before_offset) {
                self.last_committed = None;
            }
            fx.push(StreamEffect::Truncate { before_offset });
        }
        self.arm(fx);
    }
}
