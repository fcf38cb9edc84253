//! A harness for the stream's tests: the shell's part played in memory (a store holding the
//! committed records, reads carried out when the test says, deliveries collected and checked).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use dwellmq_codec::{BasicProperties, FieldValue};

use super::*;
use crate::body::Body;
use crate::packed::PackedMessage;
use crate::queue::{ChannelCredit, ConsumerCredit};

pub(super) fn message(body: &[u8]) -> Arc<Message> {
    Message::new(
        "ex".into(),
        "rk".into(),
        BasicProperties {
            content_type: Some("text/plain".into()),
            ..Default::default()
        },
        Body::Single(Bytes::copy_from_slice(body)),
        None,
    )
}

/// A channel with one consumer's credit on it (no congestion cap).
pub(super) fn credit(prefetch: u32) -> Arc<ConsumerCredit> {
    let channel = Arc::new(ChannelCredit::new(Arc::default()));
    Arc::new(ConsumerCredit::new(channel, prefetch, false))
}

/// The reference read: what the store does for a request (committed records of the range in
/// offset order, older than `not_before_ms` skipped, up to the limits).
pub(super) fn read(store: &BTreeMap<u64, StreamRecord>, request: &ReadRequest) -> ReadResult {
    let mut result = ReadResult::empty(request, request.end_offset);
    let mut bytes = 0;
    for (&offset, record) in store.range(request.from_offset..request.end_offset) {
        if request
            .not_before_ms
            .is_some_and(|at| record.timestamp_ms < at)
        {
            continue;
        }
        if result.records.len() >= request.limit
            || (bytes >= request.max_bytes && !result.records.is_empty())
        {
            result.next_offset = offset;
            break;
        }
        bytes += record.bytes();
        result.records.push(record.clone());
    }
    result
}

/// One append as the harness saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Appended {
    pub(super) timestamp_ms: u64,
    pub(super) body: Vec<u8>,
    /// `Some(true)` once committed, `Some(false)` once failed.
    pub(super) outcome: Option<bool>,
}

/// One delivery as a consumer saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Seen {
    pub(super) offset: u64,
    pub(super) body: Vec<u8>,
}

pub(super) struct Harness {
    pub(super) state: StreamState<u64>,
    pub(super) progress: StreamProgress,
    fx: StreamEffects<u64>,
    pub(super) now: u64,
    /// Committed records (what the store holds).
    pub(super) store: BTreeMap<u64, StreamRecord>,
    /// Appends submitted and not completed: (offset, timestamp, message).
    pub(super) in_flight: VecDeque<(u64, u64, Arc<Message>)>,
    pub(super) reads: VecDeque<ReadRequest>,
    pub(super) seen: BTreeMap<u64, Vec<Seen>>,
    /// For each delivery in `seen`, where retention had cut the log when it was delivered.
    pub(super) cut_at_delivery: BTreeMap<u64, Vec<u64>>,
    /// Every append, by offset, never truncated (the reference).
    pub(super) history: BTreeMap<u64, Appended>,
    pub(super) credits: BTreeMap<u64, Arc<ConsumerCredit>>,
    pub(super) armed: Vec<u64>,
    pub(super) truncated_before: u64,
}

impl Harness {
    pub(super) fn new(settings: StreamSettings) -> Harness {
        Harness::restored(settings, &StoredLog::default())
    }

    pub(super) fn restored(settings: StreamSettings, stored: &StoredLog) -> Harness {
        let state = StreamState::restore(settings, stored);
        Harness {
            progress: StreamProgress::starting_at(state.next_offset()),
            state,
            fx: StreamEffects::new(),
            now: 1_000_000,
            store: BTreeMap::new(),
            in_flight: VecDeque::new(),
            reads: VecDeque::new(),
            seen: BTreeMap::new(),
            cut_at_delivery: BTreeMap::new(),
            history: BTreeMap::new(),
            credits: BTreeMap::new(),
            armed: Vec::new(),
            truncated_before: 0,
        }
    }

