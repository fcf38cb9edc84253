//! The model's page cache: the store file's pages written and not yet on disk, page by page as
//! the kernel keeps them. A page is dirty (written, waiting for writeback) or lost (its
//! writeback failed: Linux marks it clean, so it is read back until the cache drops it, but
//! never written). Which pages a failed fsync or a power cut still lets reach the disk, and
//! which of those tear, is drawn from the model's seed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use redb::StorageBackend;

use super::{DiskModel, Reach};

/// The kernel's page size: the unit of writeback.
pub(super) const PAGE: u64 = 4096;

/// What the model counts (see [`super::FaultStats`]).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counts {
    pub(super) cut_pages_written: u64,
    pub(super) cut_pages_lost: u64,
    pub(super) torn_pages: u64,
    pub(super) failed_syncs: u64,
    pub(super) failed_sync_pages_written: u64,
    pub(super) failed_sync_pages_lost: u64,
}

#[derive(Debug)]
struct CachedPage {
    data: Box<[u8]>,
    /// Its writeback failed: clean in the cache, never on disk.
    lost: bool,
}

/// The cache, the model's random source, and the files whose directory entry is not durable.
#[derive(Debug)]
pub(super) struct PageCache {
    pages: BTreeMap<u64, CachedPage>,
    pub(super) model: DiskModel,
    rng: u64,
    /// The file, once the store opened it.
    pub(super) path: Option<PathBuf>,
    /// Files the store created whose directory was not fsynced since: a power cut loses them.
    pub(super) new_files: Vec<PathBuf>,
    pub(super) counts: Counts,
}

/// Where a page that reaches the disk goes: the store file, or a copy of it.
pub(super) trait Disk {
    fn put(&mut self, offset: u64, data: &[u8]) -> std::io::Result<()>;
    fn len(&self) -> std::io::Result<u64>;
}

impl Disk for &dyn StorageBackend {
    fn put(&mut self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.write(offset, data)
    }
    fn len(&self) -> std::io::Result<u64> {
        StorageBackend::len(*self)
    }
}

impl Disk for std::fs::File {
    fn put(&mut self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        use std::io::{Seek, SeekFrom, Write};
        self.seek(SeekFrom::Start(offset))?;
        self.write_all(data)
    }
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }
}

impl PageCache {
    pub(super) fn new(model: DiskModel) -> Self {
        PageCache {
            pages: BTreeMap::new(),
            rng: model.seed,
            model,
            path: None,
            new_files: Vec::new(),
            counts: Counts::default(),
        }
    }

    /// Changes how the disk fails (its random source restarts from the new seed).
    pub(super) fn set_model(&mut self, model: DiskModel) {
        self.rng = model.seed;
        self.model = model;
    }

    /// The store opened the file at `path`, creating it if `created`.
    pub(super) fn opened(&mut self, path: &std::path::Path, created: bool) {
        self.path = Some(path.to_path_buf());
        if created {
            self.new_files.push(path.to_path_buf());
        }
    }

