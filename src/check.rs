//! `dwellmq --data-dir D --check`: what a data directory holds, without starting the broker
//! and without writing to it: its store format and whether this build opens it (upgrading it
//! or not), whether it needs a repair, the integrity of its pages and records, and counts of
//! everything durable.

use std::fmt;
use std::path::{Path, PathBuf};

use dwellmq_codec::FieldTable;
use dwellmq_store::{Inspection, Opens, PageCheck, StoreError, Tally};

/// What [`check_data_dir`] found.
#[derive(Debug, Clone)]
pub struct CheckReport {
    /// The data directory.
    pub data_dir: PathBuf,
    /// What the store found, record by record.
    pub inspection: Inspection,
    /// Definitions whose arguments the broker could not read back (they would be kept on disk
    /// and not restored).
    pub unreadable_definitions: Vec<String>,
}

/// Why a directory could not be checked at all.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The store could not be looked at: missing, in use by a running broker, foreign, or
    /// unreadable (the error names the file).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Looks at the store in `data_dir` without writing anything there (never repairs, never
/// upgrades: it says when an open would). Fails when the directory is in use by a running
/// broker, holds no store, or holds something that is not one.
pub fn check_data_dir(data_dir: &Path) -> Result<CheckReport, CheckError> {
    let inspection = dwellmq_store::inspect(data_dir)?;
    let unreadable_definitions = inspection
        .tally
        .as_ref()
        .map(unreadable_definitions)
        .unwrap_or_default();
    Ok(CheckReport {
        data_dir: data_dir.to_path_buf(),
        inspection,
        unreadable_definitions,
    })
}

impl CheckReport {
    /// Whether this build opens the store (as it is or upgrading it) and nothing is wrong with
    /// it: its pages verify and every record decodes and agrees with its counts.
    pub fn is_healthy(&self) -> bool {
        let i = &self.inspection;
        i.opens != Opens::Refused
            && i.pages == PageCheck::Verified
            && i.problems.is_empty()
            && self.unreadable_definitions.is_empty()
    }
}

/// Arguments and policy definitions are the broker's field tables: each must decode.
fn unreadable_definitions(tally: &Tally) -> Vec<String> {
    let d = &tally.definitions;
    let readable = |bytes: &[u8]| FieldTable::from_encoded(bytes).is_some();
    let mut out = Vec::new();
    for x in d.exchanges.iter().filter(|x| !readable(&x.arguments)) {
        out.push(format!(
            "exchange '{}' in vhost '{}': arguments",
            x.name, x.vhost
        ));
    }
    for q in d.queues.iter().filter(|q| !readable(&q.arguments)) {
        out.push(format!(
            "queue '{}' in vhost '{}': arguments",
            q.name, q.vhost
        ));
    }
    for b in d.bindings.iter().filter(|b| !readable(&b.arguments)) {
        out.push(format!(
            "binding '{}' -> '{}' in vhost '{}': arguments",
            b.source, b.destination, b.vhost
        ));
    }
    for p in d.policies.iter().filter(|p| !readable(&p.definition)) {
        out.push(format!(
            "policy '{}' in vhost '{}': definition",
            p.name, p.vhost
        ));
    }
    out
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inspection;
        writeln!(f, "data directory {}", self.data_dir.display())?;
        writeln!(f, "store file {}", i.path.display())?;
        let (oldest, newest) = (dwellmq_store::OLDEST_FORMAT, dwellmq_store::FORMAT_VERSION);
        let reads = format!("this dwellmq reads formats {oldest} to {newest}");
        match &i.opens {
            Opens::AsIs => writeln!(f, "store format {}: current, {reads}", i.format)?,
            Opens::Upgrading(steps) => {
                writeln!(
                    f,
                    "store format {}: {reads}; its next start upgrades it to format {newest} \
                     in one commit:",
                    i.format
                )?;
                for step in steps {
                    writeln!(f, "  - {step}")?;
                }
            }
            Opens::Refused => writeln!(
                f,
                "store format {}: NOT READABLE, {reads}; a start refuses it and leaves it \
                 untouched",
                i.format
            )?,
        }
        if i.needs_repair {
            writeln!(
                f,
                "shutdown: not clean; the next start repairs redb's bookkeeping first"
            )?;
        } else {
            writeln!(f, "shutdown: clean")?;
        }
        match &i.pages {
            PageCheck::Verified => writeln!(f, "pages: every page verified")?,
            PageCheck::Repaired => writeln!(
                f,
                "pages: verified after redb repaired its bookkeeping (in memory only)"
            )?,
            PageCheck::Failed(why) => writeln!(f, "pages: CHECK FAILED: {why}")?,
        }
        if let Some(tally) = &i.tally {
            write_tally(f, tally)?;
        }
        let problems: Vec<&String> = i
            .problems
            .iter()
            .chain(self.unreadable_definitions.iter())
            .collect();
        if problems.is_empty() {
            writeln!(
                f,
                "records: every record decodes and agrees with its counts"
            )
        } else {
            writeln!(f, "records: {} PROBLEMS", problems.len())?;
            problems
                .iter()
                .try_for_each(|problem| writeln!(f, "  - {problem}"))
        }
    }
}

