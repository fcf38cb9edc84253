//! Applying the definition ops that reach beyond one row: a vhost, an exchange or a queue
//! takes what lives under it along.

use redb::ReadableTable;

use super::{prefix_end, remove, Tables, T};
use crate::layout::name_key;
use crate::records::QueueDef;

impl Tables<'_> {
    /// Removes a vhost with every definition, message, stream and held message under it.
    pub(super) fn delete_vhost(&mut self, name: &str) -> Result<(), redb::StorageError> {
        self.vhosts.remove(&name_key(&[name])[..])?;
        let prefix = name_key(&[name]);
        let ids = queue_ids(&self.queues, &prefix)?;
        for id in ids {
            self.purge(id)?;
            self.drop_stream(id)?;
        }
        self.drop_held_under(&prefix)?;
        for table in [
            &mut self.exchanges,
            &mut self.queues,
            &mut self.bindings,
            &mut self.policies,
            &mut self.permissions,
        ] {
            remove_prefix(table, &prefix)?;
        }
        Ok(())
    }

    pub(super) fn delete_user(&mut self, name: &str) -> Result<(), redb::StorageError> {
        remove(&mut self.users, &name_key(&[name]))
    }

    pub(super) fn delete_permission(
        &mut self,
        vhost: &str,
        user: &str,
    ) -> Result<(), redb::StorageError> {
        remove(&mut self.permissions, &name_key(&[vhost, user]))
    }

    /// Removes an exchange, the bindings whose source it is, and the messages it holds.
    pub(super) fn delete_exchange(
        &mut self,
        vhost: &str,
        name: &str,
    ) -> Result<(), redb::StorageError> {
        remove(&mut self.exchanges, &name_key(&[vhost, name]))?;
        remove_prefix(&mut self.bindings, &name_key(&[vhost, name]))?;
        self.drop_held_under(&name_key(&[vhost, name]))
    }

    /// Removes a queue and its messages, or a stream and its log.
    pub(super) fn delete_queue(
        &mut self,
        vhost: &str,
        name: &str,
        id: u64,
    ) -> Result<(), redb::StorageError> {
        remove(&mut self.queues, &name_key(&[vhost, name]))?;
        self.purge(id)?;
        self.drop_stream(id)
    }

    pub(super) fn delete_policy(
        &mut self,
        vhost: &str,
        name: &str,
    ) -> Result<(), redb::StorageError> {
        remove(&mut self.policies, &name_key(&[vhost, name]))
    }
}

fn remove_prefix(table: &mut T<'_>, prefix: &[u8]) -> Result<(), redb::StorageError> {
    match prefix_end(prefix) {
        Some(end) => table.retain_in(prefix..end.as_slice(), |_, _| false),
        None => table.retain_in(prefix.., |_, _| false),
    }
}

fn queue_ids(queues: &T<'_>, prefix: &[u8]) -> Result<Vec<u64>, redb::StorageError> {
    let mut ids = Vec::new();
    let range = match prefix_end(prefix) {
        Some(end) => queues.range(prefix..end.as_slice())?,
        None => queues.range(prefix..)?,
    };
    for entry in range {
        let (key, value) = entry?;
        if let Some(q) = QueueDef::decode(key.value(), value.value()) {
            ids.push(q.id);
        }
    }
    Ok(ids)
}
