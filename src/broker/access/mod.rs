//! RabbitMQ's access model: users (password hash, tags, loopback-only), and per user and
//! vhost the configure / write / read patterns that every channel operation is checked
//! against (`cache.rs` keeps those checks cheap).
//!
//! The store changes at runtime (the HTTP API, definitions import); every change bumps a
//! generation number, which is how channels learn that what they cached is stale.

mod cache;
mod in_flight;
pub(crate) mod password;
pub(crate) mod permission;
mod stored;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use dwellmq_store::{Op, PermissionDef, Store, UserDef};

use parking_lot::RwLock;

pub(crate) use cache::{AccessCache, Principal};
use in_flight::InFlight;
use password::{HashingAlgorithm, PasswordError, PasswordHash};
pub(crate) use permission::{Operation, Permission, ResourceKind};

use crate::config::{BrokerConfig, UserConfig};

/// A user.
#[derive(Debug, Clone)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) password: PasswordHash,
    /// RabbitMQ's tags (`administrator`, `monitoring`, `management`, `policymaker`, or any
    /// other word, which RabbitMQ keeps and ignores).
    pub(crate) tags: Vec<String>,
    /// Only connections from a loopback address may log in as this user (RabbitMQ's
    /// `loopback_users`, which holds `guest` by default).
    pub(crate) loopback_only: bool,
}

impl User {
    /// Whether `password` is this user's.
    pub(crate) fn check_password(&self, password: &str) -> bool {
        self.password.verify(password)
    }
}

/// Why the configured users or permissions cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AccessError {
    #[error("user '{user}': {error}")]
    Password { user: String, error: PasswordError },
    #[error("permissions of user '{user}' in vhost '{vhost}': {error}")]
    Pattern {
        user: String,
        vhost: String,
        error: permission::PatternError,
    },
    #[error("permissions name user '{0}', who is not configured")]
    NoSuchUser(String),
    #[error("permissions name vhost '{0}', which is not configured")]
    NoSuchVhost(String),
}

/// A permission's key: (vhost, user).
type PermissionKey = (String, String);

#[derive(Default)]
struct Tables {
    users: BTreeMap<String, Arc<User>>,
    /// By (vhost, user): the order RabbitMQ lists them in.
    permissions: BTreeMap<PermissionKey, Arc<Permission>>,
    /// Changes whose write is in flight: what a failed one takes back.
    users_in_flight: InFlight<String, User>,
    permissions_in_flight: InFlight<PermissionKey, Permission>,
}

/// What store writes' completions reach (on the writer thread).
#[derive(Default)]
struct Shared {
    tables: RwLock<Tables>,
    /// Bumped on every change.
    generation: AtomicU64,
}

/// One change in flight, as its write's completion names it.
enum Written {
    User(String, u64),
    Permission(PermissionKey, u64),
}

/// Users and permissions.
#[derive(Default)]
pub(crate) struct Access {
    shared: Arc<Shared>,
    /// Where runtime changes are written (set once the stored ones are applied at start).
    store: OnceLock<Arc<Store>>,
}

impl Access {
    /// The users and permissions `config` names. A user's `vhosts` list grants `.*` in those
    /// vhosts (`*`: all of `vhosts`) unless a permission entry names the same user and vhost.
    pub(crate) fn from_config(config: &BrokerConfig) -> Result<Self, AccessError> {
        let mut tables = Tables::default();
        for u in &config.users {
            tables
                .users
                .insert(u.name.clone(), Arc::new(user_from_config(u)?));
        }
        let all_vhosts: Vec<&str> = std::iter::once("/")
            .chain(config.vhosts.iter().map(String::as_str))
            .collect();
        for u in &config.users {
            for v in &u.vhosts {
                let names: Vec<&str> = if v == "*" {
                    all_vhosts.clone()
                } else {
                    vec![v]
                };
                for vhost in names {
                    tables.permissions.insert(
                        (vhost.to_string(), u.name.clone()),
                        Arc::new(Permission::full()),
                    );
                }
            }
        }
        for p in &config.permissions {
            if !tables.users.contains_key(&p.user) {
                return Err(AccessError::NoSuchUser(p.user.clone()));
            }
            if !all_vhosts.contains(&p.vhost.as_str()) {
                return Err(AccessError::NoSuchVhost(p.vhost.clone()));
            }
            let permission = Permission::new(&p.configure, &p.write, &p.read).map_err(|error| {
                AccessError::Pattern {
                    user: p.user.clone(),
                    vhost: p.vhost.clone(),
                    error,
                }
            })?;
            tables
                .permissions
                .insert((p.vhost.clone(), p.user.clone()), Arc::new(permission));
        }
        if !tables.users.contains_key("guest") {
            tracing::info!(
                "the configuration defines users without 'guest': there is no guest user \
                 (list it among the users to keep it)"
            );
        }
        Ok(Access {
            shared: Arc::new(Shared {
                tables: RwLock::new(tables),
                generation: AtomicU64::new(0),
            }),
            store: OnceLock::new(),
        })
    }

