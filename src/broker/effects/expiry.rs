//! `x-expires`: a queue unused for its expiry period is deleted, by the vhost's one delete
//! cascade, with nobody waiting for the deletion's write.

use std::sync::Arc;

use crate::broker::queue::Queue;
use crate::broker::tickets::DefinitionWrites;
use crate::broker::vhost::VHost;

/// Deletes `queue` (this instance only: a namesake declared since stays).
pub(super) fn expire(vhost: &VHost, queue: &Arc<Queue>) {
    tracing::debug!(queue = %queue.name, vhost = %queue.vhost, "queue expired (x-expires)");
    let _ = vhost.delete_queue_instance_reporting(queue, DefinitionWrites::UNAWAITED);
}
