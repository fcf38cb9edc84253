//! The node's figures under RabbitMQ's names: this process's memory, file descriptors, uptime,
//! and the disk it writes to. Read from `/proc` and `statvfs` on Linux; elsewhere the families
//! are written without samples.

use super::core::Scope;
use super::snapshot::Snapshot;
use super::text::{Exposition, Kind};

/// What is read of the process and its disk at scrape time.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Process {
    pub(crate) resident_bytes: Option<u64>,
    pub(crate) open_fds: Option<u64>,
    pub(crate) max_fds: Option<u64>,
    pub(crate) uptime_seconds: Option<f64>,
    pub(crate) disk_available_bytes: Option<u64>,
}

/// `node_coarse_metrics`: open descriptors, resident memory, free disk.
pub(crate) fn coarse(s: &Snapshot, scope: &Scope<'_>, out: &mut Exposition) {
    let p = &s.process;
    for (name, help, value) in [
        ("process_open_fds", "Open file descriptors", p.open_fds),
        (
            "process_resident_memory_bytes",
            "Memory used in bytes",
            p.resident_bytes,
        ),
        (
            "disk_space_available_bytes",
            "Disk space available in bytes",
            p.disk_available_bytes,
        ),
    ] {
        let mut family = out.family(&format!("{}{name}", scope.prefix), Kind::Gauge, help);
        if let Some(value) = value {
            family.sample(&[], value);
        }
    }
}

/// `node_metrics`: the limits, and the uptime.
pub(crate) fn limits(s: &Snapshot, scope: &Scope<'_>, out: &mut Exposition) {
    let p = &s.process;
    let mut family = out.family(
        &format!("{}process_max_fds", scope.prefix),
        Kind::Gauge,
        "Open file descriptors limit",
    );
    if let Some(max) = p.max_fds {
        family.sample(&[], max);
    }
    out.family(
        &format!("{}resident_memory_limit_bytes", scope.prefix),
        Kind::Gauge,
        "Memory high watermark in bytes",
    )
    .sample(&[], s.memory_limit);
    // RabbitMQ's disk_free_limit, as resolved at start (0 in memory: nothing is written).
    out.family(
        &format!("{}disk_space_available_limit_bytes", scope.prefix),
        Kind::Gauge,
        "Free disk space low watermark in bytes",
    )
    .sample(&[], s.disk_free_limit);
    let mut family = out.family(
        &format!("{}erlang_uptime_seconds", scope.prefix),
        Kind::Gauge,
        "Node uptime",
    );
    if let Some(uptime) = p.uptime_seconds {
        family.sample(&[], uptime);
    }
}

/// Reads the process's figures; `disk` is where the store writes (or the working directory).
pub(crate) fn read(disk: &std::path::Path) -> Process {
    imp::read(disk)
}

#[cfg(target_os = "linux")]
mod imp {
    use super::Process;
    use std::path::Path;

    pub(super) fn read(disk: &Path) -> Process {
        let page = page_size();
        let resident_bytes = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map(|pages| pages * page);
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64);
        Process {
            resident_bytes,
            open_fds,
            max_fds: max_fds(),
            uptime_seconds: uptime_seconds(),
            disk_available_bytes: disk_available(disk),
        }
    }

    fn page_size() -> u64 {
        // SAFETY: sysconf reads a constant of the system.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(size).unwrap_or(4096)
    }

    fn max_fds() -> Option<u64> {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct it is given.
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
        ok.then_some(limit.rlim_cur)
    }

    /// Seconds since this process started: its start time in `/proc/self/stat` (clock ticks
    /// after boot) against the time since boot.
    fn uptime_seconds() -> Option<f64> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name (field 2) may hold spaces and parentheses: count from its end.
        let after_name = &stat[stat.rfind(')')? + 2..];
        let start_ticks: f64 = after_name.split_whitespace().nth(19)?.parse().ok()?;
        // SAFETY: sysconf reads a constant of the system.
        let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let since_boot: f64 = std::fs::read_to_string("/proc/uptime")
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        (ticks_per_second > 0.0).then(|| (since_boot - start_ticks / ticks_per_second).max(0.0))
    }

    fn disk_available(path: &Path) -> Option<u64> {
        crate::broker::free_space::free_octets(path)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub(super) fn read(_disk: &std::path::Path) -> super::Process {
        super::Process::default()
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn this_process_has_memory_descriptors_and_an_uptime() {
        let p = super::read(std::path::Path::new("."));
        assert!(p.resident_bytes.unwrap() > 0);
        assert!(p.open_fds.unwrap() > 0);
        assert!(p.max_fds.unwrap() >= p.open_fds.unwrap());
        assert!(p.uptime_seconds.unwrap() >= 0.0);
        assert!(p.disk_available_bytes.is_some());
    }
}
