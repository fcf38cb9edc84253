//! The validators of `queue.declare`, one per family of arguments. `parse_queue_arguments`
//! runs them in the order of RabbitMQ's `rabbit_amqqueue:declare_args/0`, so that the first
//! refusal is the one RabbitMQ gives; each checks only the arguments of its queue type.

use dwellmq_codec::{FieldTable, FieldValue};

use super::declared::{Declared, QueueErrors};
use super::delayed_retry::parse_delayed_retry;
use super::keys::is_foreign_key;
use super::types::{DeadLetterStrategy, Overflow, QueueArguments, QueueType};
use super::values::{
    expiry, int_arg, named, non_neg_int_arg, non_zero, short_str, string_arg, unacceptable,
};
use crate::arguments::erlang_term::{p_string, type_name};
use crate::error::BrokerError;

/// The channel's own check, before any other: `x-dead-letter-exchange` is a long string.
pub(super) fn dead_letter_exchange_type(
    args: &FieldTable,
    errors: &QueueErrors<'_>,
) -> Result<(), BrokerError> {
    match args.get("x-dead-letter-exchange") {
        Some(v) if !matches!(v, FieldValue::LongStr(_)) => {
            Err(BrokerError::PreconditionFailed(format!(
                "invalid type '{}' for arg 'x-dead-letter-exchange' in queue '{}' in vhost '{}'",
                type_name(v),
                errors.queue,
                errors.vhost
            )))
        }
        _ => Ok(()),
    }
}

/// `x-queue-type`: `classic` (the default) or `quorum`.
pub(super) fn queue_type(
    args: &FieldTable,
    errors: &QueueErrors<'_>,
) -> Result<QueueType, BrokerError> {
    let Some(v) = args.get("x-queue-type") else {
        return Ok(QueueType::Classic);
    };
    let name = string_arg(v).map_err(|r| errors.invalid_arg("x-queue-type", &r))?;
    match name {
        b"classic" => Ok(QueueType::Classic),
        b"quorum" => Ok(QueueType::Quorum),
        other => {
            let reason = p_string(&format!(
                "unsupported queue type '{}'",
                String::from_utf8_lossy(other)
            ));
            Err(errors.invalid_arg("x-queue-type", &reason))
        }
    }
}

/// `x-expires` (at least 1) and `x-message-ttl`, in milliseconds.
pub(super) fn expiry_and_ttl(
    d: &Declared<'_>,
    parsed: &mut QueueArguments,
) -> Result<(), BrokerError> {
    parsed.expires = d.read("x-expires", |v| {
        int_arg(v).and_then(non_zero).and_then(expiry)
    })?;
    parsed.message_ttl = d.read("x-message-ttl", |v| int_arg(v).and_then(expiry))?;
    Ok(())
}

/// `x-dead-letter-exchange` (any name, even of no exchange), `x-dead-letter-routing-key`
/// (only with an exchange) and, for quorum queues, `x-dead-letter-strategy`.
pub(super) fn dead_lettering(
    d: &Declared<'_>,
    parsed: &mut QueueArguments,
) -> Result<(), BrokerError> {
    parsed.dead_letter_exchange =
        d.read("x-dead-letter-exchange", |v| string_arg(v).map(short_str))?;
    let has_exchange = d.args.contains_key("x-dead-letter-exchange");
    parsed.dead_letter_routing_key = d.read("x-dead-letter-routing-key", |v| {
        let key = string_arg(v)?;
        if has_exchange {
            Ok(short_str(key))
        } else {
            Err("routing_key_but_no_dlx_defined".to_owned())
        }
    })?;
    if d.quorum() {
        parsed.dead_letter_strategy = d.read("x-dead-letter-strategy", |v| {
            named(v, DeadLetterStrategy::from_name, "invalid_dlx_strategy")
        })?;
    }
    Ok(())
}

/// `x-max-length` and `x-max-length-bytes`; for quorum queues the in-memory limits too,
/// checked and without effect (RabbitMQ 4 ignores them as well).
pub(super) fn length_limits(
    d: &Declared<'_>,
    parsed: &mut QueueArguments,
) -> Result<(), BrokerError> {
    parsed.max_length = d.read("x-max-length", non_neg_int_arg)?;
    parsed.max_length_bytes = d.read("x-max-length-bytes", non_neg_int_arg)?;
    if d.quorum() {
        d.check("x-max-in-memory-length", non_neg_int_arg)?;
        d.check("x-max-in-memory-bytes", non_neg_int_arg)?;
    }
    Ok(())
}

