//! Listing a delayed exchange's held messages needs the store for those held on disk: while
//! the store cannot be read (reopening after a failed fsync), the listing answers 503 with
//! RabbitMQ's error body instead of a page that silently leaves them out.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::common::{eventually, DataDir, T0_MS};
use crate::http_client::{get, post, put, start_http, GUEST};
use crate::support::{channel, declare, publish_confirmed, publish_delayed};
use dwellmq::{BrokerConfig, StoreFaults};
use lapin::options::ConfirmSelectOptions;
use lapin::types::FieldTable;
use serde_json::json;

const LISTING: &str = "/api/delayed/%2F/later";

#[tokio::test]
async fn listing_disk_held_messages_while_the_store_is_unreadable_answers_503() {
    let dir = DataDir::new("delayed-listing-unreadable");
    let faults = Arc::new(StoreFaults::default());
    let (broker, addr) = start_http(BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        store_faults: Some(Arc::clone(&faults)),
        ..BrokerConfig::ephemeral().with_manual_clock(T0_MS)
    })
    .await;
    let declared = put(
        addr,
        "/api/exchanges/%2F/later",
        GUEST,
        json!({
            "type": "x-delayed-message",
            "durable": true,
            "arguments": {"x-delayed-type": "direct"}
        }),
    )
    .await;
    assert_eq!(declared.status, 201, "{}", declared.text());
    put(addr, "/api/queues/%2F/due", GUEST, json!({"durable": true})).await;
    post(
        addr,
        "/api/bindings/%2F/e/later/q/due",
        GUEST,
        json!({"routing_key": "k"}),
    )
    .await;
    let (_connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare(&ch, "scratch", true, FieldTable::default()).await;
    // A minute ahead: held on disk only.
    assert!(publish_delayed(&ch, "later", "held", 60_000).await);
    let listed = get(addr, LISTING, GUEST).await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(listed.json()["items"].as_array().map(Vec::len), Some(1));

    // An fsync fails and the file cannot be opened again for now.
    faults.fail_reads.store(true, Ordering::SeqCst);
    faults.fail_sync.store(true, Ordering::SeqCst);
    assert!(!publish_confirmed(&ch, "scratch", "lost", true).await);
    let mut last = None;
    for _ in 0..200 {
        let reply = get(addr, LISTING, GUEST).await;
        if reply.status == 503 {
            last = Some(reply);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let unavailable = last.expect("the listing answers 503 while the store is unreadable");
    assert_eq!(unavailable.json()["error"], "service_unavailable");
    assert!(
        unavailable.json()["reason"]
            .as_str()
            .is_some_and(|r| r.contains("held on disk")),
        "{}",
        unavailable.text()
    );

    faults.fail_reads.store(false, Ordering::SeqCst);
    faults.fail_sync.store(false, Ordering::SeqCst);
    eventually("the disk alarm clears", || !broker.disk_alarm()).await;
    let listed = get(addr, LISTING, GUEST).await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(listed.json()["items"].as_array().map(Vec::len), Some(1));
    broker.shutdown().await;
}
