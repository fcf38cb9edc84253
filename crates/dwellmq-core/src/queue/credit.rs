//! What a queue reads to decide whether a consumer can take a message now.
//!
//! A channel's consumers may sit on many queues, each behind its own lock, so the channel-wide
//! state (global prefetch, flow, whether its socket is congested) is shared atomics that every
//! queue reads and the shell writes. Reading shared data is not calling out: the queue still
//! decides alone and says what to do through effects.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// Whether a connection's output is backed up: queues stop delivering to it until it drains.
#[derive(Debug, Default)]
pub struct Congestion(AtomicBool);

impl Congestion {
    /// Whether deliveries should wait.
    pub fn is_congested(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Sets the flag; returns the previous value.
    pub fn set(&self, congested: bool) -> bool {
        self.0.swap(congested, Ordering::AcqRel)
    }
}

/// A channel's delivery credit, shared by the queues its consumers sit on.
#[derive(Debug)]
pub struct ChannelCredit {
    /// Channel-wide prefetch (`basic.qos` with global=true); 0 = unlimited.
    pub global_prefetch: AtomicU32,
    /// Messages delivered on this channel (consumers and `basic.get`) and not yet settled.
    pub unacked: AtomicU32,
    /// `channel.flow`: false stops deliveries.
    pub flow_active: AtomicBool,
    /// Set once the channel closes: nothing more may be delivered to it.
    pub closed: AtomicBool,
    /// The connection's output.
    pub congestion: Arc<Congestion>,
}

impl ChannelCredit {
    /// A fresh channel on a connection whose output is `congestion`.
    pub fn new(congestion: Arc<Congestion>) -> Self {
        ChannelCredit {
            global_prefetch: AtomicU32::new(0),
            unacked: AtomicU32::new(0),
            flow_active: AtomicBool::new(true),
            closed: AtomicBool::new(false),
            congestion,
        }
    }

    /// `count` messages delivered on this channel were settled.
    pub fn settled(&self, count: u32) {
        // Saturating: a settle racing a recover must not wrap the counter.
        let _ = self
            .unacked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(count))
            });
    }
}

/// One consumer's credit.
#[derive(Debug)]
pub struct ConsumerCredit {
    /// Per-consumer prefetch (`basic.qos` with global=false when it subscribed); 0 = unlimited.
    pub prefetch: u32,
    /// `no_ack`: messages are settled when delivered; prefetch does not apply.
    pub no_ack: bool,
    /// Delivered to this consumer and not yet settled.
    pub unacked: AtomicU32,
    /// The channel it consumes on.
    pub channel: Arc<ChannelCredit>,
}

impl ConsumerCredit {
    /// A consumer on `channel`.
    pub fn new(channel: Arc<ChannelCredit>, prefetch: u32, no_ack: bool) -> Self {
        ConsumerCredit {
            prefetch,
            no_ack,
            unacked: AtomicU32::new(0),
            channel,
        }
    }

    /// Whether one more message may be delivered to this consumer now.
    pub fn can_take(&self) -> bool {
        let channel = &self.channel;
        if !channel.flow_active.load(Ordering::Relaxed)
            || channel.closed.load(Ordering::Relaxed)
            || channel.congestion.is_congested()
        {
            return false;
        }
        if self.no_ack {
            return true;
        }
        let global = channel.global_prefetch.load(Ordering::Relaxed);
        (self.prefetch == 0 || self.unacked.load(Ordering::Relaxed) < self.prefetch)
            && (global == 0 || channel.unacked.load(Ordering::Relaxed) < global)
    }

    /// Counts a delivery (ack mode only).
    pub(crate) fn took(&self) {
        if !self.no_ack {
            self.unacked.fetch_add(1, Ordering::Relaxed);
            self.channel.unacked.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `count` messages delivered to this consumer were settled (or handed back).
    pub fn settled(&self, count: u32) {
        let _ = self
            .unacked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(count))
            });
        self.channel.settled(count);
    }
}
