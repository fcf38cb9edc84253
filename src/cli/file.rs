//! The config file (`--config FILE`, TOML): read into the same setting groups the command line
//! fills, so that the two layer field by field.

use std::path::Path;

use serde::Deserialize;

use super::groups::{Access, Limits, Listen, Misc, Storage, TestDouble};

/// The settings a config file gave; `None` for those it did not.
#[derive(Default)]
pub(crate) struct FileSettings {
    /// The file's path, which names it in messages.
    pub(crate) path: Option<std::path::PathBuf>,
    pub(crate) listen: Listen,
    pub(crate) storage: Storage,
    pub(crate) limits: Limits,
    pub(crate) test_double: TestDouble,
    pub(crate) misc: Misc,
    pub(crate) access: Access,
}

impl FileSettings {
    pub(crate) fn read(path: &Path) -> Result<FileSettings, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        let settings =
            FileSettings::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(FileSettings {
            path: Some(path.to_path_buf()),
            ..settings
        })
    }

    pub(crate) fn parse(text: &str) -> Result<FileSettings, String> {
        let mut table: toml::Table = text.parse().map_err(|e| format!("{e}"))?;
        let limits = match table.remove("limits") {
            None => Limits::default(),
            Some(toml::Value::Table(mut limits)) => {
                let group = Limits::from_table(&mut limits, "limits.")?;
                refuse_unknown(&limits, "limits.", Limits::KEYS)?;
                group
            }
            Some(_) => return Err("limits must be a table".into()),
        };
        let settings = FileSettings {
            path: None,
            listen: Listen::from_table(&mut table, "")?,
            storage: Storage::from_table(&mut table, "")?,
            limits,
            test_double: TestDouble::from_table(&mut table, "")?,
            misc: Misc::from_table(&mut table, "")?,
            access: Access::from_table(&mut table, "")?,
        };
        refuse_unknown(&table, "", &top_level_keys())?;
        Ok(settings)
    }
}

/// The keys a config file takes at its top level.
pub(crate) fn top_level_keys() -> Vec<(&'static str, &'static str)> {
    let groups = [
        Listen::KEYS,
        Storage::KEYS,
        TestDouble::KEYS,
        Misc::KEYS,
        Access::KEYS,
    ];
    let mut keys: Vec<_> = groups.concat();
    keys.push(("limits", "limits"));
    keys
}

/// Takes `key` out of `table` as a `T`. `None` when absent, and for keys that are not this
/// table's: "" (a flag the file does not take) or a dotted key (read by the table it names).
pub(crate) fn take<T: for<'de> Deserialize<'de>>(
    table: &mut toml::Table,
    key: &str,
    prefix: &str,
) -> Result<Option<T>, String> {
    if key.is_empty() || key.contains('.') {
        return Ok(None);
    }
    let Some(value) = table.remove(key) else {
        return Ok(None);
    };
    T::deserialize(value)
        .map(Some)
        .map_err(|e| format!("{prefix}{key}: {}", e.message().trim_end()))
}

/// What is left in `table` once every known key was taken is a mistake (a misspelling, or a
/// key of another table): say so, and which keys there are.
fn refuse_unknown(
    table: &toml::Table,
    prefix: &str,
    known: &[(&'static str, &'static str)],
) -> Result<(), String> {
    let Some(unknown) = table.keys().next() else {
        return Ok(());
    };
    let known: Vec<&str> = known
        .iter()
        .map(|(_, key)| *key)
        .filter(|key| !key.is_empty() && !key.contains('.'))
        .collect();
    Err(format!(
        "unknown setting '{prefix}{unknown}' (known: {})",
        known.join(", ")
    ))
}
