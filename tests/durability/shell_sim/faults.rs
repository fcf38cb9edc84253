//! The simulation's failures: commits and fsyncs that fail, clean restarts and power cuts;
//! and the sync point that tells what is committed.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dwellmq::StoreFaults;

use super::messages::Route;
use super::{Sim, SCRATCH, STUCK};
use crate::common::DataDir;

impl Sim {
    /// A confirmed publish to the scratch queue: everything submitted before it is committed
    /// (commits end in order; a failed one is retried whole before a later one ends). Failures
    /// still to come are used up by the nacks.
    pub(super) async fn sync(&mut self) -> String {
        for attempt in 0..100 {
            let id = self.next_id();
            let confirm = self.send(Route::Queue(SCRATCH), id, true, None, 0).await;
            match self.bounded("a scratch confirm", confirm).await {
                Ok(c) if c.is_ack() => {
                    self.model.removed(id, "scratch");
                    self.model.committed();
                    return format!("sync ({attempt} nacked first)");
                }
                Ok(_) => self.model.removed(id, "scratch"),
                Err(e) => self.fail(&format!("the scratch confirm failed: {e}")),
            }
        }
        self.fail("the store never committed again")
    }

    /// The next 1-3 message commits fail; a batch runs into them, then a sync uses up the rest.
    pub(super) async fn failing_commits(&mut self) -> String {
        let n = 1 + self.rng.below(3);
        self.broker().fail_next_writes(n);
        let batch = if self.rng.below(2) == 0 {
            self.publish_batch().await
        } else {
            self.publish_delayed().await
        };
        let sync = self.sync().await;
        format!("fail the next {n} commits; {batch}; {sync}")
    }

    /// Every fsync fails for 20-300 ms while a batch is published (a publisher blocked by the
    /// disk alarm waits for the disk to work again); then the rest of the batch goes through.
    pub(super) async fn failing_fsync(&mut self) -> String {
        self.faults.fail_sync.store(true, Ordering::SeqCst);
        let failing_for = Duration::from_millis(20 + self.rng.below(280));
        let faults = Arc::clone(&self.faults);
        let healed = tokio::spawn(async move {
            tokio::time::sleep(failing_for).await;
            faults.fail_sync.store(false, Ordering::SeqCst);
        });
        let queue = self.rng.pick(&["q0", "q2"]);
        let n = 2 + self.rng.below(4);
        let mut confirms = Vec::new();
        for _ in 0..n {
            let id = self.next_id();
            let filler = self.filler_for(queue);
            let confirm = self.send(Route::Queue(queue), id, true, None, filler).await;
            confirms.push((id, confirm));
        }
        let (acked, nacked) = self.settle_confirms(confirms).await;
        // The disk works again before the next step (a clean restart counts on its shutdown
        // committing what is queued).
        let _ = self.bounded("the end of the fsync failure", healed).await;
        // The store reopens and checks its file after a failed fsync; until it has, reads fail
        // and the disk alarm is up.
        let since = Instant::now();
        while self.broker().disk_alarm() {
            if since.elapsed() > STUCK {
                self.fail("the disk alarm never cleared after the fsync failure");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        format!(
            "fsync fails for {failing_for:?} under a batch to {queue}: {acked} acked, {nacked} nacked"
        )
    }

    /// Power off: the disk keeps what was fsynced, at a moment chosen while publishes may be
    /// in flight; a new broker starts on that image.
    pub(super) async fn power_cut(&mut self) -> String {
        let in_flight = self.rng.below(2) * (1 + self.rng.below(10));
        let landed = Arc::new(parking_lot::Mutex::new(Vec::new()));
        for _ in 0..in_flight {
            let id = self.next_id();
            let queue = self.rng.pick(&["q0", "q1", "q2"]);
            let filler = self.filler_for(queue);
            let confirm = self.send(Route::Queue(queue), id, true, None, filler).await;
            let landed = Arc::clone(&landed);
            tokio::spawn(async move {
                if let Ok(c) = confirm.await {
                    if c.is_ack() {
                        landed.lock().push(id);
                    }
                }
            });
        }
        let wait = self.rng.below(3_000);
        tokio::time::sleep(Duration::from_micros(wait)).await;
        // Every confirm that arrived before the image was taken was fsynced before it.
        let confirmed = landed.lock().clone();
        let image = DataDir::new("shell-sim");
        std::fs::create_dir_all(image.path()).expect("image directory");
        let file = dwellmq_store::DB_FILE;
        if let Err(e) = self
            .faults
            .disk_image(&self.dir.path().join(file), &image.path().join(file))
        {
            self.fail(&format!("taking the disk image failed: {e}"));
        }
        for &id in &confirmed {
            self.model.confirmed(id);
        }
        let now_ms = self.broker().now_ms();
        self.stop().await;
        self.dir = image;
        self.faults = Arc::new(StoreFaults::default());
        self.start(now_ms).await;
        self.report.power_cuts += 1;
        format!(
            "power cut with {in_flight} in flight ({} confirmed before it)",
            confirmed.len()
        )
    }

    /// The power goes: the client's connection is cut, not closed (a power cut sends no
    /// close), then the broker stops.
    pub(super) async fn stop(&mut self) {
        self.ch = None;
        if let Some(client) = self.client.take() {
            client.tap.cut();
        }
        if let Some(broker) = self.broker.take() {
            if tokio::time::timeout(STUCK, broker.shutdown())
                .await
                .is_err()
            {
                self.fail(&format!("the broker's shutdown takes over {STUCK:?}"));
            }
        }
    }

    /// The client closes its channel and connection (each close bounded), the broker
    /// restarts on its data directory; its shutdown commits what is queued.
    pub(super) async fn clean_restart(&mut self) -> String {
        let closed = self.close_client().await;
        let broker = self.broker.take().expect("a broker runs");
        match self.bounded("a restart", broker.restart()).await {
            Ok(broker) => {
                self.model.committed();
                self.attach(broker).await
            }
            Err(e) => self.fail(&format!("the restart failed: {e}")),
        }
        self.report.restarts += 1;
        format!("clean restart (client {closed})")
    }
}
