//! The retry-queue pattern: `retry` has a TTL and a dead-letter exchange, nobody consumes
//! from it, and bursts make it many times longer than its window, so that most of its
//! messages are paged out (persistent) or spilled (transient) when they fall due. Each must
//! be in `retried` by the time an advance past its deadline has settled.

use super::body::classic_filler;
use super::messages::Route;
use super::queues::RETRY_TTL_MS;
use super::Sim;

/// The most messages any step sends before it waits for their confirms: a retry burst goes
/// in chunks of this many.
pub const SENT_WITHOUT_WAITING: u64 = 10;

impl Sim {
    /// Publishes 10-50 messages of 1-4 KB (one in ten over 4 KiB) to `retry`, a third
    /// transient, a quarter with their own `expiration`: bursts give the classic queues far
    /// more than the memory watermark over a run.
    pub(super) async fn retry_burst(&mut self) -> String {
        let n = 10 + self.rng.below(41);
        let (mut acked, mut nacked) = (0, 0);
        let mut transient = 0;
        let mut sent = 0;
        while sent < n {
            let chunk = SENT_WITHOUT_WAITING.min(n - sent);
            sent += chunk;
            let mut confirms = Vec::new();
            for _ in 0..chunk {
                let id = self.next_id();
                let persistent = self.rng.below(3) != 0;
                transient += u64::from(!persistent);
                let expiration = self.maybe_expiration("retry");
                let roll = self.rng.next();
                let filler = if roll.is_multiple_of(10) {
                    classic_filler(roll)
                } else {
                    1_000 + (roll % 3_000) as usize
                };
                let route = Route::Queue("retry");
                let confirm = self.send(route, id, persistent, expiration, filler).await;
                confirms.push((id, confirm));
            }
            let (a, n) = self.settle_confirms(confirms).await;
            acked += a;
            nacked += n;
        }
        let first = self.next_id + 1 - n;
        self.report.retry_published += n;
        self.check_memory("after a retry burst");
        format!(
            "retry burst {first}..={} ({transient} transient): {acked} acked, {nacked} nacked",
            self.next_id
        )
    }

    /// The run's last phase: the clock moves past every deadline of the retry queue, which
    /// must then hold nothing, all of it dead-lettered into `retried` (unless the known
    /// defect of paged expiry is skipped).
    pub(super) async fn drain_retry(&mut self) -> String {
        let waiting = self.ready_in("retry").len();
        self.advance_by(RETRY_TTL_MS + 1).await;
        let left = self.ready_in("retry");
        if !left.is_empty() && !self.model.skip_paged_expiry {
            self.fail(&format!(
                "the retry queue still holds {left:?} after every deadline passed"
            ));
        }
        self.report.retry_drained += waiting as u64;
        format!("{waiting} messages drained from the retry queue")
    }
}
