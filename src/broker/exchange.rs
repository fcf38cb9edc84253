//! An exchange: its declaration and its bindings.

use dwellmq_codec::{FieldTable, ShortStr};
use dwellmq_core::routing::{BindingSet, RoutingKind};
use parking_lot::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::scheduler::{next_incarnation, RETIRED};

/// How an exchange routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExchangeKind {
    /// One of the four standard types.
    Standard(RoutingKind),
    /// `x-delayed-message`: holds each message for its `x-delay`, then routes as `inner`.
    Delayed(RoutingKind),
}

impl ExchangeKind {
    /// The type name as declared.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            ExchangeKind::Standard(kind) => kind.name(),
            ExchangeKind::Delayed(_) => "x-delayed-message",
        }
    }

    /// The type name as RabbitMQ prints it in texts (an Erlang atom, `~p`): names that are not
    /// plain atoms come quoted, so a mismatch reads `current is ''x-delayed-message''`.
    pub(crate) fn type_as_atom(&self) -> &'static str {
        match self {
            ExchangeKind::Standard(kind) => kind.name(),
            ExchangeKind::Delayed(_) => "'x-delayed-message'",
        }
    }

    /// The routing behaviour.
    pub(crate) fn routing(&self) -> RoutingKind {
        match *self {
            ExchangeKind::Standard(kind) | ExchangeKind::Delayed(kind) => kind,
        }
    }
}

/// The type an `exchange.declare` names, checked before the exchange is looked up. A delayed
/// exchange's routing behaviour (`x-delayed-type`) is read only when the exchange is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeclaredType {
    Standard(RoutingKind),
    Delayed,
}

impl DeclaredType {
    /// Checks an `exchange.declare` type, before anything else about the declare (503 for a
    /// type that does not exist, as RabbitMQ's `check_type`).
    pub(crate) fn parse(kind: &str) -> dwellmq_core::BrokerResult<DeclaredType> {
        if kind == dwellmq_core::arguments::DELAYED_MESSAGE_TYPE {
            return Ok(DeclaredType::Delayed);
        }
        dwellmq_core::arguments::parse_exchange_type(kind).map(DeclaredType::Standard)
    }

    /// As [`ExchangeKind::type_name`].
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            DeclaredType::Standard(kind) => kind.name(),
            DeclaredType::Delayed => "x-delayed-message",
        }
    }

    /// As [`ExchangeKind::type_as_atom`].
    pub(crate) fn type_as_atom(&self) -> &'static str {
        match self {
            DeclaredType::Standard(kind) => kind.name(),
            DeclaredType::Delayed => "'x-delayed-message'",
        }
    }
}

/// Who declared an exchange: the management API's `user_who_performed_action`, which RabbitMQ
/// keeps in the exchange's record from its creation (a redeclare changes nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DeclaredBy {
    /// The broker itself (RabbitMQ's `rmq-internal`): the exchanges every vhost is born with,
    /// and those of a definitions file imported at start.
    Broker,
    /// A user: over AMQP the connection's, over HTTP (a declare or a definitions import) the
    /// authenticated one.
    User(Arc<str>),
    /// Not known (RabbitMQ's `unknown`): a durable exchange restored from a record written
    /// before store format 5, which had no field for it.
    Unrecorded,
}

impl DeclaredBy {
    /// A user by name.
    pub(crate) fn user(name: &str) -> Self {
        DeclaredBy::User(Arc::from(name))
    }

    /// What the store keeps of it: a name, the broker's included (`None`: not known).
    pub(crate) fn stored_name(&self) -> Option<String> {
        match self {
            DeclaredBy::Unrecorded => None,
            known => Some(known.name().to_string()),
        }
    }

    /// Who a stored name says declared it.
    pub(crate) fn from_stored(name: Option<&str>) -> Self {
        match name {
            None => DeclaredBy::Unrecorded,
            Some("rmq-internal") => DeclaredBy::Broker,
            Some(user) => DeclaredBy::user(user),
        }
    }

    /// The name the management API shows.
    pub(crate) fn name(&self) -> &str {
        match self {
            DeclaredBy::Broker => "rmq-internal",
            DeclaredBy::User(name) => name,
            DeclaredBy::Unrecorded => "unknown",
        }
    }
}

/// An exchange in a vhost.
pub(crate) struct Exchange {
    pub(crate) name: ShortStr,
    pub(crate) kind: ExchangeKind,
    pub(crate) durable: bool,
    pub(crate) auto_delete: bool,
    pub(crate) internal: bool,
    pub(crate) arguments: FieldTable,
    /// `alternate-exchange` as declared.
    pub(crate) alternate_exchange: Option<ShortStr>,
    /// `alternate-exchange` from the policy that applies (the argument wins).
    pub(crate) policy_alternate_exchange: RwLock<Option<ShortStr>>,
    /// Bindings with this exchange as source.
    pub(crate) bindings: RwLock<BindingSet>,
    /// Message counters for the management API's rates.
    pub(crate) counters: super::rates::ExchangeCounters,
    /// Who declared it.
    pub(crate) declared_by: DeclaredBy,
    /// Whose held messages a delayed exchange holds and releases now
    /// (`super::scheduler::next_incarnation`): renewed by a purge, retired at deletion.
    incarnation: AtomicU64,
}

impl Exchange {
    pub(crate) fn new(
        name: ShortStr,
        kind: ExchangeKind,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: FieldTable,
        declared_by: DeclaredBy,
    ) -> Self {
        let alternate_exchange = arguments
            .get("alternate-exchange")
            .and_then(|v| v.as_str())
            .map(ShortStr::from);
        Exchange {
            name,
            kind,
            durable,
            auto_delete,
            internal,
            arguments,
            alternate_exchange,
            policy_alternate_exchange: RwLock::new(None),
            bindings: RwLock::new(BindingSet::new(kind.routing())),
            counters: Default::default(),
            declared_by,
            incarnation: AtomicU64::new(next_incarnation()),
        }
    }

    /// This exchange's incarnation now ([`RETIRED`] once deleted).
    pub(crate) fn incarnation(&self) -> u64 {
        self.incarnation.load(Ordering::Acquire)
    }

    /// Moves the exchange from incarnation `from` to a fresh one (a purge: the messages of
    /// `from` are no longer its own); false if it is not at `from` any more.
    pub(crate) fn renew(&self, from: u64) -> bool {
        self.incarnation
            .compare_exchange(
                from,
                next_incarnation(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// The exchange was deleted: nothing is held for it from now on, and nothing it held is
    /// released.
    pub(crate) fn retire(&self) {
        self.incarnation.store(RETIRED, Ordering::Release);
    }

    /// Where unroutable messages go: the declared alternate exchange, else the policy's.
    pub(crate) fn alternate(&self) -> Option<ShortStr> {
        self.alternate_exchange
            .clone()
            .or_else(|| self.policy_alternate_exchange.read().clone())
    }

    /// Whether this is the nameless default exchange.
    pub(crate) fn is_default(&self) -> bool {
        self.name.is_empty()
    }
}
