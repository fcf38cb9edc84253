//! A storage backend that reads the store file and keeps every write in memory: redb can open a
//! file writable over it (repairing it, checking its integrity) while the file itself stays as
//! it was, octet for octet.
//!
//! A file that was not shut down cleanly cannot be opened read-only (redb asks for a repair,
//! which writes), yet its format must be known before anything is written to it: a file of a
//! newer format is left untouched, and one of an older format is repaired only once it is known
//! that this build can upgrade it. Opened over an overlay, the repair happens in memory. The
//! repair writes the header and redb's allocator state, a few pages: the overlay holds only
//! what is written, never a copy of the file.

use std::collections::HashMap;
use std::fmt;
use std::io;

use redb::StorageBackend;

/// Granularity of the kept writes (redb's page size).
const PAGE: u64 = 4096;

/// Reads through to `inner`, keeps writes. File locks are not taken: the data directory's lock
/// file already keeps other dwellmq processes out, and `inner` may be open read-only.
pub(crate) struct Overlay {
    inner: Box<dyn StorageBackend>,
    state: parking_lot::Mutex<State>,
}

struct State {
    /// The length redb sees.
    len: u64,
    /// How much of `inner` is still visible: a shrink hides its tail for good (growing again
    /// reads zeros there, as a file would).
    inner_len: u64,
    /// Written pages, whole.
    pages: HashMap<u64, Box<[u8]>>,
}

impl fmt::Debug for Overlay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("Overlay")
            .field("len", &state.len)
            .field("pages_written", &state.pages.len())
            .finish()
    }
}

impl Overlay {
    pub(crate) fn new(inner: Box<dyn StorageBackend>) -> io::Result<Overlay> {
        let len = inner.len()?;
        Ok(Overlay {
            inner,
            state: parking_lot::Mutex::new(State {
                len,
                inner_len: len,
                pages: HashMap::new(),
            }),
        })
    }

    /// Page `index` as redb last wrote it, or as the file has it.
    fn load(&self, state: &State, index: u64) -> io::Result<Box<[u8]>> {
        if let Some(page) = state.pages.get(&index) {
            return Ok(page.clone());
        }
        let mut page = vec![0u8; PAGE as usize].into_boxed_slice();
        let start = index * PAGE;
        let visible = state.inner_len.saturating_sub(start).min(PAGE) as usize;
        if visible > 0 {
            self.inner.read(start, &mut page[..visible])?;
        }
        Ok(page)
    }
}

impl StorageBackend for Overlay {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.state.lock().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let state = self.state.lock();
        let end = offset
            .checked_add(out.len() as u64)
            .filter(|&end| end <= state.len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"))?;
        let mut at = offset;
        while at < end {
            let index = at / PAGE;
            let within = (at % PAGE) as usize;
            let take = ((PAGE as usize) - within).min((end - at) as usize);
            let dest = &mut out[(at - offset) as usize..][..take];
            match state.pages.get(&index) {
                Some(page) => dest.copy_from_slice(&page[within..within + take]),
                None => {
                    // Straight from the file, zeros past what of it is visible.
                    let visible = state.inner_len.saturating_sub(at).min(take as u64) as usize;
                    if visible > 0 {
                        self.inner.read(at, &mut dest[..visible])?;
                    }
                    dest[visible..].fill(0);
                }
            }
            at += take as u64;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut state = self.state.lock();
        if len < state.len {
            state.inner_len = state.inner_len.min(len);
            let first_gone = len.div_ceil(PAGE);
            state.pages.retain(|&index, _| index < first_gone);
            let tail = (len % PAGE) as usize;
            if tail != 0 {
                if let Some(page) = state.pages.get_mut(&(len / PAGE)) {
                    page[tail..].fill(0);
                }
            }
        }
        state.len = len;
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut state = self.state.lock();
        let end = offset + data.len() as u64;
        let mut at = offset;
        while at < end {
            let index = at / PAGE;
            let within = (at % PAGE) as usize;
            let take = ((PAGE as usize) - within).min((end - at) as usize);
            let mut page = self.load(&state, index)?;
            page[within..within + take].copy_from_slice(&data[(at - offset) as usize..][..take]);
            state.pages.insert(index, page);
            at += take as u64;
        }
        state.len = state.len.max(end);
        Ok(())
    }

    fn close(&self) -> Result<(), io::Error> {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A backend over a byte vector that counts writes (there must be none).
    #[derive(Debug)]
    struct Bytes(Vec<u8>, Arc<AtomicUsize>);

    impl StorageBackend for Bytes {
        fn len(&self) -> Result<u64, io::Error> {
            Ok(self.0.len() as u64)
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
            let start = offset as usize;
            let src = self
                .0
                .get(start..start + out.len())
                .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
            out.copy_from_slice(src);
            Ok(())
        }
        fn set_len(&self, _: u64) -> Result<(), io::Error> {
            self.1.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        fn sync_data(&self) -> Result<(), io::Error> {
            Ok(())
        }
        fn write(&self, _: u64, _: &[u8]) -> Result<(), io::Error> {
            self.1.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    #[test]
    fn reads_see_writes_and_shrinks_while_the_inner_storage_is_never_written() {
        let file: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let writes = Arc::new(AtomicUsize::new(0));
        let inner = Box::new(Bytes(file.clone(), writes.clone()));
        let overlay = Overlay::new(inner).unwrap();
        let mut model = file.clone();
        let write = |overlay: &Overlay, model: &mut Vec<u8>, at: usize, data: &[u8]| {
            overlay.write(at as u64, data).unwrap();
            if model.len() < at + data.len() {
                model.resize(at + data.len(), 0);
            }
            model[at..at + data.len()].copy_from_slice(data);
        };
        write(&overlay, &mut model, 4090, &[7; 20]);
        write(&overlay, &mut model, 9_990, &[9; 30]);
        let check = |overlay: &Overlay, model: &[u8]| {
            assert_eq!(overlay.len().unwrap(), model.len() as u64);
            let mut all = vec![0u8; model.len()];
            overlay.read(0, &mut all).unwrap();
            assert!(all == model);
            let mut some = vec![0u8; 5000];
            overlay.read(3000, &mut some).unwrap();
            assert!(some[..] == model[3000..8000]);
        };
        check(&overlay, &model);
        overlay.set_len(6000).unwrap();
        model.truncate(6000);
        overlay.set_len(12_000).unwrap();
        model.resize(12_000, 0);
        check(&overlay, &model);
        let mut past = [0u8; 2];
        assert!(overlay.read(11_999, &mut past).is_err());
        assert_eq!(writes.load(Ordering::Relaxed), 0);
    }
}
