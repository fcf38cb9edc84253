//! What an inspected store holds, counted record by record in the store's own format: every
//! record is decoded (one that does not is a problem, not an error), and each stored count is
//! checked against the records it counts.

use std::collections::BTreeMap;
use std::path::Path;

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata, TableError};

use super::inspect::damaged;
use super::tally_held::{self, HeldTally};
use super::tally_stream::{self, StreamTally};
use crate::codec::hex;
use crate::error::Result;
use crate::layout::{
    split_pair, Bin, BINDINGS, EXCHANGES, MESSAGES, MESSAGE_STATE, PERMISSIONS, POLICIES, QUEUES,
    QUEUE_COUNTS, SPILLED, USERS, VHOSTS,
};
use crate::queue_counts::decode_count;
use crate::records::{
    decode_message_value, BindingDef, Definitions, DeliveryState, ExchangeDef, PermissionDef,
    PolicyDef, QueueDef, UserDef, VhostDef,
};

/// What a store holds.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Every definition that decodes.
    pub definitions: Definitions,
    /// Users deleted at runtime (their records are marks), among `definitions.users`.
    pub users_deleted: usize,
    /// Permissions cleared at runtime (marks), among `definitions.permissions`.
    pub permissions_cleared: usize,
    /// Persistent messages of each durable queue (every queue defined, then the ids that
    /// hold messages without a definition).
    pub queues: Vec<QueueTally>,
    /// Messages held by each delayed exchange that holds any.
    pub held: Vec<HeldTally>,
    /// Transient messages spilled before the last stop (the next open drops them).
    pub spilled: u64,
    /// Each stream's log (format 5).
    pub streams: Vec<StreamTally>,
}

/// One durable queue's stored messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueTally {
    /// Its vhost and name; `None` for messages under an id no queue definition has.
    pub name: Option<(String, String)>,
    /// Its store id.
    pub id: u64,
    /// Messages.
    pub messages: u64,
    /// Their body octets.
    pub bytes: u64,
    /// Delivered before (they come back redelivered).
    pub delivered: u64,
    /// Kept after at-least-once dead-lettering until their targets take them.
    pub kept_dead_letters: u64,
}

#[derive(Default)]
struct Counted {
    messages: u64,
    bytes: u64,
    delivered: u64,
    kept_dead_letters: u64,
}

pub(crate) fn tally(
    read: &ReadTransaction,
    format: u32,
    path: &Path,
    problems: &mut Vec<String>,
) -> Result<Tally> {
    let mut definitions = Definitions::default();
    let mut decode = Decoding {
        read,
        path,
        problems,
    };
    definitions.vhosts = decode.all(VHOSTS, "vhosts", VhostDef::decode)?;
    definitions.users = decode.all(USERS, "users", UserDef::decode)?;
    definitions.permissions = decode.all(PERMISSIONS, "permissions", PermissionDef::decode)?;
    definitions.exchanges = decode.all(EXCHANGES, "exchanges", ExchangeDef::decode)?;
    definitions.queues = decode.all(QUEUES, "queues", QueueDef::decode)?;
    definitions.bindings = decode.all(BINDINGS, "bindings", |k, _| BindingDef::decode(k))?;
    definitions.policies = decode.all(POLICIES, "policies", PolicyDef::decode)?;
    let counted = decode.messages()?;
    decode.queue_counts(&counted)?;
    let spilled = decode.len(SPILLED)?;
    let held = tally_held::tally(read, format, path, decode.problems)?;
    let streams = tally_stream::tally(read, path, decode.problems)?;
    let mut queues: Vec<QueueTally> = definitions
        .queues
        .iter()
        .map(|q| queue_tally(Some((q.vhost.clone(), q.name.clone())), q.id, &counted))
        .collect();
    for &id in counted.keys() {
        if !definitions.queues.iter().any(|q| q.id == id) {
            queues.push(queue_tally(None, id, &counted));
        }
    }
    Ok(Tally {
        users_deleted: definitions
            .users
            .iter()
            .filter(|u| u.credential.is_empty())
            .count(),
        permissions_cleared: definitions
            .permissions
            .iter()
            .filter(|p| p.patterns.is_none())
            .count(),
        definitions,
        queues,
        held,
        spilled,
        streams,
    })
}

fn queue_tally(
    name: Option<(String, String)>,
    id: u64,
    counted: &BTreeMap<u64, Counted>,
) -> QueueTally {
    let c = counted.get(&id);
    QueueTally {
        name,
        id,
        messages: c.map_or(0, |c| c.messages),
        bytes: c.map_or(0, |c| c.bytes),
        delivered: c.map_or(0, |c| c.delivered),
        kept_dead_letters: c.map_or(0, |c| c.kept_dead_letters),
    }
}

