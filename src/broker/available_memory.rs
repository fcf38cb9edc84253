//! How much memory the process may use, for a relative memory watermark: the limit of its
//! cgroup (v2 `memory.max`, v1 `memory.limit_in_bytes`, the lowest on the way up to the
//! hierarchy's root) if it has one below the machine's RAM, else the RAM (`/proc/meminfo`, or
//! `sysconf` where there is no `/proc`).
//!
//! Detection reads files through a function so that the tests feed it text instead of the
//! machine they run on.

use std::path::{Path, PathBuf};

use crate::config::MemoryWatermark;

/// What RabbitMQ assumes when it cannot tell the machine's memory.
pub(crate) const UNKNOWN_MEMORY: u64 = 1 << 30;

/// The memory available to the process, and where the figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AvailableMemory {
    pub(crate) bytes: u64,
    pub(crate) source: MemorySource,
}

impl AvailableMemory {
    /// `watermark` in octets for this much memory. An absolute size is capped at the memory
    /// available only when that is known: a guess must not lower what was asked for.
    pub(crate) fn watermark(self, watermark: MemoryWatermark) -> u64 {
        match watermark {
            MemoryWatermark::Absolute(octets) if self.source == MemorySource::Unknown => octets,
            _ => watermark.resolve(self.bytes),
        }
    }
}

/// Where [`AvailableMemory`] was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemorySource {
    CgroupV2,
    CgroupV1,
    /// `MemTotal` of `/proc/meminfo`.
    MemInfo,
    /// `sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE)`.
    Sysconf,
    /// Nothing could be read: [`UNKNOWN_MEMORY`] is assumed.
    Unknown,
}

impl std::fmt::Display for MemorySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemorySource::CgroupV2 => "cgroup v2 memory.max",
            MemorySource::CgroupV1 => "cgroup v1 memory.limit_in_bytes",
            MemorySource::MemInfo => "/proc/meminfo",
            MemorySource::Sysconf => "sysconf",
            MemorySource::Unknown => "unknown, assumed",
        })
    }
}

/// The memory available to this process on this machine.
pub(crate) fn detect() -> AvailableMemory {
    detect_with(&|path| std::fs::read_to_string(path).ok(), sysconf_memory())
}

/// [`detect`] with files read by `read` and `sysconf` as the physical memory `sysconf` reports.
pub(crate) fn detect_with(
    read: &dyn Fn(&Path) -> Option<String>,
    sysconf: Option<u64>,
) -> AvailableMemory {
    let physical = read(Path::new("/proc/meminfo"))
        .and_then(|text| parse_meminfo_total(&text))
        .map(|bytes| (bytes, MemorySource::MemInfo))
        .or(sysconf.map(|bytes| (bytes, MemorySource::Sysconf)));
    let cgroup = cgroup_limit(read);
    let (bytes, source) = match (physical, cgroup) {
        (Some(physical), Some(cgroup)) if cgroup.0 < physical.0 => cgroup,
        (Some(physical), _) => physical,
        (None, Some(cgroup)) => cgroup,
        (None, None) => (UNKNOWN_MEMORY, MemorySource::Unknown),
    };
    AvailableMemory { bytes, source }
}

#[cfg(target_os = "linux")]
fn sysconf_memory() -> Option<u64> {
    // SAFETY: sysconf reads system constants and has no memory-safety preconditions.
    let (pages, page_size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let pages = u64::try_from(pages).ok()?;
    let page_size = u64::try_from(page_size).ok()?;
    pages.checked_mul(page_size).filter(|&b| b > 0)
}

#[cfg(not(target_os = "linux"))]
fn sysconf_memory() -> Option<u64> {
    None
}

/// `MemTotal` of `/proc/meminfo`, in octets.
pub(crate) fn parse_meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut fields = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    let unit = match fields.next() {
        Some("kB") => 1024,
        None => 1,
        Some(_) => return None,
    };
    value.checked_mul(unit).filter(|&b| b > 0)
}

/// A cgroup memory limit file's value: `None` for no limit (`max` in v2, a value near
/// `i64::MAX` in v1, which rounds it down to a page) or unreadable text.
pub(crate) fn parse_limit(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    text.parse::<u64>().ok().filter(|&b| b < 1 << 62)
}

