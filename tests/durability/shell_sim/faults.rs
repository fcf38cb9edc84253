//! The simulation's failures: commits and fsyncs that fail, clean restarts and power cuts;
//! and the sync point that tells what is committed.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dwellmq::StoreFaults;

use super::model::Place;
use super::{bounded, persistent, Sim, SCRATCH, STUCK};
use crate::common::DataDir;

impl Sim {
    /// A confirmed publish to the scratch queue: everything submitted before it is committed
    /// (commits end in order; a failed one is retried whole before a later one ends). Failures
    /// still to come are used up by the nacks.
    pub(super) async fn sync(&mut self) -> String {
        for attempt in 0..100 {
            let id = self.next_id();
            let confirm = self.send("", SCRATCH, id, persistent()).await;
            match bounded("a scratch confirm", confirm).await {
                Ok(c) if c.is_ack() => {
                    self.model.removed(id);
                    self.model.committed();
                    return format!("sync ({attempt} nacked first)");
                }
                Ok(_) => self.model.removed(id),
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
        tokio::spawn(async move {
            tokio::time::sleep(failing_for).await;
            faults.fail_sync.store(false, Ordering::SeqCst);
        });
        let queue = self.rng.pick(&["q0", "q2"]);
        let n = 2 + self.rng.below(4);
        let mut confirms = Vec::new();
        for _ in 0..n {
            let id = self.next_id();
            let confirm = self.send("", queue, id, persistent()).await;
            confirms.push((id, Place::Queue(queue.into()).reachable(), confirm));
        }
        let (acked, nacked) = self.settle_confirms(confirms).await;
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
            let confirm = self.send("", queue, id, persistent()).await;
            let landed = Arc::clone(&landed);
            tokio::spawn(async move {
                if let Ok(c) = confirm.await {
                    if c.is_ack() {
                        landed.lock().push((id, queue));
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
        for (id, queue) in &confirmed {
            self.model
                .confirmed(*id, Place::Queue((*queue).into()).reachable());
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

    /// The power goes: the client's connection is dropped, not closed (a power cut sends no
    /// close; and a lapin close with publishes still waiting for confirms was seen to wait
    /// past the broker's end of the connection), then the broker stops.
    pub(super) async fn stop(&mut self) {
        self.ch = None;
        drop(self.connection.take());
        if let Some(broker) = self.broker.take() {
            if tokio::time::timeout(STUCK, broker.shutdown())
                .await
                .is_err()
            {
                self.fail(&format!("the broker's shutdown takes over {STUCK:?}"));
            }
        }
    }

    /// The client closes its connection, the broker restarts on its data directory.
    pub(super) async fn clean_restart(&mut self) -> String {
        self.ch = None;
        let mut closed = "closed";
        if let Some(connection) = self.connection.take() {
            let close = connection.close(200, "bye".into());
            if tokio::time::timeout(Duration::from_secs(5), close)
                .await
                .is_err()
            {
                // Seen 4 times in about 1,000 seeds: lapin's close never completes although the
                // broker has ended its side of the connection (it counts no open connection,
                // its threads are idle). Counted, not failed on; what each side was in is
                // printed for the record.
                self.report.unfinished_closes += 1;
                let status = connection.status();
                eprintln!(
                    "shell simulation, seed {}: close unfinished after 5 s; lapin: connected {}, \
                     closing {}, blocked {}; broker: disk alarm {}, {} connections",
                    self.seed,
                    status.connected(),
                    status.closing(),
                    status.blocked(),
                    self.broker().disk_alarm(),
                    self.broker().connection_count(),
                );
                if status.blocked() {
                    self.report.unfinished_closes_blocked += 1;
                }
                closed = "close unfinished after 5 s";
            }
        }
        let broker = self.broker.take().expect("a broker runs");
        match bounded("a restart", broker.restart()).await {
            Ok(broker) => self.attach(broker).await,
            Err(e) => self.fail(&format!("the restart failed: {e}")),
        }
        self.report.restarts += 1;
        format!("clean restart (client {closed})")
    }
}