    /// Applies what the store holds over the configured users and permissions (the last
    /// runtime change wins, deletions included), then writes every later change to `store`.
    /// Returns how many records were applied; a record that does not decode is skipped with
    /// a warning.
    pub(crate) fn restore(
        &self,
        users: &[UserDef],
        permissions: &[PermissionDef],
        store: Arc<Store>,
    ) -> usize {
        let mut applied = 0;
        {
            let mut tables = self.shared.tables.write();
            for def in users {
                match stored::user_from_record(def) {
                    Ok(stored::StoredUser::Present(user)) => {
                        tables.users.insert(user.name.clone(), Arc::new(user));
                    }
                    Ok(stored::StoredUser::Deleted(name)) => {
                        tables.users.remove(&name);
                        tables.permissions.retain(|(_, user), _| *user != name);
                    }
                    Err(why) => {
                        tracing::warn!(user = %def.name, "stored user not restored: {why}");
                        continue;
                    }
                }
                applied += 1;
            }
            for def in permissions {
                let key = (def.vhost.clone(), def.user.clone());
                let Some(p) = &def.patterns else {
                    tables.permissions.remove(&key);
                    applied += 1;
                    continue;
                };
                if !tables.users.contains_key(&def.user) {
                    tracing::warn!(user = %def.user, vhost = %def.vhost, "stored permission of a user that is gone, not restored");
                    continue;
                }
                match Permission::new(&p.configure, &p.write, &p.read) {
                    Ok(permission) => {
                        tables.permissions.insert(key, Arc::new(permission));
                        applied += 1;
                    }
                    Err(e) => {
                        tracing::warn!(user = %def.user, vhost = %def.vhost, "stored permission not restored: {e}");
                    }
                }
            }
        }
        self.changed();
        let _ = self.store.set(store);
        applied
    }

    /// Submits a change to the store, if there is one (under the tables' lock: the store sees
    /// changes in the order memory does), `written` naming what it changed. A failure is
    /// logged, takes the change back (see [`in_flight`]) and is then reported to whoever
    /// awaits the returned [`Stored`]; a deletion is retried by the store until it is written.
    fn write(&self, tables: &mut Tables, ops: Vec<Op>, written: Vec<Written>) -> Stored {
        let Some(store) = self.store.get() else {
            return Stored(None);
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A completion on this thread came from inside `submit` (the store is closed): it
        // cannot take the lock this thread holds, so it leaves its outcome here.
        let submitter = std::thread::current().id();
        let inline = Arc::new(parking_lot::Mutex::new(None));
        let (shared, inline_slot) = (Arc::clone(&self.shared), Arc::clone(&inline));
        store.submit(ops, move |outcome| {
            if let Err(e) = &outcome {
                tracing::error!(error = %e, "writing a user or permission change failed; it is taken back");
            }
            let failed = outcome.is_err();
            if std::thread::current().id() == submitter {
                *inline_slot.lock() = Some((failed, written));
            } else {
                let mut tables = shared.tables.write();
                let undone = tables.finish(written, failed);
                drop(tables);
                if undone {
                    shared.changed();
                }
            }
            // Only now: the answer comes after the change is taken back.
            let _ = tx.send(outcome.map(|_| ()).map_err(|e| e.to_string()));
        });
        if let Some((failed, written)) = inline.lock().take() {
            tables.finish(written, failed);
        }
        Stored(Some(rx))
    }

    /// The generation: changes whenever users or permissions do.
    pub(crate) fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.shared.changed();
    }

    fn has_store(&self) -> bool {
        self.store.get().is_some()
    }

    pub(crate) fn user(&self, name: &str) -> Option<Arc<User>> {
        self.shared.tables.read().users.get(name).cloned()
    }

    /// Every user, by name.
    pub(crate) fn users(&self) -> Vec<Arc<User>> {
        self.shared.tables.read().users.values().cloned().collect()
    }

