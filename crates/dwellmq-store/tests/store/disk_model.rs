//! The disk fault model as real disks fail (torn pages at a power cut, fsyncs that fail after
//! writing some pages, single failed reads, directory entries), and what the store does
//! about each.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::{faulty_options, payload, Scratch};
use dwellmq_store::{Op, Store, StoreError};

fn persist(seq: u64) -> Op {
    Op::Persist {
        queue: 1,
        seq,
        expires_at_ms: 0,
        delivered: false,
        message: payload("k", &[seq as u8; 100]),
    }
}

fn seqs(snapshot: &dwellmq_store::Snapshot) -> Result<Vec<u64>, StoreError> {
    Ok(snapshot
        .queue_messages(1, 0, 1000)?
        .iter()
        .map(|m| m.seq)
        .collect())
}

/// The queue's seqs, once a snapshot can be read (bounded wait).
fn read_seqs(store: &Store) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.snapshot().and_then(|s| seqs(&s)) {
            Ok(seqs) => return seqs,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("the store never became readable again: {e:?}"),
        }
    }
}

#[test]
fn a_single_read_error_fails_that_read_and_the_store_reads_and_writes_again() {
    let dir = Scratch::new("disk-read-error");
    {
        let store = Store::open(dir.path()).expect("open");
        store.write(vec![persist(1), persist(2)]).expect("commit");
        store.close();
    }
    let (mut options, faults) = faulty_options();
    // No cache of redb's own: every read reaches the disk.
    options.cache_bytes = 0;
    let store = Store::open_with(dir.path(), options).expect("open");
    faults.fail_next_reads.store(1, Ordering::SeqCst);
    // The read that meets it fails; the handle then refuses every operation (redb's rule
    // after an I/O error) until the writer reopens the file, which a snapshot asks for.
    let failed = store.snapshot().and_then(|s| seqs(&s));
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(faults.stats().read_errors, 1);
    assert_eq!(
        read_seqs(&store),
        [1, 2],
        "reads work again, without a write"
    );
    // A later read error poisons the handle again: the next write is not failed for it.
    faults.fail_next_reads.store(1, Ordering::SeqCst);
    assert!(store.snapshot().and_then(|s| seqs(&s)).is_err());
    store
        .write(vec![persist(3)])
        .expect("the write is not failed for a read's error");
    assert_eq!(read_seqs(&store), [1, 2, 3]);
    assert!(!store.writes_failing());
    assert_eq!(store.stats().failed_commits, 0);
    // A disk that cannot be read at all for a while: once it can, reads work again by
    // themselves (the writer's probes reopen the file), without a write.
    faults.fail_reads.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !matches!(
        store.snapshot().and_then(|s| seqs(&s)),
        Err(StoreError::Closed)
    ) {
        assert!(Instant::now() < deadline, "reads kept working");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The writer was asked to reopen the file: wait until it tried, and failed.
    let errors = faults.stats().read_errors;
    while faults.stats().read_errors == errors {
        assert!(
            Instant::now() < deadline,
            "the writer never tried to reopen the file"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    faults.fail_reads.store(false, Ordering::SeqCst);
    assert_eq!(read_seqs(&store), [1, 2, 3]);
    store.close();
}

/// A new store file is on disk only once its directory is: the store fsyncs the data
/// directory before it acknowledges anything, so a power cut after the first commit finds it.
#[test]
fn a_new_store_file_survives_a_power_cut_because_its_directory_is_synced() {
    let dir = Scratch::new("disk-dir-entry");
    let (options, faults) = faulty_options();
    let store = Store::open_with(dir.path(), options).expect("open");
    store.write(vec![persist(1)]).expect("commit");
    let image = Scratch::new("disk-dir-entry-image");
    std::fs::create_dir_all(image.path()).expect("a directory");
    faults
        .disk_image(&dir.db_file(), &image.db_file())
        .expect("the disk's image");
    store.close();
    assert!(image.db_file().exists(), "the file's entry was lost");
    let store = Store::open(image.path()).expect("open the image");
    assert_eq!(read_seqs(&store), [1]);
    store.close();
}

/// The model itself: at a power cut some unsynced pages reach the disk, some of those torn
/// at a sector boundary; a failed fsync may have written some pages, and the others are read
/// back from the cache (what the disk does not hold) until the cache drops them.
#[test]
fn the_model_tears_pages_at_a_cut_and_loses_some_of_a_failed_fsync() {
    use dwellmq_store::faults::{DiskModel, Faults, Reach};
    let dir = Scratch::new("disk-model");
    std::fs::create_dir_all(dir.path()).expect("a directory");
    let faults = std::sync::Arc::new(Faults::with_model(DiskModel {
        at_power_cut: Reach::Everything,
        torn_percent: 100,
        sector_bytes: 512,
        at_failed_sync: Reach::Pages(std::sync::Arc::new(|offset| offset == 0)),
        ..DiskModel::default()
    }));
    let options = dwellmq_store::faults::options(faults.clone());
    let backend = (options.backend.as_ref().expect("a backend"))(&dir.db_file()).expect("open");
    // Created, so its entry is durable only once its directory is synced.
    let image = dir.path().join("image");
    faults.disk_image(&dir.db_file(), &image).expect("image");
    assert!(!image.exists(), "a new file's entry is not on disk yet");
    (options.sync_dir.as_ref().expect("a hook"))(dir.path()).expect("sync");
    backend.set_len(8192).expect("room");
    backend.write(0, &[1; 8192]).expect("write");
    // A power cut now: each page torn, a prefix of at least one sector and not all of them.
    faults.disk_image(&dir.db_file(), &image).expect("image");
    let cut = std::fs::read(&image).expect("read the image");
    for page in cut.chunks(4096) {
        let written = page.iter().take_while(|&&b| b == 1).count();
        assert!(
            written % 512 == 0 && written > 0 && written < 4096,
            "{written}"
        );
        assert!(page[written..].iter().all(|&b| b == 0));
    }
    assert_eq!(faults.stats().torn_pages, 2);
    // A failed fsync that wrote the first page only.
    faults.fail_sync.store(true, Ordering::SeqCst);
    assert!(backend.sync_data().is_err());
    let on_disk = std::fs::read(dir.db_file()).expect("read");
    assert!(
        on_disk[..4096].iter().all(|&b| b == 1),
        "the first page reached the disk"
    );
    assert!(
        on_disk[4096..].iter().all(|&b| b == 0),
        "the second did not"
    );
    let mut second = [0u8; 4096];
    backend.read(4096, &mut second).expect("read");
    assert!(second.iter().all(|&b| b == 1), "read back from the cache");
    assert_eq!(faults.stats().lost_page_reads, 1);
    assert_eq!(faults.failed_bytes(), 4096);
    // Dropped (as posix_fadvise does): reads see the disk.
    (options.forget_cache.as_ref().expect("a hook"))(&dir.db_file());
    backend.read(4096, &mut second).expect("read");
    assert!(second.iter().all(|&b| b == 0), "read from the disk");
    // A power cut now loses nothing more: the lost page never reaches the disk.
    faults.power_cut();
    assert_eq!(std::fs::read(dir.db_file()).expect("read"), on_disk);
}

/// A power cut in the middle of a commit (1-phase commit: its data pages and its header in
/// one fsync) leaves the new header on disk and its pages not: redb's recovery finds the
/// commit half-written and goes back to the last acknowledged one. With torn pages as well,
/// the commit is there whole or not at all.
#[test]
fn a_half_written_commit_at_a_power_cut_is_rolled_back_by_redbs_recovery() {
    use dwellmq_store::faults::{DiskModel, Reach};
    for (name, reach, torn) in [
        (
            "disk-torn-header-only",
            Reach::Pages(std::sync::Arc::new(|offset| offset == 0)),
            0,
        ),
        ("disk-torn-all", Reach::Everything, 100),
        ("disk-torn-some", Reach::Some(50), 30),
    ] {
        let dir = Scratch::new(name);
        let (mut options, faults) = faulty_options();
        options.quick_repair = false;
        let store = Store::open_with(dir.path(), options).expect("open");
        store.write(vec![persist(1), persist(2)]).expect("commit");
        faults.set_model(DiskModel {
            seed: 7,
            at_power_cut: reach,
            torn_percent: torn,
            ..DiskModel::default()
        });
        // The writer is in the commit's fsync, its pages written (to the cache).
        faults.pause();
        let syncs = faults.syncs.load(Ordering::SeqCst);
        let (tx, rx) = std::sync::mpsc::channel();
        store.submit(
            vec![Op::Forget { queue: 1, seq: 1 }, persist(3)],
            move |r| {
                let _ = tx.send(r.is_ok());
            },
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while faults.syncs.load(Ordering::SeqCst) == syncs {
            assert!(
                Instant::now() < deadline,
                "the commit never reached its fsync"
            );
            std::thread::yield_now();
        }
        let image = Scratch::new(&format!("{name}-image"));
        std::fs::create_dir_all(image.path()).expect("a directory");
        faults
            .disk_image(&dir.db_file(), &image.db_file())
            .expect("the disk's image");
        faults.resume();
        assert!(rx.recv().expect("completion"));
        store.close();
        let store = Store::open(image.path()).expect("the image opens");
        let found = read_seqs(&store);
        assert!(
            found == [1, 2] || found == [2, 3],
            "{name}: half a commit: {found:?}"
        );
        if name == "disk-torn-header-only" {
            assert_eq!(found, [1, 2], "the header alone does not make the commit");
        }
        store.close();
    }
}

/// What a store that went on from the page cache after a failed fsync would do, and what this
/// one does. A 1-phase commit (its pages and its header in one fsync) fails after its header
/// reached the disk and before its pages did: the cache still holds them (Linux marks them
/// clean), so a reopen that reads through the cache finds a whole commit, and the next one
/// builds on pages the disk never got; after a power cut that acknowledged commit is lost
/// or the file no longer opens. The store drops the cached pages before it reopens: redb
/// finds the half-written commit and goes back to the last whole one, and the next commit
/// builds on that.
#[test]
fn after_a_failed_fsync_the_store_builds_only_on_what_the_disk_holds() {
    use dwellmq_store::faults::{DiskModel, Reach};
    for from_the_cache in [false, true] {
        let dir = Scratch::new("disk-failed-fsync-rule");
        let (mut options, faults) = faulty_options();
        options.quick_repair = false;
        if from_the_cache {
            // The counterfactual: the cached pages are never dropped.
            options.forget_cache = Some(std::sync::Arc::new(|_: &std::path::Path| {}));
        }
        let store = Store::open_with(dir.path(), options).expect("open");
        store.write(vec![persist(1)]).expect("commit");
        store.write(vec![persist(2)]).expect("commit");
        faults.set_model(DiskModel {
            at_failed_sync: Reach::Pages(std::sync::Arc::new(|offset| offset == 0)),
            ..DiskModel::default()
        });
        faults.fail_syncs(0, 1);
        // Into two tables: the next commit rewrites the queue's pages, not the held ones.
        let hold = Op::Hold {
            held_at_ms: 0,
            id: dwellmq_store::DeadlineId {
                due_ms: 9_000,
                seq: 1,
            },
            vhost: "/".into(),
            exchange: "d".into(),
            message: payload("k", b"held"),
        };
        let lost_reads_before = faults.stats().lost_page_reads;
        assert!(store.write(vec![persist(3), hold]).is_err(), "nacked");
        store.write(vec![persist(4)]).expect("acknowledged");
        let lost_reads = faults.stats().lost_page_reads - lost_reads_before;
        let image = Scratch::new("disk-failed-fsync-rule-image");
        std::fs::create_dir_all(image.path()).expect("a directory");
        faults
            .disk_image(&dir.db_file(), &image.db_file())
            .expect("the disk's image");
        store.close();
        let after_cut = Store::open(image.path()).map(|store| {
            let found = read_seqs(&store);
            let held = store.snapshot().and_then(|s| s.delayed_count());
            (found, held.ok())
        });
        if from_the_cache {
            assert!(lost_reads > 0, "it read pages the disk did not hold");
            assert!(
                !matches!(&after_cut, Ok((found, _)) if found.contains(&4)),
                "the model cannot tell the rule from going on from the cache: {after_cut:?}"
            );
        } else {
            assert_eq!(lost_reads, 0, "nothing read came from a lost page");
            assert_eq!(faults.failed_bytes(), 0, "the lost pages were dropped");
            let (found, held) = after_cut.expect("the image opens");
            assert_eq!(
                found,
                [1, 2, 4],
                "the acknowledged commits, not the failed one"
            );
            assert_eq!(held, Some(0));
        }
    }
}

/// A process that wrote to the file and died right after its fsync failed leaves the pages it
/// could not write in the kernel's cache, clean: a start drops the file's cached pages before
/// it reads, so it reads what the disk holds.
#[test]
fn a_start_reads_the_disk_not_pages_an_earlier_failed_fsync_left_in_the_cache() {
    let dir = Scratch::new("disk-start-drops-cache");
    let (options, faults) = faulty_options();
    let store = Store::open_with(dir.path(), options.clone()).expect("open");
    store.write(vec![persist(1), persist(2)]).expect("commit");
    store.close();
    // The other process overwrote every page, and its fsync failed: nothing reached the disk.
    let backend = (options.backend.as_ref().expect("a backend"))(&dir.db_file()).expect("open");
    let len = backend.len().expect("len");
    backend.write(0, &vec![0xAB; len as usize]).expect("write");
    faults.fail_sync.store(true, Ordering::SeqCst);
    assert!(backend.sync_data().is_err());
    faults.fail_sync.store(false, Ordering::SeqCst);
    drop(backend);
    assert_eq!(faults.failed_bytes() as u64, len);
    let store = Store::open_with(dir.path(), options).expect("the start reads the disk");
    assert_eq!(read_seqs(&store), [1, 2]);
    assert_eq!(faults.stats().lost_page_reads, 0);
    store.close();
}

/// Reopening the file writes too (redb's repair of a handle that was not closed cleanly, the
/// header a close writes), and its fsync can fail: the next reopen must not read what it lost.
/// Here a failed read has the writer reopen the file, and that reopen's fsync fails.
#[test]
fn a_reopen_whose_own_fsync_failed_is_followed_by_one_that_reads_the_disk() {
    let dir = Scratch::new("disk-reopen-fsync");
    let (mut options, faults) = faulty_options();
    options.cache_bytes = 0;
    options.retry_interval = Duration::from_millis(20);
    let store = Store::open_with(dir.path(), options).expect("open");
    store.write(vec![persist(1)]).expect("commit");
    let commits = faults.syncs.load(Ordering::SeqCst);
    store.write(vec![persist(2)]).expect("commit");
    let syncs_per_commit = faults.syncs.load(Ordering::SeqCst) - commits;
    // A read fails; the snapshot after it asks the writer to reopen the file, and every
    // fsync of that reopen fails.
    faults.fail_next_reads.store(1, Ordering::SeqCst);
    assert!(store.snapshot().and_then(|s| seqs(&s)).is_err());
    faults.fail_syncs(0, syncs_per_commit + 2);
    assert!(read_seqs(&store) == [1, 2]);
    assert!(faults.stats().failed_syncs > 0, "{:?}", faults.stats());
    assert_eq!(faults.stats().lost_page_reads, 0, "{:?}", faults.stats());
    store.write(vec![persist(3)]).expect("commit");
    assert_eq!(read_seqs(&store), [1, 2, 3]);
    store.close();
}