    /// splitmix64: the same draws on every platform for a seed.
    pub(super) fn draw(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn reaches(&mut self, reach: &Reach, offset: u64) -> bool {
        match reach {
            Reach::Nothing => false,
            Reach::Everything => true,
            Reach::Some(percent) => self.draw() % 100 < u64::from(*percent),
            Reach::Pages(accepts) => accepts(offset),
        }
    }

    /// Writes `data` at `offset` into the cache; a page not cached yet is first read from
    /// `disk` (the kernel reads a page before a partial write to it).
    pub(super) fn write(
        &mut self,
        disk: &dyn StorageBackend,
        offset: u64,
        data: &[u8],
    ) -> std::io::Result<()> {
        let end = offset + data.len() as u64;
        let mut page = offset / PAGE;
        while page * PAGE < end {
            let start = page * PAGE;
            let cached = match self.pages.entry(page) {
                std::collections::btree_map::Entry::Occupied(cached) => cached.into_mut(),
                std::collections::btree_map::Entry::Vacant(slot) => {
                    let mut content = vec![0u8; PAGE as usize].into_boxed_slice();
                    let on_disk = disk.len()?.saturating_sub(start).min(PAGE) as usize;
                    if on_disk > 0 {
                        disk.read(start, &mut content[..on_disk])?;
                    }
                    slot.insert(CachedPage {
                        data: content,
                        lost: false,
                    })
                }
            };
            let (from, to) = (offset.max(start), end.min(start + PAGE));
            cached.data[(from - start) as usize..(to - start) as usize]
                .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
            // Written again: dirty, whatever its writeback did before (its old content, lost
            // or not, goes to disk with it).
            cached.lost = false;
            page += 1;
        }
        Ok(())
    }

    /// Lays the cached pages over `out`, read from disk at `offset`. Returns whether a lost
    /// page was read (what the disk does not hold).
    pub(super) fn overlay(&self, offset: u64, out: &mut [u8]) -> bool {
        let end = offset + out.len() as u64;
        let mut lost = false;
        for (&page, cached) in self.pages.range(offset / PAGE..end.div_ceil(PAGE)) {
            let start = page * PAGE;
            let (from, to) = (offset.max(start), end.min(start + PAGE));
            out[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&cached.data[(from - start) as usize..(to - start) as usize]);
            lost |= cached.lost;
        }
        lost
    }

    /// A successful fsync: every dirty page reaches the disk. Lost pages stay lost.
    pub(super) fn sync_ok(&mut self, mut disk: impl Disk) -> std::io::Result<()> {
        let len = disk.len()?;
        for (&page, cached) in self.pages.iter().filter(|(_, c)| !c.lost) {
            put_page(&mut disk, len, page, &cached.data)?;
        }
        self.pages.retain(|_, cached| cached.lost);
        Ok(())
    }

    /// A failed fsync: some dirty pages had reached the disk before it failed (as the model
    /// says), the others are lost (clean in the cache, never written).
    pub(super) fn sync_failed(&mut self, mut disk: impl Disk) -> std::io::Result<()> {
        self.counts.failed_syncs += 1;
        let len = disk.len()?;
        let reach = self.model.at_failed_sync.clone();
        let dirty: Vec<u64> = self.dirty_pages();
        for page in dirty {
            if self.reaches(&reach, page * PAGE) {
                // Listed by `dirty_pages` just now: always there.
                if let Some(cached) = self.pages.remove(&page) {
                    put_page(&mut disk, len, page, &cached.data)?;
                    self.counts.failed_sync_pages_written += 1;
                }
            } else if let Some(cached) = self.pages.get_mut(&page) {
                cached.lost = true;
                self.counts.failed_sync_pages_lost += 1;
            }
        }
        Ok(())
    }

    /// The power goes: the dirty pages the model lets through reach `disk` (some of them
    /// torn: only a prefix of their sectors), the rest are gone. With `clear`, the cache is
    /// empty afterwards (the machine restarts); without it the pages stay (an image of the
    /// disk was taken and the store goes on).
    pub(super) fn cut(&mut self, mut disk: impl Disk, clear: bool) -> std::io::Result<()> {
        let len = disk.len()?;
        let reach = self.model.at_power_cut.clone();
        let sector = self.model.sector_bytes.clamp(512, PAGE as usize);
        let sectors = PAGE as usize / sector;
        for page in self.dirty_pages() {
            if !self.reaches(&reach, page * PAGE) {
                self.counts.cut_pages_lost += 1;
                continue;
            }
            let torn = sectors > 1 && self.draw() % 100 < u64::from(self.model.torn_percent);
            let written = if torn {
                // At least one sector, never all of them.
                1 + (self.draw() % (sectors as u64 - 1)) as usize
            } else {
                sectors
            };
            self.counts.torn_pages += u64::from(torn);
            self.counts.cut_pages_written += 1;
            let data = &self.pages[&page].data[..written * sector];
            put_page(&mut disk, len, page, data)?;
        }
        if clear {
            self.pages.clear();
        }
        Ok(())
    }

    /// Drops the lost pages, as `posix_fadvise(DONTNEED)` does with clean pages: reads then
    /// see the disk. Dirty pages stay (the kernel would start their writeback instead).
    pub(super) fn forget_lost(&mut self) {
        self.pages.retain(|_, cached| !cached.lost);
    }

    /// Drops the pages beyond a new, shorter file length.
    pub(super) fn truncate(&mut self, len: u64) {
        self.pages.retain(|&page, _| page * PAGE < len);
    }

    fn dirty_pages(&self) -> Vec<u64> {
        let dirty = self.pages.iter().filter(|(_, c)| !c.lost);
        dirty.map(|(&page, _)| page).collect()
    }

    /// (pages cached, of which lost).
    pub(super) fn sizes(&self) -> (usize, usize) {
        let lost = self.pages.values().filter(|c| c.lost).count();
        (self.pages.len(), lost)
    }
}

/// Writes a page (or its first sectors) to `disk`, never past the file's end (the file's
/// length is what the store set, whatever the page holds beyond it).
fn put_page(disk: &mut impl Disk, len: u64, page: u64, data: &[u8]) -> std::io::Result<()> {
    let start = page * PAGE;
    let n = len.saturating_sub(start).min(data.len() as u64) as usize;
    if n == 0 {
        return Ok(());
    }
    disk.put(start, &data[..n])
}
