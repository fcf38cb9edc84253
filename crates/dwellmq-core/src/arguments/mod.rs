//! Validation of queue, exchange and consumer arguments and of message properties, with
//! RabbitMQ's reply texts (406 PRECONDITION_FAILED unless said otherwise).
//!
//! RabbitMQ prints argument values as Erlang terms; the `erlang_term` module reproduces that so the texts
//! match byte for byte where it matters to clients that parse them.

mod consumer_args;
mod equivalence;
pub(crate) mod erlang_term;
mod exchange_args;
mod expiration;
mod queue_args;
mod x_delay;

pub use consumer_args::parse_consumer_priority;
pub use equivalence::{
    check_exchange_equivalence, check_queue_equivalence, queue_arguments_equivalent, ArgMismatch,
};
pub use exchange_args::{
    parse_alternate_exchange, parse_delayed_type, parse_exchange_type, DELAYED_MESSAGE_TYPE,
};
pub use expiration::{parse_expiration, MAX_TTL_MS};
pub use queue_args::{
    check_consumer_arguments, check_stream_consume, parse_delayed_retry, parse_max_age,
    parse_queue_arguments, parse_stream_arguments, parse_stream_offset, server_named_refused,
    stream_get_refused, stream_purge_refused, DeadLetterStrategy, DelayedRetry, OffsetSpec,
    Overflow, QueueArguments, QueueKind, QueueType, RetryKind, StreamArguments, StreamConsume,
    DEFAULT_DELIVERY_LIMIT, MAX_PRIORITY, MAX_STREAM_SEGMENT_SIZE_BYTES,
};
pub use x_delay::{parse_x_delay, released_x_delay, MAX_DELAY_MS};
