//! What a queue reads to decide whether a consumer can take a message now.
//!
//! A channel's consumers may sit on many queues, each behind its own lock, so the channel-wide
//! state (global prefetch, flow, whether its socket is congested) is shared atomics that every
//! queue reads and the shell writes. Reading shared data is not calling out: the queue still
//! decides alone and says what to do through effects.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

/// The octets a delivery is counted for while in transit: its body plus an estimate of its
/// method and header frames (so that a backlog of empty messages is bounded too).
pub const fn delivery_reservation(body_len: usize) -> usize {
    body_len.saturating_add(128)
}

/// Whether a connection's output is backed up: queues stop delivering to it until it drains.
///
/// What counts is the octets the shell has buffered for the connection plus those a queue has
/// decided to deliver and the shell has not yet buffered ([`Congestion::reserve`] /
/// [`Congestion::unreserve`]): a queue decides a whole batch under its lock before the shell
/// writes any of it, so the buffer alone would let one batch (a whole backlog, for a consumer
/// without prefetch) past the cap. Once over the cap, deliveries stay stopped until the
/// shell's writer has brought it back to half ([`Congestion::relieve`]), which wakes them.
#[derive(Debug)]
pub struct Congestion {
    stopped: AtomicBool,
    in_transit: AtomicUsize,
    buffered: AtomicUsize,
    cap: usize,
}

impl Default for Congestion {
    /// Without a cap (tests of the queue alone).
    fn default() -> Self {
        Congestion::with_cap(usize::MAX)
    }
}

impl Congestion {
    /// Deliveries stop above `cap` octets.
    pub fn with_cap(cap: usize) -> Self {
        Congestion {
            stopped: AtomicBool::new(false),
            in_transit: AtomicUsize::new(0),
            buffered: AtomicUsize::new(0),
            cap,
        }
    }

    fn load(&self) -> usize {
        self.in_transit
            .load(Ordering::SeqCst)
            .saturating_add(self.buffered.load(Ordering::SeqCst))
    }

    /// Whether deliveries should wait.
    pub fn is_congested(&self) -> bool {
        if self.stopped.load(Ordering::SeqCst) {
            return true;
        }
        if self.load() <= self.cap {
            return false;
        }
        self.stopped.store(true, Ordering::SeqCst);
        // The writer may have drained everything between the read above and the store (and
        // then not seen the flag to clear it): read again, after the store.
        if self.load() <= self.cap {
            self.stopped.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Stops deliveries (`true`) until the next [`Congestion::relieve`], or lifts the stop.
    /// Returns the previous value.
    pub fn set(&self, congested: bool) -> bool {
        self.stopped.swap(congested, Ordering::SeqCst)
    }

    /// The shell's buffer for the connection now holds `bytes` octets.
    pub fn set_buffered(&self, bytes: usize) {
        self.buffered.store(bytes, Ordering::SeqCst);
    }

    /// The shell's buffer grew to `bytes` octets (an append). Only a shrinking buffer takes
    /// part in the handshake with [`Congestion::is_congested`] that must not miss a drain
    /// (its store and the flag's load are sequentially consistent, in the writer); a growth
    /// needs no fence, and a sequentially consistent store is a locked instruction on every
    /// append.
    pub fn buffered_grew_to(&self, bytes: usize) {
        self.buffered.store(bytes, Ordering::Release);
    }

    /// Lifts the stop once back under half the cap; `true` when it did (the caller then wakes
    /// the queues that stopped).
    pub fn relieve(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
            && self.load() <= self.cap / 2
            && self.stopped.swap(false, Ordering::SeqCst)
    }

    /// A queue decided to deliver a message counted as `bytes` octets to this connection.
    pub fn reserve(&self, bytes: usize) {
        self.in_transit.fetch_add(bytes, Ordering::SeqCst);
    }

    /// The shell buffered (or refused) a delivery reserved with [`Congestion::reserve`].
    pub fn unreserve(&self, bytes: usize) {
        let _ = self
            .in_transit
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_sub(bytes))
            });
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
