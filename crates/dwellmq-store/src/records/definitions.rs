//! The definition records: vhosts, users, permissions, exchanges, queues, bindings, policies.

use crate::codec::{Dec, Enc};
use crate::layout::name_key;

/// A virtual host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VhostDef {
    /// Its name.
    pub name: String,
    /// Whatever the broker keeps with it (description, tags, limits), opaque here.
    pub metadata: Vec<u8>,
}

/// A user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDef {
    /// Login name.
    pub name: String,
    /// The credential as the broker keeps it (a password hash), opaque here. Empty: the mark
    /// that the user was deleted at runtime (so that a configured user stays deleted after a
    /// restart); the writer retries such a mark as it retries a removal.
    pub credential: Vec<u8>,
    /// Tags (`administrator`, ...).
    pub tags: Vec<String>,
}

/// A user's permissions in a vhost, or the mark that they were cleared at runtime (so that
/// permissions the broker's configuration grants stay cleared after a restart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionDef {
    /// The vhost.
    pub vhost: String,
    /// The user.
    pub user: String,
    /// The patterns; `None`: cleared (a mark the writer retries as it retries a removal).
    pub patterns: Option<PermissionPatterns>,
}

/// RabbitMQ's three permission patterns, as the user gave them (regular expressions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionPatterns {
    /// `configure`.
    pub configure: String,
    /// `write`.
    pub write: String,
    /// `read`.
    pub read: String,
}

/// A durable exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeDef {
    /// Its vhost.
    pub vhost: String,
    /// Its name.
    pub name: String,
    /// Its type (`direct`, `topic`, `x-delayed-message`, ...).
    pub kind: String,
    /// Deleted when its last binding goes.
    pub auto_delete: bool,
    /// Not publishable by clients.
    pub internal: bool,
    /// Its arguments, an encoded AMQP field table.
    pub arguments: Vec<u8>,
    /// Who declared it (the management API's `user_who_performed_action`): `None` in a
    /// record written before format 5, which had no field for it.
    pub declared_by: Option<String>,
}

/// A durable queue. `id` names it in the message tables (a queue deleted and declared again
/// gets a new id, so nothing of the old one can reappear).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDef {
    /// Its vhost.
    pub vhost: String,
    /// Its name.
    pub name: String,
    /// Its id, from [`crate::Store::allocate_queue_id`].
    pub id: u64,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
    /// Its arguments, an encoded AMQP field table.
    pub arguments: Vec<u8>,
}

/// What a binding leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestinationKind {
    /// A queue.
    Queue,
    /// An exchange (exchange-to-exchange binding).
    Exchange,
}

/// A binding between durable objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingDef {
    /// Its vhost.
    pub vhost: String,
    /// The source exchange.
    pub source: String,
    /// Queue or exchange.
    pub destination_kind: DestinationKind,
    /// The destination's name.
    pub destination: String,
    /// The binding key.
    pub routing_key: String,
    /// Its arguments (headers exchanges match on them), an encoded AMQP field table.
    pub arguments: Vec<u8>,
}

/// A policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDef {
    /// Its vhost.
    pub vhost: String,
    /// Its name.
    pub name: String,
    /// The pattern matched against names.
    pub pattern: String,
    /// `queues`, `exchanges`, `all`, ...
    pub apply_to: String,
    /// The highest matching priority wins.
    pub priority: i64,
    /// Its definition, encoded by the broker.
    pub definition: Vec<u8>,
}

/// Everything durable but messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Definitions {
    /// Virtual hosts.
    pub vhosts: Vec<VhostDef>,
    /// Users.
    pub users: Vec<UserDef>,
    /// Permissions (and cleared ones), by vhost then user.
    pub permissions: Vec<PermissionDef>,
    /// Durable exchanges.
    pub exchanges: Vec<ExchangeDef>,
    /// Durable queues.
    pub queues: Vec<QueueDef>,
    /// Bindings.
    pub bindings: Vec<BindingDef>,
    /// Policies.
    pub policies: Vec<PolicyDef>,
}
// Value encodings. Each `decode` returns `None` on any malformation; callers name the record.

impl VhostDef {
    pub(crate) fn key(&self) -> Vec<u8> {
        name_key(&[&self.name])
    }
    pub(crate) fn value(&self) -> Vec<u8> {
        Enc::new().bytes32(&self.metadata).done()
    }
    pub(crate) fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let name = k.str16()?;
        k.end()?;
        let mut v = Dec::new(value);
        let metadata = v.bytes32()?;
        v.end()?;
        Some(VhostDef { name, metadata })
    }
}

impl UserDef {
    pub(crate) fn key(&self) -> Vec<u8> {
        name_key(&[&self.name])
    }
    pub(crate) fn value(&self) -> Vec<u8> {
        let e = Enc::new()
            .bytes32(&self.credential)
            .u32(self.tags.len() as u32);
        self.tags.iter().fold(e, |e, t| e.str16(t)).done()
    }
    pub(crate) fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let name = k.str16()?;
        k.end()?;
        let mut v = Dec::new(value);
        let credential = v.bytes32()?;
        let count = v.u32()?;
        let tags = (0..count).map(|_| v.str16()).collect::<Option<Vec<_>>>()?;
        v.end()?;
        Some(UserDef {
            name,
            credential,
            tags,
        })
    }
}

