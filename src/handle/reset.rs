//! Back to a clean broker between tests, without a restart: every queue, exchange (but the
//! default and `amq.*` ones), binding, policy, held message, fault and counter goes; then, if
//! asked, the `--definitions` fixture is declared again and the configured policies set.
//!
//! Connections stay open: consumers of deleted queues are cancelled (`basic.cancel` to clients
//! that asked for it), as when an operator deletes a queue. The clock keeps its time (time
//! never goes backwards).

use std::time::Duration;

use super::BrokerHandle;
use crate::broker::persist::DefinitionWrites;
use crate::broker::BrokerState;

/// A reset that could not declare the fixture again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResetError {
    /// The definitions file could not be read or applied.
    #[error("cannot import definitions: {0}")]
    Definitions(String),
    /// A configured policy was refused.
    #[error("policy '{0}': {1}")]
    Policy(String, String),
}

/// What a reset removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Removed {
    pub(crate) queues: usize,
    pub(crate) exchanges: usize,
    pub(crate) took: Duration,
}

/// Empties `state` and, with `fixture`, declares the definitions file and policies again.
pub(crate) fn reset(state: &BrokerState, fixture: bool) -> Result<Removed, ResetError> {
    let started = std::time::Instant::now();
    let mut removed = Removed::default();
    // A purge a test paused is finished first, so that the reset's own deletions run through.
    state.delayed.resume_purges();
    let names = std::iter::once("/").chain(state.config.vhosts.iter().map(String::as_str));
    for vhost in names.filter_map(|n| state.vhost(n)) {
        for queue in vhost.queues() {
            if vhost
                .delete_queue_instance_reporting(&queue, DefinitionWrites::UNAWAITED)
                .is_ok()
            {
                removed.queues += 1;
            }
        }
        for exchange in vhost.exchanges() {
            if exchange.name.is_empty() || exchange.name.starts_with("amq.") {
                continue;
            }
            if let Ok(gone) =
                vhost.delete_exchange_reporting(&exchange.name, false, DefinitionWrites::UNAWAITED)
            {
                removed.exchanges += gone.len();
            }
        }
        for policy in vhost.policies() {
            vhost.clear_policy(&policy.name, DefinitionWrites::UNAWAITED);
        }
    }
    state.hooks().clear();
    state.stats.clear();
    state.queue_services().deaths.clear();
    state.queue_services().queue_totals.clear();
    state.delayed.clear_unroutable();
    if fixture {
        for crate::config::PolicyConfig { vhost, policy } in &state.config.policies {
            let name = policy.name.clone();
            super::set_policy(state, vhost, policy.clone())
                .map_err(|e| ResetError::Policy(name, e.to_string()))?;
        }
        // Without the `http` feature a broker with a definitions file never started.
        #[cfg(feature = "http")]
        if let Some(path) = &state.config.definitions {
            crate::http::definitions::import_file(state, path).map_err(ResetError::Definitions)?;
        }
    }
    removed.took = started.elapsed();
    Ok(removed)
}

impl BrokerHandle {
    /// Removes every queue, exchange (but the default and `amq.*` ones), binding, policy,
    /// held message and injected fault, and sets the counters to zero, without a restart;
    /// then declares the `definitions` file (and sets the configured policies) again. Open
    /// connections stay; their consumers of deleted queues are cancelled.
    pub fn reset(&self) -> Result<(), ResetError> {
        reset(&self.state, true).map(drop)
    }

    /// [`BrokerHandle::reset`] without declaring the fixture again: an empty broker.
    pub fn reset_empty(&self) {
        // Without the fixture nothing can fail.
        let _ = reset(&self.state, false);
    }
}