struct Decoding<'a> {
    read: &'a ReadTransaction,
    path: &'a Path,
    problems: &'a mut Vec<String>,
}

impl Decoding<'_> {
    /// Each record of `def` (none if the table is missing), by key.
    fn each(&mut self, def: Bin, mut f: impl FnMut(&mut Self, &[u8], &[u8])) -> Result<()> {
        let table = match self.read.open_table(def) {
            Ok(table) => table,
            Err(TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(e) => return Err(damaged(self.path, e)),
        };
        for entry in table.iter().map_err(|e| damaged(self.path, e))? {
            let (key, value) = entry.map_err(|e| damaged(self.path, e))?;
            f(self, key.value(), value.value());
        }
        Ok(())
    }

    fn len(&self, def: Bin) -> Result<u64> {
        match self.read.open_table(def) {
            Ok(table) => table.len().map_err(|e| damaged(self.path, e)),
            Err(TableError::TableDoesNotExist(_)) => Ok(0),
            Err(e) => Err(damaged(self.path, e)),
        }
    }

    fn malformed(&mut self, table: &str, key: &[u8]) {
        self.problems
            .push(format!("record {} in table {table} is malformed", hex(key)));
    }

    fn all<R>(
        &mut self,
        def: Bin,
        name: &'static str,
        decode: impl Fn(&[u8], &[u8]) -> Option<R>,
    ) -> Result<Vec<R>> {
        let mut out = Vec::new();
        self.each(def, |d, key, value| match decode(key, value) {
            Some(record) => out.push(record),
            None => d.malformed(name, key),
        })?;
        Ok(out)
    }

    /// Every queue's messages, and their delivery states.
    fn messages(&mut self) -> Result<BTreeMap<u64, Counted>> {
        let mut counted: BTreeMap<u64, Counted> = BTreeMap::new();
        self.each(MESSAGES, |d, key, value| {
            match (split_pair(key), decode_message_value(value)) {
                (Some((queue, _)), Some((_, delivered, message))) => {
                    let c = counted.entry(queue).or_default();
                    c.messages += 1;
                    c.bytes += message.body_len() as u64;
                    c.delivered += u64::from(delivered);
                }
                _ => d.malformed("messages", key),
            }
        })?;
        let messages = match self.read.open_table(MESSAGES) {
            Ok(table) => Some(table),
            Err(TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(damaged(self.path, e)),
        };
        self.each(MESSAGE_STATE, |d, key, value| {
            let (Some((queue, _)), Some(state)) = (split_pair(key), DeliveryState::decode(value))
            else {
                return d.malformed("message_state", key);
            };
            let stored = messages
                .as_ref()
                .and_then(|t| t.get(key).ok().flatten())
                .map(|v| v.value().first().is_some_and(|b| b & 0x80 != 0));
            let Some(delivered_bit) = stored else {
                d.problems.push(format!(
                    "message_state record {} has no message (ignored)",
                    hex(key)
                ));
                return;
            };
            let c = counted.entry(queue).or_default();
            // Delivered by its own publish (the bit) and marked later too: counted once.
            c.delivered += u64::from(state.redelivered && !delivered_bit);
            c.kept_dead_letters += u64::from(state.dead_letter_reason.is_some());
        })?;
        Ok(counted)
    }

    /// `queue_counts` against the messages it counts (a store of a format without the table
    /// gets it counted by its upgrade).
    fn queue_counts(&mut self, counted: &BTreeMap<u64, Counted>) -> Result<()> {
        let mut rows = BTreeMap::new();
        let table = match self.read.open_table(QUEUE_COUNTS) {
            Ok(_) => true,
            Err(TableError::TableDoesNotExist(_)) => false,
            Err(e) => return Err(damaged(self.path, e)),
        };
        if !table {
            return Ok(());
        }
        self.each(QUEUE_COUNTS, |d, key, value| {
            match (key.try_into().map(u64::from_be_bytes), decode_count(value)) {
                (Ok(queue), Some(row)) => {
                    rows.insert(queue, row);
                }
                _ => d.malformed("queue_counts", key),
            }
        })?;
        let ids: std::collections::BTreeSet<u64> =
            rows.keys().chain(counted.keys()).copied().collect();
        for id in ids {
            let row = rows.get(&id).copied().unwrap_or((0, 0));
            let actual = counted.get(&id).map_or((0, 0), |c| (c.messages, c.bytes));
            if row != actual {
                self.problems.push(format!(
                    "queue_counts of queue id {id} says {} messages of {} octets; `messages` \
                     holds {} of {} (a restart shows a paging queue as long as queue_counts says)",
                    row.0, row.1, actual.0, actual.1
                ));
            }
        }
        Ok(())
    }
}
