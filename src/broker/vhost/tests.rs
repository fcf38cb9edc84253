//! The vhost's unit tests, and the short forms of its operations they (and other modules'
//! tests) use.

use std::sync::{Arc, Weak};

use dwellmq_codec::{FieldTable, ShortStr};
use dwellmq_core::routing::{Binding, Destination, RoutingKind};
use dwellmq_core::BrokerResult;

use super::delete::DeletedQueue;
use super::*;
use crate::broker::exchange::{DeclaredBy, DeclaredType};
use crate::broker::persist::DefinitionWrites;
use crate::broker::queue::ConnectionId;
use crate::broker::runtime::Runtime;

/// Unit tests' short forms of the definition-writing operations: nobody waits for their writes.
impl VHost {
    /// A vhost on a runtime of its own, with a holder of its own for delayed exchanges; its
    /// queues cannot dead-letter.
    pub(crate) fn new(name: ShortStr) -> Self {
        let runtime = Runtime::standalone();
        let held = crate::broker::delayed::DelayedMessages::with_scheduler(
            Arc::clone(&runtime.scheduler),
            Arc::clone(&runtime.queues.memory),
        );
        Self::build(name, runtime, held, Weak::new())
    }

    pub(crate) fn declare_exchange(&self, d: ExchangeSpec) -> BrokerResult<Arc<Exchange>> {
        self.declare_exchange_reporting(d, DefinitionWrites::UNAWAITED)
    }

    pub(crate) fn delete_exchange(
        &self,
        name: &str,
        if_unused: bool,
    ) -> BrokerResult<Vec<ShortStr>> {
        self.delete_exchange_reporting(name, if_unused, DefinitionWrites::UNAWAITED)
    }

    pub(crate) fn delete_queue(
        &self,
        name: &str,
        if_unused: bool,
        if_empty: bool,
        connection: Option<ConnectionId>,
    ) -> BrokerResult<DeletedQueue> {
        let writes = DefinitionWrites::UNAWAITED;
        self.delete_queue_reporting(name, if_unused, if_empty, connection, writes)
    }

    pub(crate) fn delete_queue_instance(&self, queue: &Arc<Queue>) -> BrokerResult<DeletedQueue> {
        self.delete_queue_instance_reporting(queue, DefinitionWrites::UNAWAITED)
    }

    pub(crate) fn bind(&self, binding: Binding) -> BrokerResult<()> {
        self.bind_reporting(binding, DefinitionWrites::UNAWAITED)
    }

    pub(crate) fn unbind(&self, binding: &Binding) -> BrokerResult<Vec<ShortStr>> {
        self.unbind_reporting(binding, DefinitionWrites::UNAWAITED)
    }
}

const CONN: ConnectionId = 1;
const OTHER_CONN: ConnectionId = 2;

fn vhost() -> VHost {
    VHost::new("/".into())
}

fn exchange_spec(name: &str, kind: RoutingKind) -> ExchangeSpec {
    ExchangeSpec {
        name: name.into(),
        kind: DeclaredType::Standard(kind),
        passive: false,
        durable: false,
        auto_delete: false,
        internal: false,
        arguments: FieldTable::new(),
        declared_by: DeclaredBy::user("guest"),
    }
}