    /// Adds or replaces a user; true if it is new. The change is in effect at once; the
    /// returned [`Stored`] says when it is on disk (if it cannot be written, the user it
    /// replaced, or none, is in effect again by then).
    pub(crate) fn put_user(&self, user: User) -> (bool, Stored) {
        let mut tables = self.shared.tables.write();
        let ops = vec![Op::PutUser(stored::user_record(&user))];
        let (name, put) = (user.name.clone(), Arc::new(user));
        let replaced = tables.users.insert(name.clone(), Arc::clone(&put));
        let created = replaced.is_none();
        let stored = if self.has_store() {
            let id = tables
                .users_in_flight
                .begin(name.clone(), Some(put), replaced);
            self.write(&mut tables, ops, vec![Written::User(name, id)])
        } else {
            Stored(None)
        };
        drop(tables);
        self.changed();
        (created, stored)
    }

    /// Removes a user and its permissions; false if there was none.
    pub(crate) fn delete_user(&self, name: &str) -> (bool, Stored) {
        let mut tables = self.shared.tables.write();
        let replaced = tables.users.remove(name);
        let existed = replaced.is_some();
        // Only an actual deletion is marked: a mark for a name that never existed would delete
        // a user added to the configuration later.
        let mut ops = Vec::new();
        if existed {
            ops.push(Op::PutUser(stored::user_deleted(name)));
        }
        let mut permissions = Vec::new();
        tables.permissions.retain(|(vhost, user), permission| {
            let keep = user != name;
            if !keep {
                // Marked cleared, so that a configured permission does not come back if the
                // user is created again.
                ops.push(Op::PutPermission(stored::permission_record(
                    vhost, user, None,
                )));
                permissions.push(((vhost.clone(), user.clone()), Arc::clone(permission)));
            }
            keep
        });
        let stored = if ops.is_empty() || !self.has_store() {
            Stored(None)
        } else {
            // Deletions are never taken back, but a failed change before them must not put
            // back what they deleted.
            let mut written = Vec::new();
            if let Some(replaced) = replaced {
                let name = name.to_owned();
                let id = tables
                    .users_in_flight
                    .begin(name.clone(), None, Some(replaced));
                written.push(Written::User(name, id));
            }
            for (key, replaced) in permissions {
                let id = tables
                    .permissions_in_flight
                    .begin(key.clone(), None, Some(replaced));
                written.push(Written::Permission(key, id));
            }
            self.write(&mut tables, ops, written)
        };
        drop(tables);
        self.changed();
        (existed, stored)
    }

    /// The user's permissions in `vhost`.
    pub(crate) fn permission(&self, vhost: &str, user: &str) -> Option<Arc<Permission>> {
        self.shared
            .tables
            .read()
            .permissions
            .get(&(vhost.to_string(), user.to_string()))
            .cloned()
    }

    /// Every (vhost, user, permission), by vhost then user.
    pub(crate) fn permissions(&self) -> Vec<(String, String, Arc<Permission>)> {
        self.shared
            .tables
            .read()
            .permissions
            .iter()
            .map(|((v, u), p)| (v.clone(), u.clone(), Arc::clone(p)))
            .collect()
    }

    /// Sets a user's permissions in a vhost; true if the user had none there. In effect at
    /// once; if it cannot be written, what it replaced (or none) is in effect again by the
    /// time the returned [`Stored`] says so.
    pub(crate) fn set_permission(
        &self,
        vhost: &str,
        user: &str,
        permission: Permission,
    ) -> (bool, Stored) {
        let mut tables = self.shared.tables.write();
        let ops = vec![Op::PutPermission(stored::permission_record(
            vhost,
            user,
            Some(&permission),
        ))];
        let key = (vhost.to_string(), user.to_string());
        let put = Arc::new(permission);
        let replaced = tables.permissions.insert(key.clone(), Arc::clone(&put));
        let created = replaced.is_none();
        let stored = if self.has_store() {
            let id = tables
                .permissions_in_flight
                .begin(key.clone(), Some(put), replaced);
            self.write(&mut tables, ops, vec![Written::Permission(key, id)])
        } else {
            Stored(None)
        };
        drop(tables);
        self.changed();
        (created, stored)
    }

    /// Removes a user's permissions in a vhost; false if there were none.
    pub(crate) fn clear_permission(&self, vhost: &str, user: &str) -> (bool, Stored) {
        let mut tables = self.shared.tables.write();
        let key = (vhost.to_string(), user.to_string());
        let replaced = tables.permissions.remove(&key);
        let existed = replaced.is_some();
        let stored = match replaced {
            Some(replaced) if self.has_store() => {
                let ops = vec![Op::PutPermission(stored::permission_record(
                    vhost, user, None,
                ))];
                let id = tables
                    .permissions_in_flight
                    .begin(key.clone(), None, Some(replaced));
                self.write(&mut tables, ops, vec![Written::Permission(key, id)])
            }
            _ => Stored(None),
        };
        drop(tables);
        self.changed();
        (existed, stored)
    }

