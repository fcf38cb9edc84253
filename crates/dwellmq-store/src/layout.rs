//! The tables and their keys; DESIGN.md is the reference, byte by byte.

use redb::TableDefinition;

use crate::codec::Enc;

/// The format this build writes and reads (`meta["format"]`).
pub const FORMAT_VERSION: u32 = 2;
/// What `meta["app"]` holds in every dwellmq store.
pub(crate) const APP: &[u8] = b"dwellmq";

/// The store file's name inside the data directory.
pub const DB_FILE: &str = "dwellmq.redb";
/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "LOCK";

pub(crate) type Bin = TableDefinition<'static, &'static [u8], &'static [u8]>;

pub(crate) const META: Bin = TableDefinition::new("meta");
pub(crate) const VHOSTS: Bin = TableDefinition::new("vhosts");
pub(crate) const USERS: Bin = TableDefinition::new("users");
pub(crate) const PERMISSIONS: Bin = TableDefinition::new("permissions");
pub(crate) const EXCHANGES: Bin = TableDefinition::new("exchanges");
pub(crate) const QUEUES: Bin = TableDefinition::new("queues");
pub(crate) const BINDINGS: Bin = TableDefinition::new("bindings");
pub(crate) const POLICIES: Bin = TableDefinition::new("policies");
pub(crate) const MESSAGES: Bin = TableDefinition::new("messages");
pub(crate) const MESSAGE_STATE: Bin = TableDefinition::new("message_state");
pub(crate) const DELAYED_EXCHANGES: Bin = TableDefinition::new("delayed_exchanges");
pub(crate) const HELD: Bin = TableDefinition::new("held");

/// Every table, so that a fresh store has all of them and a read never meets a missing one.
pub(crate) const ALL_TABLES: [Bin; 12] = [
    META,
    VHOSTS,
    USERS,
    PERMISSIONS,
    EXCHANGES,
    QUEUES,
    BINDINGS,
    POLICIES,
    MESSAGES,
    MESSAGE_STATE,
    DELAYED_EXCHANGES,
    HELD,
];

pub(crate) const META_APP: &[u8] = b"app";
pub(crate) const META_FORMAT: &[u8] = b"format";
pub(crate) const META_NEXT_DELAYED_SEQ: &[u8] = b"next_delayed_seq";
pub(crate) const META_NEXT_QUEUE_ID: &[u8] = b"next_queue_id";
pub(crate) const META_NEXT_DELAYED_EXCHANGE: &[u8] = b"next_delayed_exchange";

/// `messages` and `message_state`: queue id, then sequence number.
pub(crate) fn message_key(queue: u64, seq: u64) -> [u8; 16] {
    pair(queue, seq)
}

/// `held`: `u32 exchange number ‖ u64 due_ms ‖ u64 seq` (20 octets). One exchange's messages
/// are one key range in due order, so a release removes from the front of its range.
pub(crate) fn held_key(exchange: u32, due_ms: u64, seq: u64) -> [u8; 20] {
    let mut key = [0u8; 20];
    key[..4].copy_from_slice(&exchange.to_be_bytes());
    key[4..12].copy_from_slice(&due_ms.to_be_bytes());
    key[12..].copy_from_slice(&seq.to_be_bytes());
    key
}

/// The (due_ms, seq) of a `held` key of exchange `exchange`; `None` for another exchange's key
/// or a malformed one.
pub(crate) fn split_held_key(exchange: u32, key: &[u8]) -> Option<(u64, u64)> {
    let rest = key.strip_prefix(&exchange.to_be_bytes()[..])?;
    split_pair(rest)
}

/// The first `held` key after every key of exchange `exchange` (`None`: it is the last number).
pub(crate) fn held_end(exchange: u32) -> Option<[u8; 20]> {
    exchange.checked_add(1).map(|next| held_key(next, 0, 0))
}

pub(crate) fn pair(a: u64, b: u64) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&a.to_be_bytes());
    key[8..].copy_from_slice(&b.to_be_bytes());
    key
}

pub(crate) fn split_pair(key: &[u8]) -> Option<(u64, u64)> {
    let a = u64::from_be_bytes(key.get(..8)?.try_into().ok()?);
    let b = u64::from_be_bytes(key.get(8..16)?.try_into().ok()?);
    (key.len() == 16).then_some((a, b))
}

/// A key made of a vhost and names: each component `u16` length then octets.
pub(crate) fn name_key(parts: &[&str]) -> Vec<u8> {
    parts.iter().fold(Enc::new(), |e, p| e.str16(p)).done()
}
