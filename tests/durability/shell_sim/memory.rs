//! Memory at checkpoints: what the broker counts (the figure its watermark compares) stays
//! under the watermark plus a stated overhead, however much the classic queues are given.

use super::body::MAX_BODY;
use super::look::Look;
use super::model::Place;
use super::queues::PAGING;
use super::retry::SENT_WITHOUT_WAITING;
use super::{Sim, WATERMARK};

/// What the broker may count beyond its watermark at a checkpoint (after a step, nothing in
/// flight). The alarm blocks a publisher only once the count is over the watermark, between
/// two of its read batches: everything a step sends before waiting for its confirms can be
/// read before the block, and a transient message stays counted until its spill is
/// committed. The most a step sends so is [`SENT_WITHOUT_WAITING`] messages, each counted at
/// most its body plus [`dwellmq::MESSAGE_MEMORY_OVERHEAD`]; the 64 KiB beyond cover a page
/// read back (half the window of 4 small messages) and the frames buffered for the client.
pub const MEMORY_OVERHEAD: u64 =
    SENT_WITHOUT_WAITING * (MAX_BODY as u64 + dwellmq::MESSAGE_MEMORY_OVERHEAD as u64) + (64 << 10);

/// The per-message charge used to tell what the classic queues would hold in memory had
/// nothing been paged out or spilled (a packed small message holds about 100 octets beyond
/// its body).
const PACKED_CHARGE_ESTIMATE: u64 = 100;

impl Sim {
    /// A checkpoint: the memory counted is within bound.
    pub(super) fn check_memory(&mut self, when: &str) {
        let used = self.broker().memory_used().max(0) as u64;
        self.report.memory_max = self.report.memory_max.max(used);
        if used > WATERMARK + MEMORY_OVERHEAD {
            self.fail(&format!(
                "{when}: the broker counts {used} octets of memory, over its watermark \
                 {WATERMARK} plus {MEMORY_OVERHEAD}"
            ));
        }
    }

    /// Notes what the classic queues held at a look (what paging and spilling keep out of
    /// memory) and how far the retry queue was paged out.
    pub(super) fn note_paging(&mut self, look: &Look) {
        let content: u64 = look
            .places
            .iter()
            .filter(|(place, _)| matches!(place, Place::Queue(q) if PAGING.contains(&q.as_str())))
            .flat_map(|(_, sightings)| sightings)
            .map(|s| *s.body.as_ref().unwrap_or(&0) as u64 + PACKED_CHARGE_ESTIMATE)
            .sum();
        self.report.classic_content_max = self.report.classic_content_max.max(content);
        if let Some(info) = self.broker().queue_info("/", "retry") {
            self.report.most_paged_out = self.report.most_paged_out.max(info.paged_out);
        }
    }
}