/// The lowest cgroup memory limit of this process, v2 or v1, with its source.
fn cgroup_limit(read: &dyn Fn(&Path) -> Option<String>) -> Option<(u64, MemorySource)> {
    let membership = read(Path::new("/proc/self/cgroup"))?;
    let mounts = read(Path::new("/proc/self/mountinfo"))?;
    let mut lowest: Option<(u64, MemorySource)> = None;
    for (version, path) in memory_cgroups(&membership) {
        let (file, source) = match version {
            CgroupVersion::V2 => ("memory.max", MemorySource::CgroupV2),
            CgroupVersion::V1 => ("memory.limit_in_bytes", MemorySource::CgroupV1),
        };
        for (root, mount_point) in cgroup_mounts(&mounts, version) {
            let Some(dir) = cgroup_dir(&root, &mount_point, &path) else {
                continue;
            };
            // A parent's limit binds the children too: the lowest on the way up counts.
            let limit = dir
                .ancestors()
                .take_while(|d| d.starts_with(&mount_point))
                .filter_map(|d| read(&d.join(file)).and_then(|t| parse_limit(&t)))
                .min();
            if let Some(limit) = limit {
                if lowest.is_none_or(|(l, _)| limit < l) {
                    lowest = Some((limit, source));
                }
            }
        }
    }
    lowest
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CgroupVersion {
    V1,
    V2,
}

/// The cgroups of `/proc/self/cgroup` that can hold a memory limit: the v2 one (`0::/path`)
/// and the v1 one of the `memory` controller (`4:memory:/path`).
fn memory_cgroups(membership: &str) -> Vec<(CgroupVersion, String)> {
    membership
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            if id == "0" && controllers.is_empty() {
                Some((CgroupVersion::V2, path.to_string()))
            } else if controllers.split(',').any(|c| c == "memory") {
                Some((CgroupVersion::V1, path.to_string()))
            } else {
                None
            }
        })
        .collect()
}

/// (root within the hierarchy, mount point) of every mount of a `version` hierarchy in
/// `/proc/self/mountinfo` (for v1, only those with the memory controller).
fn cgroup_mounts(mountinfo: &str, version: CgroupVersion) -> Vec<(String, PathBuf)> {
    mountinfo
        .lines()
        .filter_map(|line| {
            // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
            let (before, after) = line.split_once(" - ")?;
            let mut fields = before.split(' ');
            let root = fields.nth(3)?;
            let mount_point = fields.next()?;
            let mut after = after.split(' ');
            let fs_type = after.next()?;
            let super_options = after.nth(1).unwrap_or("");
            let wanted = match version {
                CgroupVersion::V2 => fs_type == "cgroup2",
                CgroupVersion::V1 => {
                    fs_type == "cgroup" && super_options.split(',').any(|o| o == "memory")
                }
            };
            wanted.then(|| (unescape(root), PathBuf::from(unescape(mount_point))))
        })
        .collect()
}

