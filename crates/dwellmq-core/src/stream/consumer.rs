//! A stream consumer: a cursor in the log, its credit, and the few records read for it and not
//! delivered yet. It never holds more than one read's worth (its window), not the log.

use std::collections::VecDeque;
use std::sync::Arc;

use super::effects::StreamDelivery;
use crate::queue::ConsumerCredit;

/// A consumer as the shell attaches it.
#[derive(Debug)]
pub struct StreamConsumerSlot<C> {
    /// Unique among the stream's consumers; names it in later commands and in reads.
    pub id: u64,
    /// The shell's handle, returned in deliver effects.
    pub handle: C,
    /// Its prefetch (required: [`crate::arguments::check_stream_consume`]) and its channel's
    /// flow, congestion and closed state. Acks, nacks and rejects give credit back through it
    /// ([`ConsumerCredit::settled`]), as for queues.
    pub credit: Arc<ConsumerCredit>,
}

/// A consumer as the stream keeps it.
#[derive(Debug)]
pub(super) struct StreamConsumer<C> {
    pub(super) slot: StreamConsumerSlot<C>,
    /// The next offset to fetch (read from the store, or take from what commits).
    pub(super) cursor: u64,
    /// Records before this time are skipped (a consumer that starts at a time), until the first
    /// one at or after it.
    pub(super) not_before_ms: Option<u64>,
    /// The read asked for and not handed back.
    pub(super) reading: Option<u64>,
    /// A read failed: asked again at this time.
    pub(super) retry_at: Option<u64>,
    /// Fetched and not delivered yet (credit or the channel stopped it).
    pub(super) fetched: VecDeque<StreamDelivery>,
}

impl<C> StreamConsumer<C> {
    pub(super) fn new(
        slot: StreamConsumerSlot<C>,
        cursor: u64,
        not_before_ms: Option<u64>,
    ) -> Self {
        StreamConsumer {
            slot,
            cursor,
            not_before_ms,
            reading: None,
            retry_at: None,
            fetched: VecDeque::new(),
        }
    }

    /// Whether a record of time `timestamp_ms` is one to deliver (it ends the skip of a
    /// consumer that starts at a time).
    pub(super) fn wants(&mut self, timestamp_ms: u64) -> bool {
        match self.not_before_ms {
            Some(at) if timestamp_ms < at => false,
            _ => {
                self.not_before_ms = None;
                true
            }
        }
    }

    /// Whether it may take what commits straight from memory: everything committed before is
    /// fetched, nothing is being read, nothing waits in its window.
    pub(super) fn at_tail(&self, committed_end: u64) -> bool {
        self.reading.is_none() && self.fetched.is_empty() && self.cursor >= committed_end
    }
}
