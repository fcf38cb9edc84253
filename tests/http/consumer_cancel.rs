//! Consumers told by `basic.cancel` when their queue goes away other than through their own
//! channel: deleted over HTTP (RabbitMQ sends the same notification as for `queue.delete`).

use std::net::SocketAddr;

use crate::common::raw::RawClient;
use crate::common::*;
use crate::http_client::*;
use dwellmq::codec::methods::BasicCancel;
use dwellmq::codec::Method;
use dwellmq::BrokerConfig;

#[tokio::test]
async fn deleting_a_queue_over_http_sends_basic_cancel_to_its_consumers() {
    let mut config = BrokerConfig::ephemeral();
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let t = start_with(config).await;
    let addr = t.broker.http_addr().expect("HTTP on");
    let mut client = RawClient::open(t.broker.local_addr()).await;
    client.open_channel(1).await;
    client.declare_queue(1, "doomed", false).await;
    client.consume(1, "doomed", "watcher", false).await;
    let reply = delete(addr, "/api/queues/%2F/doomed", GUEST).await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    assert_eq!(
        client.recv_method_on(1).await,
        Method::BasicCancel(BasicCancel {
            consumer_tag: "watcher".into(),
            no_wait: true,
        })
    );
    // A notification, not a channel.close: the channel still works, and the queue is gone.
    assert_eq!(
        client
            .declare_queue(1, "doomed", false)
            .await
            .consumer_count,
        0
    );
    client.close().await;
}
