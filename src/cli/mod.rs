//! The `dwellmq` binary's command line, environment variables and TOML config file.
//!
//! Every setting is declared once, in `groups/`: its flag, environment variable, default and
//! help as clap attributes, its config-file key beside them. clap parses the command line and
//! the environment; `file.rs` reads the config file into the same groups; `resolve.rs` layers
//! them (defaults < `--config FILE` < environment < flags) into a `BrokerConfig`.

pub(crate) mod console;
mod declare;
mod file;
mod groups;
mod help;
mod resolve;
mod sizes;
mod tables;
mod values;

use std::collections::HashMap;
use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use dwellmq::BrokerConfig;

use groups::{Access, Limits, Listen, Misc, Storage, TestDouble};

/// The command line, as clap reads it (flags and environment); see `groups/`.
#[derive(clap::Parser, Debug)]
#[command(
    name = "dwellmq",
    version,
    about = help::ABOUT,
    after_help = help::AFTER_HELP,
    after_long_help = help::AFTER_LONG_HELP,
    // As before clap: a flag given twice takes its last value.
    args_override_self = true,
    // Each option's help under it: no column as wide as the longest flag.
    next_line_help = true,
    // Help and version come last, under "Other".
    disable_help_flag = true,
    disable_version_flag = true
)]
pub(crate) struct Cli {
    #[command(flatten, next_help_heading = "Listen")]
    listen: Listen,
    #[command(flatten, next_help_heading = "Storage")]
    storage: Storage,
    #[command(flatten, next_help_heading = "Limits")]
    limits: Limits,
    #[command(flatten, next_help_heading = "Test double")]
    test_double: TestDouble,
    #[command(flatten, next_help_heading = "Other")]
    misc: Misc,
    /// The config file's tables, which have no flags.
    #[command(flatten)]
    access: Access,
    /// Report on the data directory (format, counts, integrity) without starting
    ///
    /// Opens the store read-only: nothing is written, repaired or upgraded. Exits 0
    /// when the directory is healthy, 1 otherwise.
    #[arg(long, help_heading = "Storage", verbatim_doc_comment)]
    check: bool,
    /// Print help (-h: one line per option; --help: all of it)
    #[arg(short, long, action = clap::ArgAction::Help, help_heading = "Other")]
    help: Option<bool>,
    /// Print the version
    #[arg(short = 'V', long, action = clap::ArgAction::Version, help_heading = "Other")]
    version: Option<bool>,
}

/// A resolved configuration plus the log filter.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) config: BrokerConfig,
    pub(crate) log_level: String,
    /// Report on the data directory instead of serving (`--check`).
    pub(crate) check: bool,
}

/// Why the binary does not start.
#[derive(Debug)]
pub(crate) enum Stop {
    /// clap's answer: help, the version, or a usage error (`Error::exit_code` says which).
    Clap(clap::Error),
    /// A setting that parsed but cannot be used, or the config file.
    Invalid(String),
}

/// Where a setting's value came from, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Source {
    Default,
    File,
    Environment,
    CommandLine,
}

/// The binary's command. `-h` shows each option's first help line; `--help` all of it, then
/// where else the setting comes from: its config-file key, its environment variable (by name:
/// the help does not change with the environment) and its default.
pub(crate) fn command() -> clap::Command {
    let keys: HashMap<&str, String> = config_keys().into_iter().collect();
    Cli::command().mut_args(|arg| {
        let mut sources = Vec::new();
        if let Some(key) = keys.get(arg.get_id().as_str()) {
            sources.push(format!("[config: {key}]"));
        }
        if let Some(name) = arg.get_env() {
            let list = match arg.get_value_delimiter() {
                Some(',') => ", a comma-separated list",
                _ => "",
            };
            sources.push(format!("[env: {}{list}]", name.to_string_lossy()));
        }
        // A switch's default (false) goes without saying.
        let takes_values = arg.get_action().takes_values();
        let defaults: Vec<_> = arg
            .get_default_values()
            .iter()
            .map(|d| d.to_string_lossy())
            .collect();
        if takes_values && !defaults.is_empty() {
            sources.push(format!("[default: {}]", defaults.join(", ")));
        }
        let long_help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|help| format!("{help}\n\n{}", sources.join("\n")));
        let arg = arg.hide_env(true).hide_default_value(takes_values);
        match long_help {
            Some(long_help) if !sources.is_empty() => arg.long_help(long_help),
            _ => arg,
        }
    })
}

/// Each flag's setting and its config-file key (`limits.frame_max` for a table's), for the
/// settings the file takes.
pub(crate) fn config_keys() -> Vec<(&'static str, String)> {
    let top = [Listen::KEYS, Storage::KEYS, TestDouble::KEYS, Misc::KEYS].concat();
    let limits = Limits::KEYS
        .iter()
        .map(|(id, key)| (*id, format!("limits.{key}")));
    top.into_iter()
        .map(|(id, key)| (id, key.to_string()))
        .chain(limits)
        .filter(|(_, key)| !key.is_empty())
        .collect()
}

/// Parses `args` (the program name first) and the environment, reads the config file if one
/// is named, and resolves the settings.
pub(crate) fn parse<I, T>(args: I) -> Result<Settings, Stop>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = command().try_get_matches_from(args).map_err(Stop::Clap)?;
    let cli = Cli::from_arg_matches(&matches).map_err(Stop::Clap)?;
    let file = match &cli.misc.config {
        Some(path) => file::FileSettings::read(path).map_err(Stop::Invalid)?,
        None => file::FileSettings::default(),
    };
    let source = |id: &str| {
        // An id clap does not know (a file-only setting) has no source but the file.
        if !matches.ids().any(|known| known.as_str() == id) {
            return Source::Default;
        }
        match matches.value_source(id) {
            Some(ValueSource::CommandLine) => Source::CommandLine,
            Some(ValueSource::EnvVariable) => Source::Environment,
            _ => Source::Default,
        }
    };
    let check = cli.check;
    let mut settings = resolve::resolve(cli, file, &source).map_err(Stop::Invalid)?;
    settings.check = check;
    Ok(settings)
}

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests_declarations;
#[cfg(test)]
mod tests_enumeration;
#[cfg(test)]
mod tests_enumeration_file;
#[cfg(test)]
mod tests_flags;
#[cfg(test)]
mod tests_help;