impl PermissionDef {
    pub(crate) fn key(&self) -> Vec<u8> {
        name_key(&[&self.vhost, &self.user])
    }
    pub(crate) fn value(&self) -> Vec<u8> {
        match &self.patterns {
            None => Enc::new().u8(0).done(),
            Some(p) => Enc::new()
                .u8(1)
                .str16(&p.configure)
                .str16(&p.write)
                .str16(&p.read)
                .done(),
        }
    }
    pub(crate) fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let (vhost, user) = (k.str16()?, k.str16()?);
        k.end()?;
        let mut v = Dec::new(value);
        let patterns = match v.u8()? {
            0 => None,
            1 => Some(PermissionPatterns {
                configure: v.str16()?,
                write: v.str16()?,
                read: v.str16()?,
            }),
            _ => return None,
        };
        v.end()?;
        Some(PermissionDef {
            vhost,
            user,
            patterns,
        })
    }
}

impl ExchangeDef {
    pub(crate) fn key(&self) -> Vec<u8> {
        name_key(&[&self.vhost, &self.name])
    }
    pub(crate) fn value(&self) -> Vec<u8> {
        let flags = u8::from(self.auto_delete)
            | (u8::from(self.internal) << 1)
            | (u8::from(self.declared_by.is_some()) << 2);
        let enc = Enc::new()
            .str16(&self.kind)
            .u8(flags)
            .bytes32(&self.arguments);
        match &self.declared_by {
            // Format 5: flag 4 says the declarer follows.
            Some(user) => enc.str16(user).done(),
            None => enc.done(),
        }
    }
    pub(crate) fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let (vhost, name) = (k.str16()?, k.str16()?);
        k.end()?;
        let mut v = Dec::new(value);
        let kind = v.str16()?;
        let flags = v.u8()?;
        let arguments = v.bytes32()?;
        let declared_by = if flags & 4 != 0 {
            Some(v.str16()?)
        } else {
            None
        };
        v.end()?;
        Some(ExchangeDef {
            vhost,
            name,
            kind,
            auto_delete: flags & 1 != 0,
            internal: flags & 2 != 0,
            arguments,
            declared_by,
        })
    }
}

impl QueueDef {
    pub(crate) fn key(&self) -> Vec<u8> {
        name_key(&[&self.vhost, &self.name])
    }
    pub(crate) fn value(&self) -> Vec<u8> {
        Enc::new()
            .u64(self.id)
            .u8(u8::from(self.auto_delete))
            .bytes32(&self.arguments)
            .done()
    }
    pub(crate) fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let (vhost, name) = (k.str16()?, k.str16()?);
        k.end()?;
        let mut v = Dec::new(value);
        let id = v.u64()?;
        let flags = v.u8()?;
        let arguments = v.bytes32()?;
        v.end()?;
        Some(QueueDef {
            vhost,
            name,
            id,
            auto_delete: flags & 1 != 0,
            arguments,
        })
    }
}

impl BindingDef {
    /// The whole binding is the key (a binding is its identity); the value is empty.
    pub(crate) fn key(&self) -> Vec<u8> {
        let kind = match self.destination_kind {
            DestinationKind::Queue => 0,
            DestinationKind::Exchange => 1,
        };
        Enc::new()
            .str16(&self.vhost)
            .str16(&self.source)
            .u8(kind)
            .str16(&self.destination)
            .str16(&self.routing_key)
            .bytes32(&self.arguments)
            .done()
    }
    pub(crate) fn decode(key: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let vhost = k.str16()?;
        let source = k.str16()?;
        let destination_kind = match k.u8()? {
            0 => DestinationKind::Queue,
            1 => DestinationKind::Exchange,
            _ => return None,
        };
        let destination = k.str16()?;
        let routing_key = k.str16()?;
        let arguments = k.bytes32()?;
        k.end()?;
        Some(BindingDef {
            vhost,
            source,
            destination_kind,
            destination,
            routing_key,
            arguments,
        })
    }
}

impl PolicyDef {
    pub(crate) fn key(&self) -> Vec<u8> {
        name_key(&[&self.vhost, &self.name])
    }
    pub(crate) fn value(&self) -> Vec<u8> {
        Enc::new()
            .str16(&self.pattern)
            .str16(&self.apply_to)
            .i64(self.priority)
            .bytes32(&self.definition)
            .done()
    }
    pub(crate) fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let (vhost, name) = (k.str16()?, k.str16()?);
        k.end()?;
        let mut v = Dec::new(value);
        let pattern = v.str16()?;
        let apply_to = v.str16()?;
        let priority = v.i64()?;
        let definition = v.bytes32()?;
        v.end()?;
        Some(PolicyDef {
            vhost,
            name,
            pattern,
            apply_to,
            priority,
            definition,
        })
    }
}
