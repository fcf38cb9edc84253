//! Helpers shared by the store's tests: scratch directories, messages, a backend that fails
//! on demand.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use dwellmq_codec::BasicProperties;
use dwellmq_core::{Body, Message, PackedMessage};
use dwellmq_store::{Payload, StoreOptions};

/// A directory removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "dwellmq-store-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn db_file(&self) -> PathBuf {
        self.0.join(dwellmq_store::DB_FILE)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A persistent message with a body, as a publisher would send it.
pub fn message(routing_key: &str, body: &[u8]) -> Arc<Message> {
    let properties = BasicProperties {
        delivery_mode: Some(2),
        content_type: Some("text/plain".into()),
        ..Default::default()
    };
    Message::new(
        "amq.direct".into(),
        routing_key.into(),
        properties,
        Body::Single(Bytes::copy_from_slice(body)),
        None,
    )
}

pub fn payload(routing_key: &str, body: &[u8]) -> Payload {
    Payload::Message(message(routing_key, body))
}

pub fn packed(routing_key: &str, body: &[u8]) -> Payload {
    Payload::Packed(PackedMessage::pack(&message(routing_key, body)))
}

/// The body of a packed message read back.
pub fn body_of(message: &PackedMessage) -> Vec<u8> {
    let bytes = message.as_slice();
    bytes[bytes.len() - message.body_len()..].to_vec()
}

pub use dwellmq_store::faults::Faults;

/// Options whose backend is a [`FaultyBackend`] on the store file, and its switches.
pub fn faulty_options() -> (StoreOptions, Arc<Faults>) {
    let faults = Arc::new(Faults::default());
    (dwellmq_store::faults::options(faults.clone()), faults)
}