fn queue_spec(name: &str) -> QueueSpec {
    QueueSpec {
        name: name.into(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: false,
        arguments: FieldTable::new(),
    }
}

fn declare_exchange(v: &VHost, name: &str, kind: RoutingKind) -> Arc<Exchange> {
    v.declare_exchange(exchange_spec(name, kind))
        .expect("exchange declared")
}

fn declare_queue(v: &VHost, name: &str) -> Arc<Queue> {
    v.declare_queue(queue_spec(name), CONN)
        .expect("queue declared")
}

fn to_queue(source: &str, queue: &str, key: &str) -> Binding {
    Binding::new(source, Destination::Queue(queue.into()), key)
}

fn to_exchange(source: &str, exchange: &str, key: &str) -> Binding {
    Binding::new(source, Destination::Exchange(exchange.into()), key)
}

/// The names of the queues a message published to `exchange` with `key` reaches, in order.
fn route(v: &VHost, exchange: &str, key: &str) -> Vec<String> {
    let exchange = v.exchange(exchange).expect("exchange exists");
    let mut routing = Routing::default();
    v.route(&exchange, key, &[], None, false, &mut routing);
    routing.queues.iter().map(|q| q.name.to_string()).collect()
}

/// The reply code and text of a refusal.
fn refusal<T>(result: BrokerResult<T>) -> (u16, String) {
    match result {
        Ok(_) => panic!("expected a refusal"),
        Err(error) => (error.reply_code(), error.reply_text()),
    }
}

fn exchange_names(v: &VHost) -> Vec<String> {
    let mut names: Vec<String> = v.exchanges().iter().map(|x| x.name.to_string()).collect();
    names.sort();
    names
}

#[test]
fn a_new_vhost_has_rabbitmqs_predeclared_exchanges_and_no_queues() {
    let v = vhost();
    let names: Vec<&str> = PREDECLARED.iter().map(|&(name, _)| name).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(exchange_names(&v), sorted);
    assert!(v.queues().is_empty());
    // Only the trace exchange is internal.
    for name in names {
        let exchange = v.exchange(name).unwrap();
        assert_eq!(exchange.internal, name == "amq.rabbitmq.trace", "{name}");
        assert!(exchange.durable, "{name}");
    }
}

#[test]
fn declaring_an_exchange_twice_returns_the_same_one_and_a_different_type_is_406() {
    let v = vhost();
    let first = declare_exchange(&v, "orders", RoutingKind::Topic);
    let again = declare_exchange(&v, "orders", RoutingKind::Topic);
    assert!(Arc::ptr_eq(&first, &again));
    assert_eq!(
        refusal(v.declare_exchange(exchange_spec("orders", RoutingKind::Direct))),
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'orders' in vhost \
             '/': received 'direct' but current is 'topic'"
                .into()
        )
    );
    let mut durable = exchange_spec("orders", RoutingKind::Topic);
    durable.durable = true;
    assert_eq!(refusal(v.declare_exchange(durable)).0, 406);
}

#[test]
fn exchange_declare_refuses_reserved_and_default_names_and_passive_needs_the_exchange() {
    let v = vhost();
    assert_eq!(
        refusal(v.declare_exchange(exchange_spec("amq.mine", RoutingKind::Direct))),
        (
            403,
            "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix 'amq.*'".into()
        )
    );
    assert_eq!(
        refusal(v.declare_exchange(exchange_spec("", RoutingKind::Direct))),
        (
            403,
            "ACCESS_REFUSED - operation not permitted on the default exchange".into()
        )
    );
    let mut passive = exchange_spec("missing", RoutingKind::Direct);
    passive.passive = true;
    assert_eq!(
        refusal(v.declare_exchange(passive)),
        (404, "NOT_FOUND - no exchange 'missing' in vhost '/'".into())
    );
    // A passive declare of a predeclared exchange is fine, whatever its name.
    let mut passive = exchange_spec("amq.topic", RoutingKind::Direct);
    passive.passive = true;
    assert!(v.declare_exchange(passive).is_ok());
}

#[test]
fn queue_declare_names_server_named_queues_and_refuses_the_amq_prefix() {
    let v = vhost();
    let a = declare_queue(&v, "");
    let b = declare_queue(&v, "");
    assert!(a.name.starts_with("amq.gen-"), "{}", a.name);
    assert_ne!(a.name, b.name);
    assert_eq!(
        refusal(v.declare_queue(queue_spec("amq.q"), CONN)),
        (
            403,
            "ACCESS_REFUSED - queue name 'amq.q' contains reserved prefix 'amq.*'".into()
        )
    );
    let mut passive = queue_spec("missing");
    passive.passive = true;
    assert_eq!(
        refusal(v.declare_queue(passive, CONN)),
        (404, "NOT_FOUND - no queue 'missing' in vhost '/'".into())
    );
}

#[test]
fn redeclaring_a_queue_checks_equivalence_and_exclusivity() {
    let v = vhost();
    let first = declare_queue(&v, "jobs");
    assert!(Arc::ptr_eq(&first, &declare_queue(&v, "jobs")));
    let mut durable = queue_spec("jobs");
    durable.durable = true;
    assert_eq!(
        refusal(v.declare_queue(durable, CONN)),
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'jobs' in vhost \
             '/': received 'true' but current is 'false'"
                .into()
        )
    );
    let mut exclusive = queue_spec("mine");
    exclusive.exclusive = true;
    v.declare_queue(exclusive, CONN).unwrap();
    let mut passive = queue_spec("mine");
    passive.passive = true;
    assert_eq!(refusal(v.declare_queue(passive, OTHER_CONN)).0, 405);
    let mut passive = queue_spec("mine");
    passive.passive = true;
    assert!(v.declare_queue(passive, CONN).is_ok());
}