/// The directory of cgroup `path` under a mount of its hierarchy that shows `root` there.
/// `None` when the cgroup lies outside what the mount shows.
fn cgroup_dir(root: &str, mount_point: &Path, path: &str) -> Option<PathBuf> {
    let relative = if root == "/" {
        path
    } else {
        let rest = path.strip_prefix(root)?;
        if !rest.is_empty() && !rest.starts_with('/') {
            return None;
        }
        rest
    };
    Some(mount_point.join(relative.trim_start_matches('/')))
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo` octal.
fn unescape(field: &str) -> String {
    let mut out = Vec::with_capacity(field.len());
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') << 6 | (d[1] - b'0') << 3 | (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const MEMINFO: &str = "MemTotal:       24683584 kB\nMemFree:         1721544 kB\n";

    /// A machine made of `files`.
    fn detect_on(files: &[(&str, &str)], sysconf: Option<u64>) -> AvailableMemory {
        let files: HashMap<PathBuf, String> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect();
        detect_with(&|path| files.get(path).cloned(), sysconf)
    }

    #[test]
    fn meminfo_and_limit_files_parse() {
        assert_eq!(parse_meminfo_total(MEMINFO), Some(24_683_584 * 1024));
        assert_eq!(parse_meminfo_total("MemFree: 1 kB\n"), None);
        assert_eq!(parse_meminfo_total("MemTotal: lots kB\n"), None);
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("536870912\n"), Some(512 << 20));
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("garbage"), None);
    }

    #[test]
    fn physical_memory_without_cgroups() {
        let m = detect_on(&[("/proc/meminfo", MEMINFO)], Some(1));
        assert_eq!(m.bytes, 24_683_584 * 1024);
        assert_eq!(m.source, MemorySource::MemInfo);
        let m = detect_on(&[], Some(8 << 30));
        assert_eq!((m.bytes, m.source), (8 << 30, MemorySource::Sysconf));
        let m = detect_on(&[], None);
        assert_eq!((m.bytes, m.source), (UNKNOWN_MEMORY, MemorySource::Unknown));
    }

    /// A container (cgroup namespace): the process sees its own cgroup as `/`.
    #[test]
    fn a_cgroup_v2_limit_below_ram_wins() {
        let files = [
            ("/proc/meminfo", MEMINFO),
            ("/proc/self/cgroup", "0::/\n"),
            (
                "/proc/self/mountinfo",
                "25 30 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n",
            ),
            ("/sys/fs/cgroup/memory.max", "536870912\n"),
        ];
        let m = detect_on(&files, None);
        assert_eq!((m.bytes, m.source), (512 << 20, MemorySource::CgroupV2));
    }

    /// A systemd service: the limit may sit on the slice above the process's own cgroup.
    #[test]
    fn the_lowest_cgroup_v2_limit_up_the_hierarchy_counts() {
        let files = [
            ("/proc/meminfo", MEMINFO),
            ("/proc/self/cgroup", "0::/system.slice/dwellmq.service\n"),
            (
                "/proc/self/mountinfo",
                "25 30 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
            ),
            (
                "/sys/fs/cgroup/system.slice/dwellmq.service/memory.max",
                "max\n",
            ),
            ("/sys/fs/cgroup/system.slice/memory.max", "1073741824\n"),
        ];
        let m = detect_on(&files, None);
        assert_eq!((m.bytes, m.source), (1 << 30, MemorySource::CgroupV2));
        // No limit anywhere: the RAM.
        let unlimited = [files[0], files[1], files[2], (files[3].0, "max\n")];
        assert_eq!(detect_on(&unlimited, None).source, MemorySource::MemInfo);
    }

    /// Docker on cgroup v1 without a cgroup namespace: the mount's root is the container's
    /// cgroup.
    #[test]
    fn a_cgroup_v1_memory_limit_is_found_through_the_mount_root() {
        let files = [
            ("/proc/meminfo", MEMINFO),
            (
                "/proc/self/cgroup",
                "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n",
            ),
            (
                "/proc/self/mountinfo",
                "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
                 35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n",
            ),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "268435456\n"),
        ];
        let m = detect_on(&files, None);
        assert_eq!((m.bytes, m.source), (256 << 20, MemorySource::CgroupV1));
    }

    /// This machine's layout: v1 memory controller, unlimited, beside an empty unified tree.
    #[test]
    fn an_unlimited_hybrid_layout_falls_back_to_ram() {
        let files = [
            ("/proc/meminfo", MEMINFO),
            ("/proc/self/cgroup", "4:memory:/process_api/d10\n0::/\n"),
            (
                "/proc/self/mountinfo",
                "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                 41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
            ),
            (
                "/sys/fs/cgroup/memory/process_api/d10/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
        ];
        let m = detect_on(&files, None);
        assert_eq!(
            (m.bytes, m.source),
            (24_683_584 * 1024, MemorySource::MemInfo)
        );
    }

    #[test]
    fn a_cgroup_limit_above_ram_does_not_count() {
        let files = [
            ("/proc/meminfo", "MemTotal: 1048576 kB\n"),
            ("/proc/self/cgroup", "0::/big\n"),
            (
                "/proc/self/mountinfo",
                "1 2 0:1 / /cg rw - cgroup2 none rw\n",
            ),
            ("/cg/big/memory.max", "4294967296\n"),
        ];
        assert_eq!(detect_on(&files, None).bytes, 1 << 30);
        // Without /proc/meminfo or sysconf, the cgroup's limit is all there is to go by.
        assert_eq!(detect_on(&files[1..], None).bytes, 4 << 30);
    }

    #[test]
    fn cgroups_outside_the_mount_and_escaped_paths() {
        assert_eq!(cgroup_dir("/docker/abc", Path::new("/m"), "/other"), None);
        assert_eq!(
            cgroup_dir("/docker/abc", Path::new("/m"), "/docker/abcd"),
            None
        );
        assert_eq!(
            cgroup_dir("/docker/abc", Path::new("/m"), "/docker/abc/x"),
            Some(PathBuf::from("/m/x"))
        );
        assert_eq!(unescape(r"/sys/fs/my\040cgroup"), "/sys/fs/my cgroup");
        assert_eq!(unescape(r"a\\b\0"), r"a\\b\0");
    }

    #[test]
    fn watermarks_in_octets() {
        let known = AvailableMemory {
            bytes: 1000,
            source: MemorySource::CgroupV2,
        };
        assert_eq!(known.watermark(MemoryWatermark::DEFAULT), 400);
        assert_eq!(known.watermark(MemoryWatermark::Absolute(5000)), 1000);
        let guessed = AvailableMemory {
            bytes: UNKNOWN_MEMORY,
            source: MemorySource::Unknown,
        };
        assert_eq!(
            guessed.watermark(MemoryWatermark::Absolute(5 << 30)),
            5 << 30
        );
        assert_eq!(guessed.watermark(MemoryWatermark::Relative(0.5)), 512 << 20);
    }

    /// Whatever this machine is, detection yields a usable figure.
    #[test]
    fn detection_on_this_machine_yields_memory() {
        let m = detect();
        assert!(m.bytes > 0, "{m:?}");
    }
}
