//! What one scrape reads of the broker, gathered once: queues, exchanges, connections and
//! their channels, and the counters.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use dwellmq_core::arguments::QueueType;

use super::super::Api;
use crate::broker::connections::ChannelSummary;
use crate::broker::exchange::Exchange;
use crate::broker::queue::{Queue, QueueFigures};
use crate::broker::stats::MessageCounts;

pub(crate) struct QueueRow {
    pub(crate) vhost: String,
    pub(crate) queue: Arc<Queue>,
    pub(crate) figures: QueueFigures,
}

pub(crate) struct ExchangeRow {
    pub(crate) vhost: String,
    pub(crate) exchange: Arc<Exchange>,
}

pub(crate) struct ChannelRow {
    pub(crate) vhost: String,
    /// RabbitMQ's channel name: `peer -> local (number)`.
    pub(crate) name: String,
    pub(crate) summary: ChannelSummary,
}

pub(crate) struct ConnectionRow {
    pub(crate) vhost: String,
    pub(crate) name: String,
    pub(crate) channels: usize,
}

/// Delivery counters of one queue type (see `QueueTotals`).
pub(crate) struct TypeTotals {
    /// RabbitMQ's label value (`rabbit_classic_queue`).
    pub(crate) label: &'static str,
    /// consume manual, consume auto, get manual, get auto, get empty, redelivered, acked.
    pub(crate) counts: [u64; 7],
}

pub(crate) struct Snapshot {
    pub(crate) vhosts: Vec<String>,
    pub(crate) queues: Vec<QueueRow>,
    pub(crate) exchanges: Vec<ExchangeRow>,
    pub(crate) connections: Vec<ConnectionRow>,
    pub(crate) channels: Vec<ChannelRow>,
    pub(crate) totals: MessageCounts,
    pub(crate) by_type: Vec<TypeTotals>,
    pub(crate) connections_opened: u64,
    pub(crate) connections_closed: u64,
    pub(crate) queues_declared: u64,
    pub(crate) queues_created: u64,
    pub(crate) queues_deleted: u64,
    pub(crate) process: super::node::Process,
    /// The memory high watermark.
    pub(crate) memory_limit: u64,
    /// The free disk space limit (`disk_free_limit`, resolved).
    pub(crate) disk_free_limit: u64,
}

/// RabbitMQ's name for a queue type in the `queue_type` label.
pub(crate) fn type_label(queue_type: QueueType) -> &'static str {
    match queue_type {
        QueueType::Classic => "rabbit_classic_queue",
        QueueType::Quorum => "rabbit_quorum_queue",
    }
}

impl Snapshot {
    /// Reads the broker. Channels are described by their connections' tasks, asked all at
    /// once (a busy connection delays the scrape by at most its answer timeout, once).
    pub(crate) async fn read(api: &Api) -> Snapshot {
        let state = &api.state;
        let mut queues = Vec::new();
        let mut exchanges = Vec::new();
        let mut vhosts = Vec::new();
        for vhost in api.vhosts() {
            vhosts.push(vhost.name.to_string());
            let mut vhost_queues = vhost.queues();
            vhost_queues.sort_by(|a, b| a.name.cmp(&b.name));
            for queue in vhost_queues {
                let figures = queue.figures(&*vhost);
                queues.push(QueueRow {
                    vhost: vhost.name.to_string(),
                    queue,
                    figures,
                });
            }
            let mut vhost_exchanges = vhost.exchanges();
            vhost_exchanges.sort_by(|a, b| a.name.cmp(&b.name));
            exchanges.extend(vhost_exchanges.into_iter().map(|exchange| ExchangeRow {
                vhost: vhost.name.to_string(),
                exchange,
            }));
        }
        let listed = state.connections.list();
        let mut asked = tokio::task::JoinSet::new();
        for (i, connection) in listed.iter().enumerate() {
            let connection = Arc::clone(connection);
            asked.spawn(async move { (i, connection.channels().await.unwrap_or_default()) });
        }
        let mut answers: Vec<(usize, Vec<ChannelSummary>)> = asked.join_all().await;
        answers.sort_by_key(|(i, _)| *i);
        let mut channels = Vec::new();
        for (i, summaries) in answers {
            let connection = &listed[i];
            channels.extend(summaries.into_iter().map(|summary| ChannelRow {
                vhost: connection.vhost.clone(),
                name: format!("{} ({})", connection.name, summary.number),
                summary,
            }));
        }
        let connections = listed
            .iter()
            .map(|c| ConnectionRow {
                vhost: c.vhost.clone(),
                name: c.name.clone(),
                channels: c.channel_count(),
            })
            .collect();
        let queue_totals = &state.queue_services().queue_totals;
        // Deleted queues' counts, plus every live queue's own.
        let live: Vec<_> = state
            .all_vhosts()
            .iter()
            .flat_map(|v| v.queues())
            .map(|q| (q.config.queue_type, q.delivery_totals()))
            .collect();
        let by_type = [QueueType::Classic, QueueType::Quorum]
            .into_iter()
            .map(|t| {
                let mut counts = queue_totals.of(t).read();
                for (_, queue) in live.iter().filter(|(qt, _)| *qt == t) {
                    for (total, n) in counts.iter_mut().zip(queue) {
                        *total += n;
                    }
                }
                TypeTotals {
                    label: type_label(t),
                    counts,
                }
            })
            .collect();
        let read = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        Snapshot {
            vhosts,
            queues,
            exchanges,
            connections,
            channels,
            totals: state.stats.totals(),
            by_type,
            connections_opened: read(&state.connections.opened),
            connections_closed: read(&state.connections.closed),
            queues_declared: read(&queue_totals.declared),
            queues_created: read(&queue_totals.created),
            queues_deleted: read(&queue_totals.deleted),
            process: super::node::read(
                state
                    .config
                    .data_dir
                    .as_deref()
                    .unwrap_or(std::path::Path::new(".")),
            ),
            memory_limit: state.memory.high_watermark(),
            disk_free_limit: state.disk.free_space_limit(),
        }
    }

    /// Consumers on every queue.
    pub(crate) fn consumers(&self) -> usize {
        self.queues.iter().map(|q| q.figures.consumers).sum()
    }

    /// Channels open on every connection.
    pub(crate) fn channel_count(&self) -> usize {
        self.connections.iter().map(|c| c.channels).sum()
    }

    /// Channels that have published and are still open.
    pub(crate) fn publishers(&self) -> u64 {
        self.totals
            .publishers_started
            .saturating_sub(self.totals.publishers_stopped)
    }
}