#[test]
fn the_default_exchange_routes_by_queue_name_and_cannot_be_bound() {
    let v = vhost();
    declare_queue(&v, "jobs");
    assert_eq!(route(&v, "", "jobs"), ["jobs"]);
    assert!(route(&v, "", "other").is_empty());
    assert_eq!(
        refusal(v.bind(to_queue("", "jobs", "x"))),
        (
            403,
            "ACCESS_REFUSED - operation not permitted on the default exchange".into()
        )
    );
}

#[test]
fn bind_needs_both_ends() {
    let v = vhost();
    declare_queue(&v, "jobs");
    assert_eq!(
        refusal(v.bind(to_queue("missing", "jobs", "k"))),
        (404, "NOT_FOUND - no exchange 'missing' in vhost '/'".into())
    );
    assert_eq!(
        refusal(v.bind(to_queue("amq.direct", "nowhere", "k"))),
        (404, "NOT_FOUND - no queue 'nowhere' in vhost '/'".into())
    );
    assert_eq!(
        refusal(v.bind(to_exchange("amq.direct", "nowhere", "k"))),
        (404, "NOT_FOUND - no exchange 'nowhere' in vhost '/'".into())
    );
}

#[test]
fn bound_queues_receive_by_key_once_each_and_unbind_stops_it() {
    let v = vhost();
    declare_exchange(&v, "logs", RoutingKind::Topic);
    declare_queue(&v, "errors");
    declare_queue(&v, "all");
    v.bind(to_queue("logs", "errors", "*.error")).unwrap();
    v.bind(to_queue("logs", "all", "#")).unwrap();
    // Two bindings matching the same key still reach the queue once.
    v.bind(to_queue("logs", "all", "app.*")).unwrap();
    let mut reached = route(&v, "logs", "app.error");
    reached.sort();
    assert_eq!(reached, ["all", "errors"]);
    assert_eq!(route(&v, "logs", "app.info"), ["all"]);

    assert!(v
        .unbind(&to_queue("logs", "errors", "*.error"))
        .unwrap()
        .is_empty());
    assert_eq!(route(&v, "logs", "app.error"), ["all"]);
    // Unbinding what is not bound is fine, as in RabbitMQ.
    assert!(v
        .unbind(&to_queue("logs", "errors", "*.error"))
        .unwrap()
        .is_empty());
}

#[test]
fn exchange_to_exchange_bindings_and_alternate_exchanges_route_onwards() {
    let v = vhost();
    declare_exchange(&v, "front", RoutingKind::Direct);
    declare_exchange(&v, "back", RoutingKind::Fanout);
    declare_queue(&v, "behind");
    v.bind(to_exchange("front", "back", "k")).unwrap();
    v.bind(to_queue("back", "behind", "")).unwrap();
    // A cycle back to the start is followed once, not forever.
    v.bind(to_exchange("back", "front", "")).unwrap();
    assert_eq!(route(&v, "front", "k"), ["behind"]);
    assert!(route(&v, "front", "other").is_empty());

    let mut with_ae = exchange_spec("with-ae", RoutingKind::Direct);
    with_ae.arguments.insert(
        "alternate-exchange",
        dwellmq_codec::FieldValue::from("back"),
    );
    v.declare_exchange(with_ae).unwrap();
    declare_queue(&v, "direct-target");
    v.bind(to_queue("with-ae", "direct-target", "hit")).unwrap();
    assert_eq!(route(&v, "with-ae", "hit"), ["direct-target"]);
    // Unroutable on its own: the alternate exchange takes it.
    assert_eq!(route(&v, "with-ae", "miss"), ["behind"]);
}

