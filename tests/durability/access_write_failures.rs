//! A user or permission change over HTTP whose store write fails is answered with a 500 and is
//! not in effect: the user or permission it replaced (or none) is in effect again before the
//! answer, as for definitions, so that nothing lives on in memory that a restart would not
//! have. A deletion is different: the store retries its mark until it is written, so it holds
//! (see `failure_paths.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::common::{connect_url, eventually, DataDir, T0_MS};
use crate::http_client::{get, put, start_http, As, GUEST};
use dwellmq::{BrokerConfig, BrokerHandle, StoreFaults};
use serde_json::{json, Value};

async fn start(dir: &DataDir, faults: &Arc<StoreFaults>) -> (BrokerHandle, std::net::SocketAddr) {
    start_http(BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        store_faults: Some(Arc::clone(faults)),
        ..BrokerConfig::ephemeral().with_manual_clock(T0_MS)
    })
    .await
}

async fn writes_fail(broker: &BrokerHandle, faults: &StoreFaults, fail: bool) {
    faults.fail_writes.store(fail, Ordering::SeqCst);
    if !fail {
        eventually("the disk alarm clears", || !broker.disk_alarm()).await;
    }
}

fn everything() -> Value {
    json!({"configure": ".*", "write": ".*", "read": ".*"})
}

/// Whether `user` logs in over AMQP with `password` (vhost `/`).
async fn logs_in(broker: &BrokerHandle, user: &str, password: &str) -> bool {
    let url = format!(
        "amqp://{user}:{password}@127.0.0.1:{}/%2F",
        broker.local_addr().port()
    );
    let connected = tokio::time::timeout(std::time::Duration::from_secs(10), connect_url(&url))
        .await
        .expect("the login is answered in time");
    connected.is_ok()
}

/// The user's tags as the API shows them; `None` for a 404.
async fn tags_of(addr: std::net::SocketAddr, user: &str) -> Option<Value> {
    let reply = get(addr, &format!("/api/users/{user}"), GUEST).await;
    if reply.status == 404 {
        return None;
    }
    assert_eq!(reply.status, 200, "{}", reply.text());
    Some(reply.json()["tags"].clone())
}

/// The user's configure pattern in `vhost`; `None` for a 404.
async fn configure_of(addr: std::net::SocketAddr, vhost: &str, user: &str) -> Option<String> {
    let reply = get(addr, &format!("/api/permissions/{vhost}/{user}"), GUEST).await;
    if reply.status == 404 {
        return None;
    }
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["configure"].as_str().map(str::to_owned)
}

/// Before, each failed change answered 500 but stayed in effect until a restart: the new
/// password logged in, the new tags showed, the new user and permission existed.
#[tokio::test]
async fn a_user_or_permission_change_whose_write_fails_is_taken_back() {
    let dir = DataDir::new("access-write-failures");
    let faults = Arc::new(StoreFaults::default());
    let (broker, addr) = start(&dir, &faults).await;
    let created = put(
        addr,
        "/api/users/ops",
        GUEST,
        json!({"password": "old-pw", "tags": "monitoring"}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let granted = put(addr, "/api/permissions/%2F/ops", GUEST, everything()).await;
    assert_eq!(granted.status, 201, "{}", granted.text());
    let added = put(addr, "/api/vhosts/other", GUEST, json!({})).await;
    assert_eq!(added.status, 201, "{}", added.text());
    assert!(logs_in(&broker, "ops", "old-pw").await);

    writes_fail(&broker, &faults, true).await;
    let replaced = put(
        addr,
        "/api/users/ops",
        GUEST,
        json!({"password": "new-pw", "tags": "administrator"}),
    )
    .await;
    assert_eq!(replaced.status, 500, "{}", replaced.text());
    assert!(
        replaced.text().contains("could not be written"),
        "{}",
        replaced.text()
    );
    let new_user = put(
        addr,
        "/api/users/temp",
        GUEST,
        json!({"password": "temp-pw", "tags": "administrator"}),
    )
    .await;
    assert_eq!(new_user.status, 500, "{}", new_user.text());
    let narrowed = put(
        addr,
        "/api/permissions/%2F/ops",
        GUEST,
        json!({"configure": "^only$", "write": "", "read": ""}),
    )
    .await;
    assert_eq!(narrowed.status, 500, "{}", narrowed.text());
    let new_grant = put(addr, "/api/permissions/other/ops", GUEST, everything()).await;
    assert_eq!(new_grant.status, 500, "{}", new_grant.text());

    // Taken back by the time of the answers, while writes still fail.
    assert_eq!(tags_of(addr, "ops").await, Some(json!(["monitoring"])));
    assert_eq!(
        tags_of(addr, "temp").await,
        None,
        "the new user is not there"
    );
    assert_eq!(
        configure_of(addr, "%2F", "ops").await.as_deref(),
        Some(".*")
    );
    assert_eq!(configure_of(addr, "other", "ops").await, None);
    let as_temp = get(addr, "/api/whoami", As::User("temp", "temp-pw")).await;
    assert_eq!(as_temp.status, 401, "{}", as_temp.text());
    writes_fail(&broker, &faults, false).await;
    assert!(logs_in(&broker, "ops", "old-pw").await, "the old password");
    assert!(!logs_in(&broker, "ops", "new-pw").await, "not the new one");

    // What memory shows is what the store holds: a restart brings back the same.
    let broker = broker.restart().await.expect("restarts");
    assert_eq!(tags_of(addr, "ops").await, Some(json!(["monitoring"])));
    assert_eq!(tags_of(addr, "temp").await, None);
    assert_eq!(
        configure_of(addr, "%2F", "ops").await.as_deref(),
        Some(".*")
    );
    assert_eq!(configure_of(addr, "other", "ops").await, None);
    assert!(logs_in(&broker, "ops", "old-pw").await);

    // Once writes work, the same changes are written and in effect.
    let replaced = put(
        addr,
        "/api/users/ops",
        GUEST,
        json!({"password": "new-pw", "tags": "administrator"}),
    )
    .await;
    assert_eq!(replaced.status, 204, "{}", replaced.text());
    assert_eq!(tags_of(addr, "ops").await, Some(json!(["administrator"])));
    assert!(logs_in(&broker, "ops", "new-pw").await);
    broker.shutdown().await;
}
