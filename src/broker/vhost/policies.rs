//! A vhost's policies: which one applies to a queue or an exchange, by name pattern, kind and
//! priority; a change is written to the store and applied to existing queues and exchanges at
//! once (taken back if its write fails).

use std::sync::Arc;

use dwellmq_core::arguments::QueueType;
use dwellmq_core::policy::{ApplyTo, Policy, PolicyDefinition, PolicyError};
use regex_lite::Regex;

use super::VHost;
use crate::broker::persist::DefinitionWrites;

struct Entry {
    policy: Policy,
    pattern: Regex,
}

/// The policies of one vhost.
#[derive(Default)]
pub(crate) struct Policies {
    entries: Vec<Entry>,
}

impl Policies {
    /// Adds or replaces (by name) a policy, returning the one it replaced; refuses a pattern
    /// that is not a regular expression.
    pub(crate) fn set(&mut self, policy: Policy) -> Result<Option<Policy>, PolicyError> {
        let pattern = Regex::new(&policy.pattern).map_err(|e| {
            PolicyError(format!(
                "'{}' is not a valid regular expression: {e}",
                policy.pattern
            ))
        })?;
        let entry = Entry { policy, pattern };
        match self
            .entries
            .iter_mut()
            .find(|e| e.policy.name == entry.policy.name)
        {
            Some(existing) => Ok(Some(std::mem::replace(existing, entry).policy)),
            None => {
                self.entries.push(entry);
                Ok(None)
            }
        }
    }

    /// The policy called `name`, if there is one.
    pub(crate) fn get(&self, name: &str) -> Option<&Policy> {
        self.entries
            .iter()
            .map(|e| &e.policy)
            .find(|p| p.name == name)
    }

    /// Removes a policy; false if there was none of that name.
    pub(crate) fn clear(&mut self, name: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.policy.name != name);
        self.entries.len() != before
    }

    /// Every policy, by name.
    pub(crate) fn list(&self) -> Vec<Policy> {
        let mut all: Vec<Policy> = self.entries.iter().map(|e| e.policy.clone()).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// The definition that applies to the queue `name` of `queue_type`.
    pub(crate) fn for_queue(&self, name: &str, queue_type: QueueType) -> Option<PolicyDefinition> {
        self.best(name, |apply_to| apply_to.covers_queue(queue_type))
    }

    /// The definition that applies to the exchange `name`.
    pub(crate) fn for_exchange(&self, name: &str) -> Option<PolicyDefinition> {
        self.best(name, ApplyTo::covers_exchanges)
    }

    /// The matching policy with the highest priority (the first by name among equals).
    fn best(&self, name: &str, covers: impl Fn(ApplyTo) -> bool) -> Option<PolicyDefinition> {
        self.entries
            .iter()
            .filter(|e| covers(e.policy.apply_to) && e.pattern.is_match(name))
            .max_by(|a, b| {
                a.policy
                    .priority
                    .cmp(&b.policy.priority)
                    .then_with(|| b.policy.name.cmp(&a.policy.name))
            })
            .map(|e| e.policy.definition.clone())
    }
}

impl VHost {
    /// Adds or replaces a policy and applies what changed to every queue and exchange; its
    /// write reports to `writes`.
    pub(crate) fn set_policy(
        self: &Arc<Self>,
        policy: Policy,
        writes: DefinitionWrites<'_>,
    ) -> Result<(), PolicyError> {
        let mut policies = self.policies.write();
        let replaced = policies.set(policy.clone())?;
        // Submitted under the lock: the store sees a policy's changes in the order memory does.
        let undo_in = self.me.clone();
        let undo_policy = policy.clone();
        self.runtime
            .definitions
            .policy_set(&self.name, &policy, writes, move || {
                if let Some(vhost) = undo_in.upgrade() {
                    vhost.undo_policy_set(&undo_policy, replaced);
                }
            });
        drop(policies);
        self.apply_policies();
        Ok(())
    }

    /// Takes back a policy whose write failed: the one it replaced (or none) is in effect
    /// again, unless the policy was changed since.
    fn undo_policy_set(&self, policy: &Policy, replaced: Option<Policy>) {
        let mut policies = self.policies.write();
        if policies.get(&policy.name) != Some(policy) {
            return;
        }
        tracing::warn!(
            vhost = %self.name,
            policy = %policy.name,
            "the policy could not be written: it is taken back"
        );
        match replaced {
            // Valid: it was in effect.
            Some(replaced) => {
                let _ = policies.set(replaced);
            }
            None => {
                policies.clear(&policy.name);
            }
        }
        drop(policies);
        self.apply_policies();
    }

    /// Removes a policy (false if there was none of that name) and applies what changed; its
    /// removal reports to `writes` (and is retried by the store until it is written).
    pub(crate) fn clear_policy(self: &Arc<Self>, name: &str, writes: DefinitionWrites<'_>) -> bool {
        let mut policies = self.policies.write();
        let removed = policies.clear(name);
        if removed {
            self.runtime
                .definitions
                .policy_cleared(&self.name, name, writes);
            drop(policies);
            self.apply_policies();
        }
        removed
    }

    /// Every policy, by name.
    pub(crate) fn policies(&self) -> Vec<Policy> {
        self.policies.read().list()
    }

    /// Gives every queue and exchange the policy that now applies to it.
    fn apply_policies(&self) {
        let queues = self.queues();
        let exchanges = self.exchanges();
        let policies = self.policies.read();
        let for_queues: Vec<_> = queues
            .iter()
            .map(|q| policies.for_queue(&q.name, q.config.queue_type))
            .collect();
        for exchange in &exchanges {
            *exchange.policy_alternate_exchange.write() = policies
                .for_exchange(&exchange.name)
                .and_then(|d| d.alternate_exchange);
        }
        drop(policies);
        for (queue, policy) in queues.iter().zip(&for_queues) {
            queue.apply_policy(self, policy.as_ref());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str, pattern: &str, apply_to: ApplyTo, priority: i64, ttl: u64) -> Policy {
        Policy {
            name: name.into(),
            pattern: pattern.into(),
            apply_to,
            priority,
            definition: PolicyDefinition {
                message_ttl: Some(ttl),
                ..Default::default()
            },
        }
    }

    #[test]
    fn the_highest_priority_matching_policy_of_the_right_kind_applies() {
        let mut p = Policies::default();
        p.set(policy("all", ".*", ApplyTo::All, 0, 1)).unwrap();
        p.set(policy("orders", "^orders\\.", ApplyTo::Queues, 5, 2))
            .unwrap();
        p.set(policy("quorum", "^orders\\.", ApplyTo::QuorumQueues, 9, 3))
            .unwrap();
        let ttl = |p: &Policies, name, t| p.for_queue(name, t).and_then(|d| d.message_ttl);
        assert_eq!(ttl(&p, "orders.new", QueueType::Quorum), Some(3));
        assert_eq!(ttl(&p, "orders.new", QueueType::Classic), Some(2));
        assert_eq!(ttl(&p, "billing", QueueType::Classic), Some(1));
        assert_eq!(
            p.for_exchange("orders.x").and_then(|d| d.message_ttl),
            Some(1)
        );
        assert!(p.clear("all"));
        assert_eq!(ttl(&p, "billing", QueueType::Classic), None);
        assert!(p.set(policy("bad", "(", ApplyTo::All, 0, 1)).is_err());
    }
}
