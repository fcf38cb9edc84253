//! The data directory itself: one broker per directory, foreign files refused, and an
//! in-memory broker that writes nothing.

use crate::common::*;
use crate::support::*;
use dwellmq::{Broker, BrokerConfig};
use lapin::options::ConfirmSelectOptions;
use lapin::types::FieldTable;

#[tokio::test]
async fn a_second_broker_on_the_same_directory_is_refused() {
    let dir = DataDir::new("locked");
    let first = start_on(&dir).await;
    let refused = Broker::start(on_disk(&dir)).await;
    let message = match refused {
        Ok(_) => panic!("a second broker started on the same data directory"),
        Err(e) => e.to_string(),
    };
    assert!(
        message.contains("in use by another dwellmq") && message.contains("LOCK"),
        "{message}"
    );
    first.shutdown().await;
    // Once the first has stopped, the directory is free.
    start_on(&dir).await.shutdown().await;
}

#[tokio::test]
async fn a_foreign_file_is_refused_naming_it_and_left_as_it_was() {
    let dir = DataDir::new("foreign");
    std::fs::create_dir_all(dir.path()).unwrap();
    let file = dir.path().join("dwellmq.redb");
    let contents = b"not a database, just someone's notes".repeat(200);
    std::fs::write(&file, &contents).unwrap();
    let message = match Broker::start(on_disk(&dir)).await {
        Ok(_) => panic!("started on a foreign file"),
        Err(e) => e.to_string(),
    };
    assert!(message.contains(&file.display().to_string()), "{message}");
    assert_eq!(std::fs::read(&file).unwrap(), contents, "left untouched");
}

/// The store files this process has open, outside the data directories of the tests that run
/// alongside in this binary (all named by `DataDir`).
fn store_files_open() -> Vec<std::path::PathBuf> {
    let fds = std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd (Linux)");
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|path| {
            path.file_name()
                .is_some_and(|n| n == dwellmq_store::DB_FILE)
        })
        .filter(|path| !path.to_string_lossy().contains("dwellmq-test-"))
        .collect()
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn in_memory_writes_nothing() {
    assert_eq!(BrokerConfig::ephemeral().data_dir, None);
    assert_eq!(BrokerConfig::default().data_dir, None);
    let in_cwd = std::path::Path::new(dwellmq_store::DB_FILE);
    let t = start().await;
    let ch = t.channel().await;
    declare(&ch, "durable-in-memory", true, FieldTable::default()).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(publish_confirmed(&ch, "durable-in-memory", "m", true).await);
    // A durable queue and a confirmed persistent message, and still no store file open, nor
    // one left in the working directory.
    assert_eq!(store_files_open(), Vec::<std::path::PathBuf>::new());
    assert!(!in_cwd.exists(), "{} appeared", in_cwd.display());
}
