//! A channel's cache of permission decisions, as RabbitMQ's channel keeps one: the last few
//! (operation, resource) answers, so that publishing to the same exchange again costs an
//! atomic load and a name comparison, never a regular expression.

use std::collections::VecDeque;
use std::sync::Arc;

use dwellmq_codec::ShortStr;
use dwellmq_core::{BrokerError, BrokerResult};

use super::{refused_text, Access, Operation, Permission, ResourceKind};

/// How many decisions a channel remembers (RabbitMQ's channel keeps 12).
const REMEMBERED: usize = 12;

/// One channel's cached decisions for its connection's user and vhost.
#[derive(Default)]
pub(crate) struct AccessCache {
    /// The store's generation the entries below were made under; `None` before the first
    /// check.
    generation: Option<u64>,
    permission: Option<Arc<Permission>>,
    /// Most recent first.
    recent: VecDeque<(Operation, ResourceKind, ShortStr, bool)>,
}

/// Who is asking, and where.
pub(crate) struct Principal<'a> {
    pub(crate) access: &'a Access,
    pub(crate) user: &'a str,
    pub(crate) vhost: &'a str,
}

impl AccessCache {
    /// Allows `operation` on the resource, or refuses it with RabbitMQ's 403 text.
    ///
    /// A channel publishing to one exchange asks the same question for every message: that
    /// answer (the front entry) is checked inline, with a byte comparison of the name that
    /// calls no `memcmp`; anything else goes through [`AccessCache::check_recent`].
    #[inline]
    pub(crate) fn check(
        &mut self,
        who: &Principal<'_>,
        operation: Operation,
        kind: ResourceKind,
        name: &ShortStr,
    ) -> BrokerResult<()> {
        if self.generation == Some(who.access.generation()) {
            if let Some((op, k, n, true)) = self.recent.front() {
                if *op == operation && *k == kind && same_name(n, name) {
                    return Ok(());
                }
            }
        }
        self.check_recent(who, operation, kind, name)
    }

    /// [`AccessCache::check`] beyond the last allowed answer: refreshes the entries after a
    /// change of the store, looks the resource up among the recent answers, or decides.
    fn check_recent(
        &mut self,
        who: &Principal<'_>,
        operation: Operation,
        kind: ResourceKind,
        name: &ShortStr,
    ) -> BrokerResult<()> {
        let generation = who.access.generation();
        if self.generation != Some(generation) {
            self.generation = Some(generation);
            self.permission = who.access.permission(who.vhost, who.user);
            self.recent.clear();
        }
        let hit = self
            .recent
            .iter()
            .position(|(op, k, n, _)| *op == operation && *k == kind && n == name);
        let allowed = match hit {
            Some(0) => self.recent[0].3,
            Some(i) => {
                // Moves to the front, so a channel alternating between a few resources hits
                // early.
                let entry = self.recent.remove(i).unwrap_or_else(|| unreachable!());
                let allowed = entry.3;
                self.recent.push_front(entry);
                allowed
            }
            None => {
                let allowed = self
                    .permission
                    .as_ref()
                    .is_some_and(|p| p.allows(operation, kind, name));
                if self.recent.len() == REMEMBERED {
                    self.recent.pop_back();
                }
                self.recent
                    .push_front((operation, kind, name.clone(), allowed));
                allowed
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(BrokerError::AccessRefused(refused_text(
                kind, name, who.vhost, who.user,
            )))
        }
    }
}

/// Whether two names are equal: same octets, the same buffer (a name kept from an earlier
/// frame of the same connection) answering without looking at them, and short names (every
/// exchange a client publishes to, as a rule) compared in a plain loop, not through `memcmp`.
#[inline]
fn same_name(a: &ShortStr, b: &ShortStr) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    if std::ptr::eq(a.as_ptr(), b.as_ptr()) {
        return true;
    }
    if a.len() > 32 {
        return a == b;
    }
    a.iter().zip(b).all(|(x, y)| x == y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BrokerConfig, PermissionConfig};

    #[test]
    fn the_last_answer_is_reused_only_for_the_same_question_and_store() {
        let mut config = BrokerConfig::ephemeral();
        config.permissions.push(PermissionConfig {
            write: "^out$".into(),
            ..PermissionConfig::full("guest", "/")
        });
        let access = Access::from_config(&config).unwrap();
        let who = Principal {
            access: &access,
            user: "guest",
            vhost: "/",
        };
        let mut cache = AccessCache::default();
        let out = ShortStr::from("out");
        assert!(cache
            .check(&who, Operation::Write, ResourceKind::Exchange, &out)
            .is_ok());
        // Same length, other octets; same name, other operation or kind: not the cached answer.
        let oui = ShortStr::from("oui");
        assert!(cache
            .check(&who, Operation::Write, ResourceKind::Exchange, &oui)
            .is_err());
        assert!(cache
            .check(&who, Operation::Write, ResourceKind::Exchange, &out)
            .is_ok());
        assert!(cache
            .check(&who, Operation::Write, ResourceKind::Queue, &out)
            .is_ok());
        // A name decoded from another frame (another buffer) hits the cached answer.
        let again = ShortStr::from(String::from("out"));
        assert!(cache
            .check(&who, Operation::Write, ResourceKind::Queue, &again)
            .is_ok());
        assert_eq!(cache.recent.len(), 3);
        // The store changed right after an allowed answer: it is not reused.
        let _ = access.clear_permission("/", "guest");
        assert!(cache
            .check(&who, Operation::Write, ResourceKind::Queue, &out)
            .is_err());
    }

    #[test]
    fn names_compare_by_octets() {
        let long = "x".repeat(40);
        assert!(same_name(&ShortStr::from(""), &ShortStr::from("")));
        assert!(same_name(&ShortStr::from("abc"), &ShortStr::from("abc")));
        assert!(!same_name(&ShortStr::from("abc"), &ShortStr::from("abd")));
        assert!(!same_name(&ShortStr::from("abc"), &ShortStr::from("ab")));
        assert!(same_name(
            &ShortStr::from(long.as_str()),
            &ShortStr::from(long.clone())
        ));
        assert!(!same_name(
            &ShortStr::from(long.as_str()),
            &ShortStr::from(format!("{}y", &long[1..]))
        ));
    }

    #[test]
    fn decisions_are_cached_until_the_store_changes() {
        let mut config = BrokerConfig::ephemeral();
        config.permissions.push(PermissionConfig {
            write: "^out$".into(),
            ..PermissionConfig::full("guest", "/")
        });
        let access = Access::from_config(&config).unwrap();
        let who = Principal {
            access: &access,
            user: "guest",
            vhost: "/",
        };
        let mut cache = AccessCache::default();
        let out = ShortStr::from("out");
        let other = ShortStr::from("other");
        assert!(cache
            .check(&who, Operation::Write, ResourceKind::Exchange, &out)
            .is_ok());
        let refused = cache
            .check(&who, Operation::Write, ResourceKind::Exchange, &other)
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "ACCESS_REFUSED - access to exchange 'other' in vhost '/' refused for user 'guest'"
        );
        assert_eq!(cache.recent.len(), 2);
        for i in 0..20 {
            let name = ShortStr::from(format!("x{i}"));
            let _ = cache.check(&who, Operation::Read, ResourceKind::Queue, &name);
        }
        assert_eq!(cache.recent.len(), REMEMBERED);

        let _ = access.clear_permission("/", "guest");
        assert!(cache
            .check(&who, Operation::Write, ResourceKind::Exchange, &out)
            .is_err());
    }
}
