//! Declares, deletes and binds of the same names from several connections at once, through
//! lapin on a multi-threaded runtime: every answer is one RabbitMQ gives, no binding is lost,
//! and nothing is left pointing at a queue or exchange that was deleted. The rounds of racing
//! connections check the answers; the bind-versus-delete window itself is held open with the
//! broker's bind pause (`BrokerHandle::pause_binds`), so that the delete lands inside it every
//! time rather than once in a while.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ExchangeKind};
use tokio::sync::Barrier;

const CONNECTIONS: usize = 8;

/// The connection that deletes while the others bind: in the middle, so that some binds are
/// sent before the delete and some after.
const DELETER: usize = CONNECTIONS / 2;

/// One connection per concurrent actor.
async fn connections(t: &TestBroker) -> Vec<Connection> {
    let mut all = Vec::new();
    for _ in 0..CONNECTIONS {
        all.push(connect(&t.broker).await);
    }
    all
}

/// A fresh channel: a refused method closes the channel it was sent on.
async fn fresh(connection: &Connection) -> Channel {
    connection.create_channel().await.expect("channel opens")
}

async fn declare_exchange(ch: &Channel, name: &str) -> lapin::Result<()> {
    ch.exchange_declare(
        name.into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
}

async fn bind(ch: &Channel, queue: &str, exchange: &str, key: &str) -> lapin::Result<()> {
    ch.queue_bind(
        queue.into(),
        exchange.into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
}

/// Publishes one message per key to `exchange` and waits until the broker has routed them.
async fn publish_each(ch: &Channel, exchange: &str, keys: &[String]) {
    for key in keys {
        publish(ch, exchange, key, key).await;
    }
    sync(ch).await;
}

async fn ready_in(ch: &Channel, queue: &str) -> u32 {
    passive_declare(ch, queue)
        .await
        .expect("the queue exists")
        .message_count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_exchange_queue_and_bindings_declared_at_once_make_one_of_each() {
    let t = start().await;
    let all = connections(&t).await;
    let mut tasks = Vec::new();
    for (i, connection) in all.iter().enumerate() {
        let ch = fresh(connection).await;
        tasks.push(tokio::spawn(async move {
            declare_exchange(&ch, "shared.x").await?;
            ch.queue_declare(
                "shared.q".into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await?;
            // Its own key and one that every connection binds.
            bind(&ch, "shared.q", "shared.x", &format!("own-{i}")).await?;
            bind(&ch, "shared.q", "shared.x", "common").await
        }));
    }
    for task in tasks {
        task.await
            .expect("no panic")
            .expect("an equivalent declare or bind is never refused");
    }
    let ch = t.channel().await;
    let mut keys: Vec<String> = (0..CONNECTIONS).map(|i| format!("own-{i}")).collect();
    keys.push("common".into());
    publish_each(&ch, "shared.x", &keys).await;
    // Every binding is there, and the one bound eight times routes once.
    assert_eq!(ready_in(&ch, "shared.q").await, (CONNECTIONS + 1) as u32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_inequivalent_declares_let_one_win_and_refuse_the_rest_with_its_value() {
    let t = start().await;
    let all = connections(&t).await;
    let mut tasks = Vec::new();
    for (i, connection) in all.iter().enumerate() {
        let ch = fresh(connection).await;
        let durable = i % 2 == 0;
        tasks.push(tokio::spawn(async move {
            let declared = ch
                .queue_declare(
                    "contested".into(),
                    QueueDeclareOptions {
                        durable,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await;
            (durable, declared.map(|_| ()).map_err(|e| amqp_error(&e)))
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("no panic"));
    }
    let winner = answers
        .iter()
        .find(|(_, answer)| answer.is_ok())
        .map(|(durable, _)| *durable)
        .expect("one declare wins");
    for (durable, answer) in &answers {
        if *durable == winner {
            assert_eq!(answer, &Ok(()), "an equivalent declare succeeds");
        } else {
            assert_eq!(
                answer,
                &Err((
                    406,
                    format!(
                        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'contested' \
                         in vhost '/': received '{durable}' but current is '{winner}'"
                    )
                )),
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binds_racing_a_queue_delete_leave_nothing_for_the_next_queue_of_that_name() {
    let t = start().await;
    let all = connections(&t).await;
    let setup = t.channel().await;
    declare_exchange(&setup, "race.x").await.unwrap();
    let keys: Vec<String> = (0..CONNECTIONS)
        .filter(|i| *i != DELETER)
        .map(|i| format!("k{i}"))
        .collect();
    for round in 0..20 {
        declare_queue(&setup, "race.q").await;
        let mut tasks = Vec::new();
        let start = Arc::new(Barrier::new(CONNECTIONS));
        for (i, connection) in all.iter().enumerate() {
            let ch = fresh(connection).await;
            let start = Arc::clone(&start);
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                if i == DELETER {
                    ch.queue_delete("race.q".into(), QueueDeleteOptions::default())
                        .await
                        .map(|_| ())
                } else {
                    bind(&ch, "race.q", "race.x", &format!("k{i}")).await
                }
            }));
        }
        for task in tasks {
            match task.await.expect("no panic") {
                Ok(()) => {}
                // A bind that comes after the delete: RabbitMQ's answer.
                Err(e) => assert_eq!(
                    amqp_error(&e),
                    (404, "NOT_FOUND - no queue 'race.q' in vhost '/'".into()),
                    "round {round}"
                ),
            }
        }
        // The queue is gone for everyone; a new one of the same name starts with no bindings.
        let (code, _) = channel_error(passive_declare(&fresh(&t.connection).await, "race.q").await);
        assert_eq!(code, 404, "round {round}: the deleted queue is not listed");
        declare_queue(&setup, "race.q").await;
        publish_each(&setup, "race.x", &keys).await;
        assert_eq!(
            ready_in(&setup, "race.q").await,
            0,
            "round {round}: a binding of the deleted queue routes into its successor"
        );
        setup
            .queue_delete("race.q".into(), QueueDeleteOptions::default())
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binds_racing_an_exchange_delete_leave_nothing_for_the_next_exchange_of_that_name() {
    let t = start().await;
    let all = connections(&t).await;
    let setup = t.channel().await;
    declare_queue(&setup, "race.sink").await;
    let keys: Vec<String> = (0..CONNECTIONS)
        .filter(|i| *i != DELETER)
        .map(|i| format!("k{i}"))
        .collect();
    for round in 0..20 {
        declare_exchange(&setup, "race.ex").await.unwrap();
        let mut tasks = Vec::new();
        let start = Arc::new(Barrier::new(CONNECTIONS));
        for (i, connection) in all.iter().enumerate() {
            let ch = fresh(connection).await;
            let start = Arc::clone(&start);
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                if i == DELETER {
                    ch.exchange_delete("race.ex".into(), ExchangeDeleteOptions::default())
                        .await
                } else {
                    bind(&ch, "race.sink", "race.ex", &format!("k{i}")).await
                }
            }));
        }
        for task in tasks {
            match task.await.expect("no panic") {
                Ok(()) => {}
                Err(e) => assert_eq!(
                    amqp_error(&e),
                    (404, "NOT_FOUND - no exchange 'race.ex' in vhost '/'".into()),
                    "round {round}"
                ),
            }
        }
        declare_exchange(&setup, "race.ex").await.unwrap();
        publish_each(&setup, "race.ex", &keys).await;
        assert_eq!(
            ready_in(&setup, "race.sink").await,
            0,
            "round {round}: a binding of the deleted exchange survives into its successor"
        );
        setup
            .exchange_delete("race.ex".into(), ExchangeDeleteOptions::default())
            .await
            .unwrap();
    }
    // The queue the bindings pointed at is intact and usable.
    publish(&setup, "", "race.sink", "direct").await;
    sync(&setup).await;
    assert_eq!(ready_in(&setup, "race.sink").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declares_and_deletes_racing_on_one_name_leave_a_queue_that_works_or_none() {
    let t = start().await;
    let all = connections(&t).await;
    let mut tasks = Vec::new();
    for (i, connection) in all.iter().enumerate() {
        let ch = fresh(connection).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                if i % 2 == 0 {
                    ch.queue_declare(
                        "churn".into(),
                        QueueDeclareOptions::default(),
                        FieldTable::default(),
                    )
                    .await?;
                } else {
                    // RabbitMQ answers delete-ok for a queue that is already gone.
                    ch.queue_delete("churn".into(), QueueDeleteOptions::default())
                        .await?;
                }
            }
            Ok::<(), lapin::Error>(())
        }));
    }
    for task in tasks {
        task.await
            .expect("no panic")
            .expect("no declare or delete is refused");
    }
    let ch = t.channel().await;
    match passive_declare(&ch, "churn").await {
        Ok(queue) => {
            // Listed, so usable: it takes and gives back a message.
            assert_eq!(queue.message_count(), 0);
            publish(&ch, "", "churn", "after").await;
            sync(&ch).await;
            let got = ch
                .basic_get("churn".into(), BasicGetOptions { no_ack: true })
                .await
                .unwrap()
                .expect("the message");
            assert_eq!(got.delivery.data, b"after");
        }
        Err(e) => assert_eq!(
            amqp_error(&e),
            (404, "NOT_FOUND - no queue 'churn' in vhost '/'".into())
        ),
    }
    assert_eq!(
        t.broker.queue_info("/", "churn").is_some(),
        passive_declare(&t.channel().await, "churn").await.is_ok(),
        "the handle and the client agree"
    );
}

/// How long a paused bind waits before it goes on by itself. With binds made under the lock of
/// the destination's table, the delete cannot finish while the bind waits (it needs that
/// lock): it finishes once this has passed, after the bind, and takes the binding with it.
/// Without the lock, the delete finishes inside the pause (it is sent as soon as the bind has
/// stopped, and the test lets the bind go on once the delete is answered), and the bind then
/// adds a binding to what was deleted. The runtime's two workers are both held meanwhile, one
/// by the bind and one by the delete: bounded.
const BIND_PAUSE: Duration = Duration::from_secs(1);

/// Starts `bind` on a connection of its own and returns once the broker has paused it between
/// finding its destination and adding the binding; then deletes through another connection
/// (`delete`) and returns what the bind answered, once both are done.
async fn bind_paused_across_a_delete<D>(
    t: &TestBroker,
    bind: impl std::future::Future<Output = lapin::Result<()>> + Send + 'static,
    delete: D,
) -> lapin::Result<()>
where
    D: std::future::Future<Output = lapin::Result<()>> + Send + 'static,
{
    t.broker.pause_binds(BIND_PAUSE);
    let bind = tokio::spawn(bind);
    eventually("the bind stopped after finding its destination", || {
        t.broker.binds_stopped() == 1
    })
    .await;
    let deleted = bounded("the delete", tokio::spawn(delete))
        .await
        .expect("no panic");
    t.broker.resume_binds();
    deleted.expect("the delete succeeds");
    bounded("the bind", bind).await.expect("no panic")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_deleted_while_a_bind_to_it_is_under_way_leaves_no_binding_for_its_successor() {
    let t = start().await;
    let (binder, deleter) = (connect(&t.broker).await, connect(&t.broker).await);
    let setup = t.channel().await;
    declare_exchange(&setup, "race.x").await.unwrap();
    declare_queue(&setup, "race.q").await;
    let bind_ch = fresh(&binder).await;
    let delete_ch = fresh(&deleter).await;
    let bound = bind_paused_across_a_delete(
        &t,
        async move { bind(&bind_ch, "race.q", "race.x", "k").await },
        async move {
            delete_ch
                .queue_delete("race.q".into(), QueueDeleteOptions::default())
                .await
                .map(|_| ())
        },
    )
    .await;
    // The bind found the queue before the delete: it was bound, then deleted with the queue.
    bound.expect("bind-ok: it came first");
    declare_queue(&setup, "race.q").await;
    publish_each(&setup, "race.x", &["k".to_string()]).await;
    assert_eq!(
        ready_in(&setup, "race.q").await,
        0,
        "a binding of the deleted queue routes into its successor"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exchange_deleted_while_a_bind_to_it_is_under_way_leaves_no_binding_for_its_successor() {
    let t = start().await;
    let (binder, deleter) = (connect(&t.broker).await, connect(&t.broker).await);
    let setup = t.channel().await;
    declare_exchange(&setup, "race.src").await.unwrap();
    declare_exchange(&setup, "race.dst").await.unwrap();
    declare_queue(&setup, "race.sink").await;
    let bind_ch = fresh(&binder).await;
    let delete_ch = fresh(&deleter).await;
    let bound = bind_paused_across_a_delete(
        &t,
        async move {
            bind_ch
                .exchange_bind(
                    "race.dst".into(),
                    "race.src".into(),
                    "k".into(),
                    ExchangeBindOptions::default(),
                    FieldTable::default(),
                )
                .await
        },
        async move {
            delete_ch
                .exchange_delete("race.dst".into(), ExchangeDeleteOptions::default())
                .await
        },
    )
    .await;
    bound.expect("bind-ok: it came first");
    // A new exchange of that name, bound to a queue: nothing of race.src reaches it.
    declare_exchange(&setup, "race.dst").await.unwrap();
    bind(&setup, "race.sink", "race.dst", "k").await.unwrap();
    publish_each(&setup, "race.src", &["k".to_string()]).await;
    assert_eq!(
        ready_in(&setup, "race.sink").await,
        0,
        "a binding to the deleted exchange routes into its successor"
    );
}