#[test]
fn an_auto_delete_exchange_goes_with_its_last_binding() {
    let v = vhost();
    let mut spec = exchange_spec("temp", RoutingKind::Direct);
    spec.auto_delete = true;
    v.declare_exchange(spec).unwrap();
    declare_queue(&v, "a");
    declare_queue(&v, "b");
    v.bind(to_queue("temp", "a", "k")).unwrap();
    v.bind(to_queue("temp", "b", "k")).unwrap();
    assert!(v.unbind(&to_queue("temp", "a", "k")).unwrap().is_empty());
    assert!(v.exchange("temp").is_ok());
    // Deleting the queue of the last binding removes the exchange too.
    let deleted = v.delete_queue("b", false, false, None).unwrap();
    assert_eq!(deleted.removed_exchanges, [ShortStr::from("temp")]);
    assert_eq!(refusal(v.exchange("temp")).0, 404);
}

#[test]
fn deleting_a_queue_removes_it_and_its_bindings() {
    let v = vhost();
    declare_exchange(&v, "x", RoutingKind::Fanout);
    let queue = declare_queue(&v, "q");
    v.bind(to_queue("x", "q", "")).unwrap();
    let deleted = v.delete_queue("q", false, false, Some(CONN)).unwrap();
    assert_eq!(deleted.message_count, 0);
    assert_eq!(deleted.consumers, 0);
    assert!(queue.is_deleted());
    assert_eq!(refusal(v.queue("q")).0, 404);
    // A new queue of the same name is not bound by the old queue's bindings.
    declare_queue(&v, "q");
    assert!(route(&v, "x", "").is_empty());
    // Deleting a missing queue succeeds, as in RabbitMQ.
    assert_eq!(
        v.delete_queue("never", false, false, Some(CONN))
            .unwrap()
            .message_count,
        0
    );
}

#[test]
fn another_connections_exclusive_queue_cannot_be_deleted() {
    let v = vhost();
    let mut exclusive = queue_spec("mine");
    exclusive.exclusive = true;
    v.declare_queue(exclusive, CONN).unwrap();
    assert_eq!(
        refusal(v.delete_queue("mine", false, false, Some(OTHER_CONN))).0,
        405
    );
    assert!(v.queue("mine").is_ok());
    assert!(v.delete_queue("mine", false, false, Some(CONN)).is_ok());
}

#[test]
fn deleting_a_queue_instance_leaves_a_newer_queue_of_the_same_name_alone() {
    let v = vhost();
    let old = declare_queue(&v, "q");
    v.delete_queue("q", false, false, None).unwrap();
    let new = declare_queue(&v, "q");
    v.delete_queue_instance(&old).unwrap();
    assert!(Arc::ptr_eq(&v.queue("q").unwrap(), &new));
    v.delete_queue_instance(&new).unwrap();
    assert_eq!(refusal(v.queue("q")).0, 404);
}

#[test]
fn deleting_an_exchange_removes_bindings_to_it_and_orphaned_auto_delete_sources() {
    let v = vhost();
    let mut source = exchange_spec("source", RoutingKind::Fanout);
    source.auto_delete = true;
    v.declare_exchange(source).unwrap();
    let target = declare_exchange(&v, "target", RoutingKind::Fanout);
    v.bind(to_exchange("source", "target", "")).unwrap();
    assert!(v.is_current(&target));
    // if_unused counts the bindings from the exchange (as RabbitMQ does), not those to it.
    declare_queue(&v, "q");
    v.bind(to_queue("target", "q", "")).unwrap();
    assert_eq!(
        refusal(v.delete_exchange("target", true)),
        (
            406,
            "PRECONDITION_FAILED - exchange 'target' in vhost '/' in use".into()
        )
    );
    let removed = v.delete_exchange("target", false).unwrap();
    assert_eq!(
        removed,
        [ShortStr::from("target"), ShortStr::from("source")]
    );
    assert!(!v.is_current(&target));
    assert_eq!(refusal(v.exchange("source")).0, 404);
    // Deleting a missing exchange succeeds; system exchanges cannot be deleted.
    assert!(v.delete_exchange("target", false).unwrap().is_empty());
    assert_eq!(
        refusal(v.delete_exchange("amq.direct", false)),
        (
            403,
            "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not \
             allowed"
                .into()
        )
    );
    assert_eq!(refusal(v.delete_exchange("", false)).0, 403);
}

#[test]
fn a_redeclared_exchange_replaces_the_old_one_for_is_current() {
    let v = vhost();
    let old = declare_exchange(&v, "x", RoutingKind::Direct);
    v.delete_exchange("x", false).unwrap();
    let new = declare_exchange(&v, "x", RoutingKind::Direct);
    assert!(!v.is_current(&old));
    assert!(v.is_current(&new));
}