fn write_tally(f: &mut fmt::Formatter<'_>, t: &Tally) -> fmt::Result {
    let d = &t.definitions;
    writeln!(
        f,
        "definitions: {} vhosts, {} users ({} deleted at runtime), {} permissions ({} cleared \
         at runtime), {} exchanges, {} queues, {} bindings, {} policies",
        d.vhosts.len(),
        d.users.len(),
        t.users_deleted,
        d.permissions.len(),
        t.permissions_cleared,
        d.exchanges.len(),
        d.queues.len(),
        d.bindings.len(),
        d.policies.len()
    )?;
    let stored: u64 = t.queues.iter().map(|q| q.messages).sum();
    writeln!(f, "persistent messages: {stored}")?;
    for q in t
        .queues
        .iter()
        .filter(|q| q.messages > 0 || q.name.is_none())
    {
        let name = match &q.name {
            Some((vhost, name)) => format!("queue '{name}' in vhost '{vhost}'"),
            None => format!("queue id {} (no queue definition)", q.id),
        };
        write!(f, "  {name}: {} messages, {} octets", q.messages, q.bytes)?;
        if q.delivered > 0 {
            write!(f, ", {} delivered before", q.delivered)?;
        }
        if q.kept_dead_letters > 0 {
            write!(
                f,
                ", {} kept after at-least-once dead-lettering",
                q.kept_dead_letters
            )?;
        }
        writeln!(f)?;
    }
    let held: u64 = t.held.iter().map(|h| h.messages).sum();
    writeln!(f, "held delayed messages: {held}")?;
    for h in &t.held {
        let name = h.exchange.as_deref().unwrap_or("(unnamed)");
        write!(
            f,
            "  exchange '{name}' in vhost '{}': {} messages, {} octets",
            h.vhost, h.messages, h.bytes
        )?;
        if let Some(due) = h.first_due_ms {
            write!(f, ", first due {}", crate::rfc3339::format(due))?;
        }
        writeln!(f)?;
    }
    if t.spilled > 0 {
        writeln!(
            f,
            "spilled transient messages: {} (dropped at the next start)",
            t.spilled
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch data directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = std::env::temp_dir()
                .join(format!("dwellmq-check-{name}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        /// A copy of one of the store crate's fixtures (written by earlier formats' code).
        fn fixture(name: &str) -> Scratch {
            let scratch = Scratch::new(name);
            let from = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("crates/dwellmq-store/tests/fixtures")
                .join(name)
                .join(dwellmq_store::DB_FILE);
            std::fs::copy(from, scratch.file()).unwrap();
            scratch
        }

        fn file(&self) -> PathBuf {
            self.0.join(dwellmq_store::DB_FILE)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const FIXTURES: [(&str, u32); 5] = [
        ("format-2-first-layout", 2),
        ("format-2", 2),
        ("format-3", 3),
        ("format-4-without-queue-counts", 4),
        ("format-4", 4),
    ];

    #[test]
    fn every_fixture_is_reported_healthy_with_its_format_and_counts_and_left_as_it_was() {
        for (name, format) in FIXTURES {
            let dir = Scratch::fixture(name);
            let before = std::fs::read(dir.file()).unwrap();
            let report = check_data_dir(&dir.0).expect("checked");
            assert!(
                std::fs::read(dir.file()).unwrap() == before,
                "{name}: written"
            );
            assert!(report.is_healthy(), "{name}:\n{report}");
            let text = report.to_string();
            assert!(text.contains(&format!("store format {format}: ")), "{text}");
            let upgrades = format < dwellmq_store::FORMAT_VERSION;
            assert_eq!(
                text.contains("its next start upgrades it"),
                upgrades,
                "{text}"
            );
            for line in [
                "definitions: 2 vhosts, 2 users (1 deleted at runtime), 3 permissions (1 \
                 cleared at runtime), 5 exchanges, 6 queues, 7 bindings, 2 policies",
                "persistent messages: 11",
                "queue 'tasks' in vhost '/': 5 messages, 3180 octets, 2 delivered before",
                "held delayed messages: 9",
                "exchange 'reminders' in vhost '/': 7 messages",
                "first due 2030-03-17T17:47:40.000Z",
                "shutdown: clean",
                "pages: every page verified",
                "records: every record decodes and agrees with its counts",
            ] {
                assert!(text.contains(line), "{name}: no '{line}' in\n{text}");
            }
            let kept = text.contains("1 kept after at-least-once dead-lettering");
            assert_eq!(kept, format >= 3, "{name}:\n{text}");
        }
    }

    #[test]
    fn a_fresh_store_is_reported_empty_and_current() {
        let dir = Scratch::new("fresh");
        dwellmq_store::Store::open(&dir.0).unwrap().close();
        let report = check_data_dir(&dir.0).expect("checked");
        assert!(report.is_healthy(), "{report}");
        let text = report.to_string();
        assert!(
            text.contains(&format!(
                "store format {}: current",
                dwellmq_store::FORMAT_VERSION
            )),
            "{text}"
        );
        assert!(text.contains("persistent messages: 0"), "{text}");
        assert!(text.contains("held delayed messages: 0"), "{text}");
    }

    #[test]
    fn a_directory_in_use_or_without_a_store_cannot_be_checked() {
        let dir = Scratch::new("in-use");
        let store = dwellmq_store::Store::open(&dir.0).unwrap();
        let err = check_data_dir(&dir.0).expect_err("in use");
        assert!(
            err.to_string().contains("in use by another dwellmq"),
            "{err}"
        );
        store.close();
        let empty = Scratch::new("empty");
        assert!(check_data_dir(&empty.0).is_err());
        assert!(!empty.file().exists());
    }
}
