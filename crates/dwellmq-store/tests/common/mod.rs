//! Helpers shared by the store's tests: scratch directories, messages, a backend that fails
//! on demand.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use dwellmq_codec::BasicProperties;
use dwellmq_core::{Body, Message, PackedMessage};
use dwellmq_store::{BackendError, BackendFactory, Payload, StorageBackend, StoreOptions};
use parking_lot::{Condvar, Mutex};
use redb::backends::FileBackend;

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

/// Switches for [`FaultyBackend`], shared with the test.
#[derive(Debug, Default)]
pub struct Faults {
    /// Every write fails with an I/O error.
    pub fail_writes: AtomicBool,
    /// Every fsync fails.
    pub fail_sync: AtomicBool,
    /// Writes and growth fail with "no space left on device".
    pub disk_full: AtomicBool,
    /// Fsyncs wait while this is set (to make batches form deterministically).
    paused: Mutex<bool>,
    resumed: Condvar,
    /// Fsyncs started (waiting or done).
    pub syncs: AtomicU64,
}

impl Faults {
    pub fn pause(&self) {
        *self.paused.lock() = true;
    }

    pub fn resume(&self) {
        *self.paused.lock() = false;
        self.resumed.notify_all();
    }

    fn wait_if_paused(&self) {
        let mut paused = self.paused.lock();
        while *paused {
            self.resumed.wait(&mut paused);
        }
    }
}

/// The store file, with faults injected on demand.
#[derive(Debug)]
pub struct FaultyBackend {
    inner: FileBackend,
    faults: Arc<Faults>,
}

impl StorageBackend for FaultyBackend {
    fn len(&self) -> Result<u64, io::Error> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        if self.faults.disk_full.load(Ordering::SeqCst) && len > self.inner.len()? {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> Result<(), io::Error> {
        self.faults.syncs.fetch_add(1, Ordering::SeqCst);
        self.faults.wait_if_paused();
        if self.faults.fail_sync.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected fsync failure"));
        }
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        if self.faults.disk_full.load(Ordering::SeqCst) {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        if self.faults.fail_writes.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected write failure"));
        }
        self.inner.write(offset, data)
    }
    fn close(&self) -> Result<(), io::Error> {
        self.inner.close()
    }
    fn try_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(s, e)
    }
    fn try_lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(s, e)
    }
    fn lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(s, e)
    }
    fn lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(s, e)
    }
    fn unlock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(s, e)
    }
    fn query_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(s, e)
    }
}

/// Options whose backend is a [`FaultyBackend`] on the store file, and its switches.
pub fn faulty_options() -> (StoreOptions, Arc<Faults>) {
    let faults = Arc::new(Faults::default());
    let shared = faults.clone();
    let factory: BackendFactory = Arc::new(move |path: &Path| {
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let inner = FileBackend::new(file).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Box::new(FaultyBackend {
            inner,
            faults: shared.clone(),
        }) as Box<dyn StorageBackend>)
    });
    let options = StoreOptions {
        backend: Some(factory),
        ..StoreOptions::default()
    };
    (options, faults)
}