    /// RabbitMQ's vhost access: a user may open a vhost in which it has permissions (of any
    /// kind, even all empty).
    pub(crate) fn may_open(&self, user: &str, vhost: &str) -> bool {
        self.permission(vhost, user).is_some()
    }
}

impl Shared {
    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// A user or permission change's store write: awaited, it says whether the change is on
/// disk (at once without a store).
#[must_use = "a change's write should be awaited before answering for it"]
pub(crate) struct Stored(Option<tokio::sync::oneshot::Receiver<Result<(), String>>>);

impl Stored {
    /// Waits for the commit: `Err` says why it failed.
    pub(crate) async fn committed(self) -> Result<(), String> {
        match self.0 {
            None => Ok(()),
            Some(rx) => rx
                .await
                .unwrap_or_else(|_| Err("the store was closed".into())),
        }
    }
}

/// The user a [`UserConfig`] describes, its password hashed.
fn user_from_config(u: &UserConfig) -> Result<User, AccessError> {
    let password = match &u.password_hash {
        Some(hash) => PasswordHash::decode(HashingAlgorithm::Sha256, hash),
        None => PasswordHash::new(HashingAlgorithm::Sha256, &u.password),
    }
    .map_err(|error| AccessError::Password {
        user: u.name.clone(),
        error,
    })?;
    Ok(User {
        name: u.name.clone(),
        password,
        tags: u.tags.clone(),
        loopback_only: u.loopback_only,
    })
}

/// RabbitMQ's text for a refused operation (403, closing the channel).
pub(crate) fn refused_text(kind: ResourceKind, name: &str, vhost: &str, user: &str) -> String {
    let name = if kind == ResourceKind::Exchange && name.is_empty() {
        "amq.default"
    } else {
        name
    };
    format!(
        "access to {} '{name}' in vhost '{vhost}' refused for user '{user}'",
        kind.name()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PermissionConfig;

    #[test]
    fn vhost_lists_are_full_permissions_unless_an_entry_says_otherwise() {
        let mut config = BrokerConfig::ephemeral();
        config.vhosts = vec!["/".into(), "staging".into()];
        config.users.push(UserConfig {
            name: "app".into(),
            password: "pw".into(),
            vhosts: vec!["*".into()],
            ..UserConfig::default()
        });
        config.permissions.push(PermissionConfig {
            user: "app".into(),
            vhost: "staging".into(),
            configure: "".into(),
            write: "^out$".into(),
            read: "".into(),
        });
        let access = Access::from_config(&config).unwrap();
        assert!(access.may_open("app", "/") && access.may_open("app", "staging"));
        let staging = access.permission("staging", "app").unwrap();
        assert!(staging.allows(Operation::Write, ResourceKind::Exchange, "out"));
        assert!(!staging.allows(Operation::Configure, ResourceKind::Queue, "q"));
        assert!(access.user("app").unwrap().check_password("pw"));
        assert!(!access.user("app").unwrap().check_password("pW"));

        let generation = access.generation();
        let _ = access.delete_user("app");
        assert!(access.generation() > generation);
        assert!(!access.may_open("app", "/"));
    }

    #[test]
    fn permissions_for_unknown_users_or_bad_patterns_are_refused() {
        let mut config = BrokerConfig::ephemeral();
        config
            .permissions
            .push(PermissionConfig::full("nobody", "/"));
        assert!(matches!(
            Access::from_config(&config),
            Err(AccessError::NoSuchUser(_))
        ));
        let mut config = BrokerConfig::ephemeral();
        config.permissions.push(PermissionConfig {
            read: "[".into(),
            ..PermissionConfig::full("guest", "/")
        });
        let err = Access::from_config(&config).err().unwrap().to_string();
        assert!(err.contains("read pattern '['"), "{err}");
        let mut config = BrokerConfig::ephemeral();
        config
            .permissions
            .push(PermissionConfig::full("guest", "staging"));
        assert!(matches!(
            Access::from_config(&config),
            Err(AccessError::NoSuchVhost(_))
        ));
    }

    #[test]
    fn refusals_read_as_rabbitmqs() {
        assert_eq!(
            refused_text(ResourceKind::Queue, "foo", "/", "alice"),
            "access to queue 'foo' in vhost '/' refused for user 'alice'"
        );
        assert_eq!(
            refused_text(ResourceKind::Exchange, "", "/", "alice"),
            "access to exchange 'amq.default' in vhost '/' refused for user 'alice'"
        );
    }
}
