//! The declarations agree with themselves: each setting's flag, environment variable and
//! config-file key follow from its name (the few historical exceptions listed here), the
//! config file takes exactly the declared keys, and every default means the same from the
//! command line and from the file.

use std::collections::BTreeSet;

use super::file::{top_level_keys, FileSettings};
use super::groups::Limits;
use super::test_support::{binary_defaults, from_file};
use super::{command, config_keys};

/// Names older than the rule, kept so that what worked keeps working:
/// (setting, flag, environment variable).
const EXCEPTIONS: &[(&str, &str, &str)] = &[
    (
        "timer_realtime_priority",
        "timer-rt-priority",
        "DWELLMQ_TIMER_RT_PRIORITY",
    ),
    ("log_level", "log-level", "DWELLMQ_LOG"),
];

/// The arguments that are settings (not help, version, or the `--check` mode).
fn settings() -> Vec<clap::Arg> {
    command()
        .get_arguments()
        .filter(|arg| !matches!(arg.get_id().as_str(), "help" | "version" | "check"))
        .cloned()
        .collect()
}

#[test]
fn each_flag_and_variable_follows_from_the_settings_name() {
    for arg in settings() {
        let id = arg.get_id().as_str();
        let (flag, variable) = match EXCEPTIONS.iter().find(|(name, ..)| *name == id) {
            Some((_, flag, variable)) => (flag.to_string(), variable.to_string()),
            None => (
                id.replace('_', "-"),
                format!("DWELLMQ_{}", id.to_ascii_uppercase()),
            ),
        };
        assert_eq!(arg.get_long(), Some(flag.as_str()), "{id}'s flag");
        let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
        assert_eq!(env, Some(variable), "{id}'s environment variable");
        assert!(arg.get_short().is_none(), "{id}: no one-letter flags");
        assert!(
            arg.get_help().is_some_and(|h| !h.to_string().is_empty()),
            "{id} has no help"
        );
    }
}

#[test]
fn each_config_key_is_the_settings_name() {
    for (id, key) in config_keys() {
        let expected = match id {
            "tls_listen" => "tls.listen".to_string(),
            _ if Limits::KEYS.iter().any(|(limit, _)| *limit == id) => format!("limits.{id}"),
            _ => id.to_string(),
        };
        assert_eq!(key, expected, "{id}'s key");
    }
    let flags: BTreeSet<String> = settings().iter().map(|a| a.get_id().to_string()).collect();
    let keyed: BTreeSet<String> = config_keys().iter().map(|(id, _)| id.to_string()).collect();
    let without_key: Vec<_> = flags.difference(&keyed).collect();
    assert_eq!(without_key, ["config"], "only --config has no key");
}

#[test]
fn the_file_takes_exactly_the_declared_keys() {
    let plain = |(_, key): &(&str, &str)| !key.is_empty() && !key.contains('.');
    for (_, key) in top_level_keys().iter().filter(|k| plain(k)) {
        if *key == "limits" {
            continue;
        }
        // A value of no setting's type: refused, and the message names the key (after the
        // file's path).
        let refused = from_file(&format!("{key} = {{ nothing = {{}} }}"));
        let error = refused
            .refusal()
            .unwrap_or_else(|| panic!("{key}: {refused:?}"));
        assert!(error.contains(&format!(".toml: {key}")), "{key}: {error}");
    }
    for (_, key) in Limits::KEYS {
        let error = FileSettings::parse(&format!("[limits]\n{key} = {{ nothing = {{}} }}"))
            .err()
            .unwrap_or_else(|| panic!("limits.{key} took a table of tables"));
        assert!(
            error.starts_with(&format!("limits.{key}: ")),
            "{key}: {error}"
        );
    }
    let error = FileSettings::parse("datadir = '/x'")
        .err()
        .expect("refused");
    assert!(
        error.starts_with(
            "unknown setting 'datadir' (known: listen, http, metrics, http_allowed_hosts, data_dir"
        ),
        "{error}"
    );
    let error = FileSettings::parse("[limits]\nframe = 1")
        .err()
        .expect("refused");
    assert!(
        error.starts_with("unknown setting 'limits.frame' (known: frame_max, channel_max"),
        "{error}"
    );
    for flag_only in ["config = 'other.toml'", "tls_listen = ['127.0.0.1:5671']"] {
        assert!(FileSettings::parse(flag_only).is_err(), "{flag_only}");
    }
}

/// A default as the config file writes it: a list as an array of strings, a number as a
/// TOML number, anything else as a string.
fn as_toml(arg: &clap::Arg, defaults: &[String]) -> String {
    let quoted: Vec<String> = defaults.iter().map(|v| format!("{v:?}")).collect();
    match defaults {
        _ if matches!(arg.get_action(), clap::ArgAction::Append) => {
            format!("[{}]", quoted.join(", "))
        }
        [number] if number.parse::<f64>().is_ok() => number.clone(),
        _ => quoted.join(", "),
    }
}

#[test]
fn every_default_means_the_same_in_the_file() {
    let keys: std::collections::HashMap<&str, String> = config_keys().into_iter().collect();
    let (mut top, mut limits) = (String::new(), String::from("[limits]\n"));
    for arg in settings() {
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect();
        let Some(key) = keys.get(arg.get_id().as_str()) else {
            continue;
        };
        // A switch's default (false) is no value.
        if defaults.is_empty() || !arg.get_action().takes_values() {
            continue;
        }
        let value = as_toml(&arg, &defaults);
        match key.strip_prefix("limits.") {
            Some(limit) => limits.push_str(&format!("{limit} = {value}\n")),
            None => top.push_str(&format!("{key} = {value}\n")),
        }
    }
    let file = format!("{top}{limits}");
    assert!(file.contains("frame_max = 131072"), "{file}");
    assert_eq!(from_file(&file).config(), binary_defaults(), "{file}");
}
