//! The simulation's faults: switches, single failures, and power cuts (between commits, or in
//! the middle of one), each followed by a restart on what the disk held and a check.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dwellmq_store::Completion;

use super::{add_faults, Sim};

impl Sim {
    pub(super) fn toggle_fault(&mut self) {
        match self.rng.below(5) {
            // A single read fails (a commit's, or the next snapshot's).
            3 => {
                let n = 1 + self.rng.below(2);
                self.faults.fail_next_reads.store(n, Ordering::SeqCst);
            }
            // One fsync fails, at a point of the next commits: its data's or its header's
            // (after some of its pages reached the disk).
            4 => {
                let skip = self.rng.below(3);
                self.faults.fail_syncs(skip, 1);
            }
            which => {
                let switch = [
                    &self.faults.fail_writes,
                    &self.faults.fail_sync,
                    &self.faults.disk_full,
                ][which as usize];
                let on = !switch.load(Ordering::SeqCst) && self.rng.chance(60);
                switch.store(on, Ordering::SeqCst);
            }
        }
    }

    pub(super) fn clear_faults(&self) {
        for switch in [
            &self.faults.fail_writes,
            &self.faults.fail_sync,
            &self.faults.disk_full,
        ] {
            switch.store(false, Ordering::SeqCst);
        }
        self.faults.fail_next_reads.store(0, Ordering::SeqCst);
        self.faults.fail_syncs(0, 0);
        self.faults.resume();
    }

    /// The power goes now, between commits: the store is opened again on what the disk held,
    /// and checked.
    pub(super) fn power_cut(&mut self) {
        let image = self.image_dir();
        self.faults
            .disk_image(
                &self.dir.join(dwellmq_store::DB_FILE),
                &image.join(dwellmq_store::DB_FILE),
            )
            .expect("the disk's image");
        self.restart_on(image);
    }

    /// The power goes while the next commit is in one of its fsyncs (its pages, or its
    /// header, written to the cache and not synced): whatever the model lets through reaches
    /// the image, some of it torn. The commit counts as not acknowledged.
    pub(super) fn cut_in_flight(&mut self) {
        self.cut_at_sync = Some(self.rng.below(3));
        match self.rng.below(7) {
            0 => self.persist(),
            1 => self.forget(),
            2 => self.release(),
            3 => self.dead_letter_to_delayed(),
            4 => self.stream_append(),
            5 => self.stream_truncate(),
            _ => self.hold(),
        }
        // Nothing to commit (nothing to pick): an ordinary cut.
        self.cut_at_sync = None;
        self.faults.resume();
        match self.cut_image.take() {
            Some(image) => {
                self.report.cuts_in_flight += 1;
                self.restart_on(image);
            }
            None => self.power_cut(),
        }
    }

    /// Waits until the writer is held in fsync number `sync` (or the commit is done), takes
    /// the image of the disk then, and lets the writer go on.
    pub(super) fn cut_during_commit(
        &mut self,
        completions: &mpsc::Receiver<Completion>,
        count: usize,
        sync: u64,
    ) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut done = 0;
        while done < count && self.faults.syncs.load(Ordering::SeqCst) < sync {
            assert!(
                Instant::now() < deadline,
                "seed {}: the commit neither finished nor reached its fsync",
                self.seed
            );
            match completions.recv_timeout(Duration::from_millis(1)) {
                Ok(_) => done += 1,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(e) => panic!("seed {}: a completion was lost: {e}", self.seed),
            }
        }
        let image = self.image_dir();
        self.faults
            .disk_image(
                &self.dir.join(dwellmq_store::DB_FILE),
                &image.join(dwellmq_store::DB_FILE),
            )
            .expect("the disk's image");
        self.cut_image = Some(image);
        self.faults.resume();
        for _ in done..count {
            let _outcome = completions
                .recv_timeout(Duration::from_secs(30))
                .expect("every submission completes");
        }
    }

    fn image_dir(&self) -> PathBuf {
        let image = self.root.join(format!("gen-{}-image", self.generation));
        let _ = std::fs::remove_dir_all(&image);
        std::fs::create_dir_all(&image).expect("a directory");
        image
    }

    /// The old store goes (nothing of it reaches the image any more) and a new one opens on
    /// the image, which is then checked against the model.
    fn restart_on(&mut self, image: PathBuf) {
        self.report.power_cuts += 1;
        self.clear_faults();
        if let Some(old) = self.store.take() {
            old.close();
        }
        self.absorb_fault_stats();
        let _ = std::fs::remove_dir_all(&self.dir);
        self.generation += 1;
        self.dir = self.root.join(format!("gen-{}", self.generation));
        std::fs::rename(&image, &self.dir).expect("the image becomes the data directory");
        let when = format!("after power cut {}", self.report.power_cuts);
        self.open_store(&when);
        self.check();
    }

    /// Adds what the current disk model did to the report, and checks the store never read
    /// a page the disk did not hold.
    pub(super) fn absorb_fault_stats(&mut self) {
        let stats = self.faults.stats();
        assert_eq!(
            stats.lost_page_reads, 0,
            "seed {}: the store read a page a failed fsync had lost",
            self.seed
        );
        add_faults(&mut self.report.faults, &stats);
    }
}
