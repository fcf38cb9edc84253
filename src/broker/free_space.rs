//! RabbitMQ's free disk space alarm (`disk_free_limit`): the data directory's file system is
//! checked every second; below the limit, publishers are blocked through the disk alarm
//! (`connection.blocked`, `low on disk`) before a full disk fails commits.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::available_memory;
use super::disk_alarm::DiskAlarm;
use crate::config::DiskFreeLimit;

/// How often the free space is read (RabbitMQ checks at most every few seconds too).
const INTERVAL: Duration = Duration::from_secs(1);

/// The free-space check of one data directory.
pub(crate) struct FreeSpaceCheck {
    dir: PathBuf,
    limit: u64,
    alarm: Arc<DiskAlarm>,
}

impl FreeSpaceCheck {
    /// The check of `dir` against `limit` (a relative limit against the memory available).
    pub(crate) fn new(dir: &Path, limit: DiskFreeLimit, alarm: Arc<DiskAlarm>) -> Self {
        let limit = limit.resolve(available_memory::detect().bytes);
        tracing::info!(dir = %dir.display(), limit, "disk free space limit set");
        alarm.set_free_space_limit(limit);
        FreeSpaceCheck {
            dir: dir.to_path_buf(),
            limit,
            alarm,
        }
    }

    /// Reads the free space once and raises or clears the alarm; the free octets, if they
    /// could be read.
    pub(crate) fn check(&self) -> Option<u64> {
        let free = free_octets(&self.dir)?;
        let low = free < self.limit;
        if low != self.alarm.free_space_low() {
            if low {
                tracing::warn!(free, limit = self.limit, dir = %self.dir.display(), "free disk space below the limit: publishers are blocked");
            } else {
                tracing::info!(
                    free,
                    limit = self.limit,
                    "free disk space above the limit again"
                );
            }
        }
        self.alarm.set_free_space_low(low);
        Some(free)
    }

    /// Checks every [`INTERVAL`] until `shutdown` changes.
    pub(crate) async fn run(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut ticks = tokio::time::interval(INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = shutdown.changed() => return,
            }
            // statvfs may block on a slow file system: off the async workers.
            let check = Arc::clone(&self);
            let _ = tokio::task::spawn_blocking(move || check.check()).await;
        }
    }
}

/// Free octets for unprivileged users on the file system holding `dir` (`statvfs`).
#[cfg(target_os = "linux")]
pub(crate) fn free_octets(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: a NUL-terminated path and a buffer statvfs fills on success.
    let rc = unsafe { libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        tracing::warn!(dir = %dir.display(), error = %std::io::Error::last_os_error(), "reading the free disk space failed");
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled the buffer.
    let stat = unsafe { stat.assume_init() };
    // Both are u64 on 64-bit Linux, narrower on some 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let (available, fragment) = (u64::from(stat.f_bavail), u64::from(stat.f_frsize));
    Some(available.saturating_mul(fragment))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn free_octets(_dir: &Path) -> Option<u64> {
    None
}