/// `x-max-priority` (classic queues): at most 255.
pub(super) fn max_priority(
    d: &Declared<'_>,
    parsed: &mut QueueArguments,
) -> Result<(), BrokerError> {
    if d.classic() {
        parsed.max_priority = d.read("x-max-priority", |v| {
            let n = non_neg_int_arg(v)?;
            u8::try_from(n).map_err(|_| format!("{{max_value_exceeded,{n}}}"))
        })?;
    }
    Ok(())
}

/// `x-overflow`. A quorum queue takes `reject-publish-dlx` as `drop-head`, as RabbitMQ's
/// does (after logging "Invalid overflow strategy").
pub(super) fn overflow(d: &Declared<'_>, parsed: &mut QueueArguments) -> Result<(), BrokerError> {
    let mode = d.read("x-overflow", |v| {
        named(v, Overflow::from_name, "invalid_overflow")
    })?;
    if let Some(mode) = mode {
        parsed.overflow = match (d.quorum(), mode) {
            (true, Overflow::RejectPublishDlx) => Overflow::DropHead,
            (_, m) => m,
        };
    }
    Ok(())
}

/// `x-queue-mode` and `x-queue-version` (classic queues): RabbitMQ's storage choices,
/// checked and without effect here.
pub(super) fn classic_storage(d: &Declared<'_>) -> Result<(), BrokerError> {
    if d.quorum() {
        return Ok(());
    }
    d.check("x-queue-mode", |v| match string_arg(v)? {
        b"default" | b"lazy" => Ok(()),
        other => Err(p_string(&format!(
            "unsupported queue mode '{}'",
            String::from_utf8_lossy(other)
        ))),
    })?;
    d.check("x-queue-version", |v| match non_neg_int_arg(v)? {
        1 | 2 => Ok(()),
        n => Err(p_string(&format!("unsupported queue version '{n}'"))),
    })
}

/// `x-single-active-consumer`: a boolean.
pub(super) fn single_active_consumer(
    d: &Declared<'_>,
    parsed: &mut QueueArguments,
) -> Result<(), BrokerError> {
    let single = d.read("x-single-active-consumer", |v| match v {
        FieldValue::Bool(b) => Ok(*b),
        other => Err(unacceptable(other)),
    })?;
    parsed.single_active_consumer = single.unwrap_or(false);
    Ok(())
}

/// `x-quorum-initial-group-size` (quorum queues) and `x-queue-leader-locator`: where a
/// cluster would place the queue, checked and without effect on one node.
pub(super) fn placement(d: &Declared<'_>) -> Result<(), BrokerError> {
    if d.quorum() {
        d.check("x-quorum-initial-group-size", |v| {
            non_neg_int_arg(v).and_then(non_zero)
        })?;
    }
    d.check("x-queue-leader-locator", |v| match string_arg(v)? {
        b"client-local" | b"balanced" | b"random" | b"least-leaders" => Ok(()),
        _ => Err("invalid_queue_locator_arg".to_owned()),
    })
}

/// `x-delivery-limit` (any integer; RabbitMQ does not check it at all) and the delayed
/// retries, which are never an error (quorum queues).
pub(super) fn quorum_retries(
    d: &Declared<'_>,
    parsed: &mut QueueArguments,
) -> Result<(), BrokerError> {
    if d.quorum() {
        parsed.delivery_limit = d.read("x-delivery-limit", int_arg)?;
        parsed.delayed_retry = parse_delayed_retry(d.args);
    }
    Ok(())
}

/// An argument of another queue type is refused.
pub(super) fn foreign_keys(d: &Declared<'_>) -> Result<(), BrokerError> {
    match d
        .args
        .iter()
        .find(|(key, _)| is_foreign_key(d.queue_type.into(), key))
    {
        Some((key, _)) => Err(d.errors.foreign_arg(key, d.queue_type)),
        None => Ok(()),
    }
}

/// A quorum queue is durable, and neither auto-delete nor exclusive (checked in this order).
pub(super) fn quorum_properties(
    d: &Declared<'_>,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
) -> Result<(), BrokerError> {
    if !d.quorum() {
        return Ok(());
    }
    let refused = if auto_delete {
        "auto-delete"
    } else if exclusive {
        "exclusive-owner"
    } else if !durable {
        "non-durable"
    } else {
        return Ok(());
    };
    Err(d.errors.invalid_property(refused))
}
