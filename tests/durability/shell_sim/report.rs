//! What a run did, summed over seeds, and the assertion that it did exercise what the model
//! checks (a run that never expired a paged message proves nothing about paged expiry).

use super::look::Look;
use super::model::Place;

#[derive(Default, Debug)]
pub struct Report {
    pub seeds: u64,
    pub steps: u64,
    pub confirmed: u64,
    pub nacked: u64,
    /// Power cuts during the steps (each run also ends with one, below).
    pub power_cuts: u64,
    pub final_power_cuts: u64,
    pub restarts: u64,
    /// Looks that agreed with the model.
    pub checks: u64,
    /// Looks that agreed only after the broker's own threads caught up, and the longest wait.
    pub late_looks: u64,
    pub longest_settle_ms: u64,
    /// Messages published to the retry queue.
    pub retry_published: u64,
    /// Messages the model expired at advances (each then checked gone from its queue).
    pub expired: u64,
    /// Sightings (over all looks) of dead-lettered messages carrying their death.
    pub dead_letter_sightings: u64,
    /// The most messages the retry queue had paged out (left in the store only) at a look.
    pub most_paged_out: u64,
    /// `basic.get`s checked against the queue's head, and those redelivered.
    pub gets: u64,
    pub redelivered_gets: u64,
    /// Dead-lettered messages `q3` kept that reached `dead3` in a run's last phase.
    pub kept_delivered: u64,
    /// Messages the retry queue dead-lettered in a run's last phase (drained by time).
    pub retry_drained: u64,
    /// The most memory the broker counted at a checkpoint, and what the classic queues held
    /// at most then (bodies and the per-message charge, had nothing been paged or spilled).
    pub memory_max: u64,
    pub classic_content_max: u64,
    /// Closes (connection and channel) that completed within their bound.
    pub closes: u64,
    /// Held messages an operator moved (released now, or due at another time).
    pub moves: u64,
}

impl Report {
    pub fn add(&mut self, r: Report) {
        self.seeds += r.seeds;
        self.steps += r.steps;
        self.confirmed += r.confirmed;
        self.nacked += r.nacked;
        self.power_cuts += r.power_cuts;
        self.final_power_cuts += r.final_power_cuts;
        self.restarts += r.restarts;
        self.checks += r.checks;
        self.late_looks += r.late_looks;
        self.longest_settle_ms = self.longest_settle_ms.max(r.longest_settle_ms);
        self.retry_published += r.retry_published;
        self.expired += r.expired;
        self.dead_letter_sightings += r.dead_letter_sightings;
        self.most_paged_out = self.most_paged_out.max(r.most_paged_out);
        self.gets += r.gets;
        self.redelivered_gets += r.redelivered_gets;
        self.kept_delivered += r.kept_delivered;
        self.retry_drained += r.retry_drained;
        self.memory_max = self.memory_max.max(r.memory_max);
        self.classic_content_max = self.classic_content_max.max(r.classic_content_max);
        self.closes += r.closes;
        self.moves += r.moves;
    }

    /// Counts what a look showed that the run is meant to exercise.
    pub fn note_look(&mut self, look: &Look) {
        for (place, sightings) in &look.places {
            if let Place::Queue(_) = place {
                self.dead_letter_sightings +=
                    sightings.iter().filter(|s| !s.deaths.is_empty()).count() as u64;
            }
        }
    }

    /// The run did what it is for: every seed ran all its steps and ended with a power cut
    /// and a check; and over several seeds (CI's, or a long run), the model's strict checks
    /// had something to bite on: crashes mid-run, expiries seen through (dead-letters among
    /// them), a retry queue paged far past its window, redeliveries, memory under
    /// pressure (the classic queues given more than the watermark).
    pub fn assert_exercised(&self, several: bool, steps_per_seed: u64) {
        assert_eq!(self.steps, self.seeds * steps_per_seed, "{self:#?}");
        assert_eq!(self.final_power_cuts, self.seeds, "{self:#?}");
        assert!(self.checks >= 2 * self.seeds, "{self:#?}");
        if !several {
            return;
        }
        assert!(
            self.power_cuts > 0 && self.restarts > 0,
            "no crash mid-run: {self:#?}"
        );
        assert!(self.confirmed > 0 && self.gets > 0, "{self:#?}");
        assert!(
            self.expired > 0 && self.dead_letter_sightings > 0,
            "no expiry: {self:#?}"
        );
        assert!(
            self.most_paged_out > 4 * super::PAGING_WINDOW as u64,
            "the retry queue never paged far: {self:#?}"
        );
        assert!(self.redelivered_gets > 0, "no redelivery: {self:#?}");
        assert!(self.closes > 0, "no close: {self:#?}");
        // Given more than the watermark, a broker that kept the classic queues in memory
        // would have blocked its publishers for good (a stuck step) or failed the memory
        // check.
        assert!(
            self.classic_content_max > super::WATERMARK,
            "the classic queues never held more than the watermark: {self:#?}"
        );
    }
}
