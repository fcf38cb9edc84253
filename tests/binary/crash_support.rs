//! What the SIGKILL crash test's tasks share (`durability_crash.rs`, `crash_delayed.rs`): a
//! seeded generator, a connection, a passive declare, and the ledger of what the clients were
//! told before the kill.

use std::collections::HashSet;

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};

/// A small deterministic generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub async fn connect(url: &str) -> Connection {
    Connection::connect(&format!("{url}/%2f"), ConnectionProperties::default())
        .await
        .expect("connect")
}

/// What the clients know for sure when the broker dies.
#[derive(Default)]
pub struct Ledger {
    pub confirmed: HashSet<String>,
    pub acked: HashSet<String>,
    /// Delayed messages confirmed (held durably by the exchange).
    pub delayed: HashSet<String>,
    /// Durable queues whose declare-ok came (written by then).
    pub declared: HashSet<String>,
    /// Moves of held messages answered with their new id.
    pub moved: usize,
}

/// Declares `queue` passively on a fresh channel: Err if it is not there.
pub async fn exists(connection: &Connection, queue: &str) -> bool {
    let Ok(ch) = connection.create_channel().await else {
        return false;
    };
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .is_ok()
}
