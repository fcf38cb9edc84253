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
    pub(crate) fn check(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BrokerConfig, PermissionConfig};

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

        access.clear_permission("/", "guest");
        assert!(cache
            .check(&who, Operation::Write, ResourceKind::Exchange, &out)
            .is_err());
    }
}
