//! What a case runs: a queue's configuration and a sequence of commands, generated with
//! shrinking.

use dwellmq_core::arguments::Overflow;
use dwellmq_core::paging::Paging;
use dwellmq_core::queue::ExpiryMode;
use proptest::prelude::*;

/// A queue's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The queue pages (with a store); otherwise everything stays in memory.
    pub paging: bool,
    /// A durable queue whose persistent messages the store keeps (else it only spills).
    pub stores_persistent: bool,
    pub window: Paging,
    pub expiry_mode: ExpiryMode,
    pub message_ttl: Option<u64>,
    pub max_length: Option<u64>,
    pub max_length_bytes: Option<u64>,
    pub overflow: Overflow,
    /// Reads a deadline asks for are done at once (as under the manual clock); otherwise
    /// they wait like any other read.
    pub due_reads_at_once: bool,
    /// Spills and rewrites in flight at most (the owner's budget).
    pub write_budget: usize,
}

/// One command.
#[derive(Debug, Clone)]
pub enum Cmd {
    Publish {
        persistent: bool,
        ttl: Option<u64>,
        body_len: usize,
    },
    Consume {
        prefetch: u32,
        no_ack: bool,
    },
    Cancel {
        which: usize,
    },
    /// The channel of every consumer closes: what they hold comes back.
    CloseChannel,
    Get {
        no_ack: bool,
    },
    Ack {
        which: usize,
    },
    Nack {
        which: usize,
        requeue: bool,
    },
    Purge,
    Advance {
        ms: u64,
    },
    Pressure {
        on: bool,
    },
    /// The store commits its first `n` submissions, or fails that commit.
    Commit {
        n: usize,
        ok: bool,
    },
    /// A read in flight takes its snapshot now.
    Snapshot {
        which: usize,
    },
    /// A read in flight comes back (possibly out of order), or fails.
    ReadBack {
        which: usize,
        ok: bool,
    },
    /// Everything settles: writes commit, reads come back, the paging steps run again.
    Settle,
}

pub fn config() -> impl Strategy<Value = Config> {
    (
        (
            any::<bool>(),
            any::<bool>(),
            1usize..6,
            prop_oneof![Just(1u64 << 20), 40u64..400],
        ),
        (any::<bool>(), proptest::option::of(0u64..60)),
        (
            proptest::option::weighted(0.3, 2u64..12),
            proptest::option::weighted(0.15, 50u64..600),
            0u8..3,
        ),
        (any::<bool>(), 1usize..10),
    )
        .prop_map(
            |(
                (no_paging, stores, window_messages, window_bytes),
                (head_only, message_ttl),
                (max_length, max_length_bytes, overflow),
                (due_reads_at_once, write_budget),
            )| Config {
                paging: !no_paging || window_messages > 3,
                stores_persistent: stores,
                window: Paging {
                    window_messages,
                    window_bytes,
                },
                expiry_mode: if head_only {
                    ExpiryMode::HeadOnly
                } else {
                    ExpiryMode::OnTime
                },
                message_ttl,
                max_length,
                max_length_bytes,
                overflow: match overflow {
                    0 => Overflow::DropHead,
                    1 => Overflow::RejectPublish,
                    _ => Overflow::RejectPublishDlx,
                },
                due_reads_at_once,
                write_budget,
            },
        )
}

pub fn cmd() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        12 => (any::<bool>(), proptest::option::weighted(0.4, 0u64..80), 1usize..60)
            .prop_map(|(persistent, ttl, body_len)| Cmd::Publish { persistent, ttl, body_len }),
        2 => (0u32..4, proptest::bool::weighted(0.2))
            .prop_map(|(prefetch, no_ack)| Cmd::Consume { prefetch, no_ack }),
        1 => (0usize..4).prop_map(|which| Cmd::Cancel { which }),
        1 => Just(Cmd::CloseChannel),
        3 => any::<bool>().prop_map(|no_ack| Cmd::Get { no_ack }),
        4 => (0usize..8).prop_map(|which| Cmd::Ack { which }),
        2 => (0usize..8, any::<bool>()).prop_map(|(which, requeue)| Cmd::Nack { which, requeue }),
        1 => Just(Cmd::Purge),
        5 => prop_oneof![1u64..10, 10u64..120].prop_map(|ms| Cmd::Advance { ms }),
        2 => any::<bool>().prop_map(|on| Cmd::Pressure { on }),
        6 => (1usize..6, proptest::bool::weighted(0.85)).prop_map(|(n, ok)| Cmd::Commit { n, ok }),
        3 => (0usize..3).prop_map(|which| Cmd::Snapshot { which }),
        5 => (0usize..3, proptest::bool::weighted(0.9))
            .prop_map(|(which, ok)| Cmd::ReadBack { which, ok }),
        1 => Just(Cmd::Settle),
    ]
}