    /// Carries out the effects of the last command.
    pub(super) fn effects(&mut self) {
        let effects: Vec<_> = self.fx.drain().collect();
        for effect in effects {
            match effect {
                StreamEffect::Append {
                    offset,
                    timestamp_ms,
                    message,
                    ..
                } => {
                    let previous = self.history.insert(
                        offset,
                        Appended {
                            timestamp_ms,
                            body: message.body.chunks().concat(),
                            outcome: None,
                        },
                    );
                    assert!(previous.is_none(), "offset {offset} appended twice");
                    self.in_flight.push_back((offset, timestamp_ms, message));
                }
                StreamEffect::Truncate { before_offset } => {
                    assert!(
                        before_offset >= self.truncated_before,
                        "truncation went back"
                    );
                    self.truncated_before = before_offset;
                    self.store.retain(|&offset, _| offset >= before_offset);
                }
                StreamEffect::Read(request) => self.reads.push_back(request),
                StreamEffect::Deliver {
                    consumer,
                    consumer_id,
                    delivery,
                } => {
                    assert_eq!(consumer, consumer_id);
                    let offset = delivery.offset;
                    let message = delivery.into_message().expect("a delivery unpacks");
                    let header = message
                        .properties
                        .headers
                        .as_ref()
                        .and_then(|h| h.get(OFFSET_HEADER).cloned());
                    assert_eq!(header, Some(FieldValue::I64(offset as i64)));
                    assert_eq!(
                        message.properties.content_type.as_deref(),
                        Some("text/plain")
                    );
                    self.cut_at_delivery
                        .entry(consumer)
                        .or_default()
                        .push(self.truncated_before);
                    self.seen.entry(consumer).or_default().push(Seen {
                        offset,
                        body: message.body.chunks().concat(),
                    });
                }
                StreamEffect::Arm { at_ms } => self.armed.push(at_ms),
            }
        }
    }

    pub(super) fn publish(&mut self, body: &[u8]) -> u64 {
        let offset = self.state.publish(message(body), self.now, &mut self.fx);
        self.effects();
        offset
    }

    /// The next `n` appends complete (`ok`: committed), then the stream syncs.
    pub(super) fn complete(&mut self, n: usize, ok: bool) {
        for _ in 0..n {
            let Some((offset, timestamp_ms, message)) = self.in_flight.pop_front() else {
                break;
            };
            if ok && offset >= self.truncated_before {
                self.store.insert(
                    offset,
                    StreamRecord {
                        offset,
                        timestamp_ms,
                        message: PackedMessage::pack(&message),
                    },
                );
            }
            if let Some(appended) = self.history.get_mut(&offset) {
                appended.outcome = Some(ok);
            }
            self.progress.completed(offset, ok);
        }
        self.state.sync(&self.progress, self.now, &mut self.fx);
        self.effects();
    }

    pub(super) fn commit_all(&mut self) {
        self.complete(self.in_flight.len(), true);
    }

    pub(super) fn consume(&mut self, id: u64, prefetch: u32, spec: OffsetSpec) {
        let credit = credit(prefetch);
        self.credits.insert(id, Arc::clone(&credit));
        let slot = StreamConsumerSlot {
            id,
            handle: id,
            credit,
        };
        self.state
            .consume(slot, spec, self.now, &mut self.fx)
            .expect("consumer attached");
        self.effects();
    }

    /// Carries out the oldest read.
    pub(super) fn serve_read(&mut self) -> bool {
        let Some(request) = self.reads.pop_front() else {
            return false;
        };
        let result = read(&self.store, &request);
        self.state.read_done(result, self.now, &mut self.fx);
        self.effects();
        true
    }

    pub(super) fn serve_reads(&mut self) {
        while self.serve_read() {}
    }

    /// The consumer settles `n` deliveries (ack, nack or reject alike).
    pub(super) fn settle(&mut self, id: u64, n: u32) {
        self.credits[&id].settled(n);
        self.state.settled(id, self.now, &mut self.fx);
        self.effects();
    }

    pub(super) fn tick(&mut self) {
        self.state.tick(self.now, &mut self.fx);
        self.effects();
    }

    pub(super) fn offsets_seen(&self, id: u64) -> Vec<u64> {
        self.seen
            .get(&id)
            .map(|s| s.iter().map(|d| d.offset).collect())
            .unwrap_or_default()
    }
}
