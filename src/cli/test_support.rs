//! What the CLI tests need to run the parser: arguments and environment in, an [`Outcome`] out.
//! The only test code that knows how the parser is called, so that the tests themselves
//! (above all `tests_enumeration.rs`) do not change when the parser does.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use dwellmq::BrokerConfig;

/// What the binary would do with a command line and an environment.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Start a broker with this configuration and log filter.
    Run(Box<BrokerConfig>, String),
    Help,
    Version,
    /// Refuse to start, with this message.
    Refused(String),
}

impl Outcome {
    /// The configuration, or a panic naming what happened instead.
    pub(super) fn config(self) -> BrokerConfig {
        match self {
            Outcome::Run(config, _) => *config,
            other => panic!("expected a configuration, got {other:?}"),
        }
    }

    pub(super) fn log_level(self) -> String {
        match self {
            Outcome::Run(_, level) => level,
            other => panic!("expected a configuration, got {other:?}"),
        }
    }

    /// Why the start was refused; `None` when it was not.
    pub(super) fn refusal(&self) -> Option<&str> {
        match self {
            Outcome::Refused(message) => Some(message),
            _ => None,
        }
    }

    /// Whether the start was refused, with a message saying why.
    pub(super) fn refused(&self) -> bool {
        matches!(self, Outcome::Refused(message) if !message.trim().is_empty())
    }
}

/// Parses `args` (without the program name) with exactly `env` as the environment.
///
/// clap reads the process's environment, so each call holds a lock while it sets the
/// variables it was given, removes every other `DWELLMQ_` variable, and parses. Every parse
/// in the tests comes through here, so none sees another's environment.
pub(super) fn outcome(args: &[&str], env: &[(&str, &str)]) -> Outcome {
    static ENVIRONMENT: Mutex<()> = Mutex::new(());
    let _held = ENVIRONMENT.lock().unwrap_or_else(PoisonError::into_inner);
    let ours: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| name.starts_with("DWELLMQ_"))
        .collect();
    for name in ours {
        std::env::remove_var(name);
    }
    for (name, value) in env {
        std::env::set_var(name, value);
    }
    let parsed = super::parse(std::iter::once("dwellmq").chain(args.iter().copied()));
    for (name, _) in env {
        std::env::remove_var(name);
    }
    match parsed {
        Ok(settings) => Outcome::Run(Box::new(settings.config), settings.log_level),
        Err(super::Stop::Clap(e)) => match e.kind() {
            clap::error::ErrorKind::DisplayHelp => Outcome::Help,
            clap::error::ErrorKind::DisplayVersion => Outcome::Version,
            _ => Outcome::Refused(e.to_string()),
        },
        Err(super::Stop::Invalid(message)) => Outcome::Refused(message),
    }
}

/// What the binary starts with when told nothing: on disk in `./dwellmq-data`, logging at
/// `info` (embedders' [`BrokerConfig::default`] keeps everything in memory).
pub(super) fn binary_defaults() -> BrokerConfig {
    BrokerConfig {
        data_dir: Some(PathBuf::from("./dwellmq-data")),
        ..BrokerConfig::default()
    }
}

/// A TOML file in the temp directory, removed when dropped.
pub(super) struct ConfigFile(PathBuf);

impl ConfigFile {
    pub(super) fn new(text: &str) -> ConfigFile {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("dwellmq-cli-test-{}-{n}.toml", std::process::id()));
        std::fs::write(&path, text).expect("temp config file written");
        ConfigFile(path)
    }

    pub(super) fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temp path")
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The configuration `--config` with `text` gives (no other flag, no environment).
pub(super) fn from_file(text: &str) -> Outcome {
    let file = ConfigFile::new(text);
    outcome(&["--config", file.path()], &[])
}
