//! The help as printed: grouped, every setting with where it comes from, and laid out by hand
//! (clap wraps nothing without its terminal-size feature), so no line runs long or into the
//! next.

use super::help::tidy;
use super::{command, config_keys};

/// `--help` as the binary prints it.
fn long_help() -> String {
    tidy(&command().render_long_help().to_string())
}

/// `-h` as the binary prints it.
fn short_help() -> String {
    tidy(&command().render_help().to_string())
}

const HEADINGS: [&str; 5] = ["Listen:", "Storage:", "Limits:", "Test double:", "Other:"];

#[test]
fn the_long_help_is_grouped_in_order_and_lists_every_setting_once() {
    let help = long_help();
    let at: Vec<usize> = HEADINGS
        .iter()
        .map(|h| {
            help.find(&format!("\n{h}\n"))
                .unwrap_or_else(|| panic!("{h} missing: {help}"))
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{help}");
    assert!(
        !help.contains("\nOptions:\n"),
        "no ungrouped options: {help}"
    );
    let option_lines: Vec<&str> = help
        .lines()
        .map(str::trim_start)
        .filter(|line| line.starts_with('-'))
        .collect();
    for arg in command().get_arguments() {
        let flag = format!("--{}", arg.get_long().expect("every option is a --flag"));
        let listed = option_lines
            .iter()
            .filter(|line| line.split([' ', ',']).any(|word| word == flag))
            .count();
        assert_eq!(listed, 1, "{flag} listed {listed} times: {help}");
    }
    for (_, key) in config_keys() {
        assert!(help.contains(&format!("[config: {key}]")), "{key}: {help}");
    }
    assert!(
        help.contains("[env: DWELLMQ_LISTEN, a comma-separated list]"),
        "{help}"
    );
    assert!(
        help.contains("[default: 127.0.0.1:5672, [::1]:5672]"),
        "{help}"
    );
    assert!(help.contains("[config: limits.disk_free_limit]\n          [env: DWELLMQ_DISK_FREE_LIMIT]\n          [default: 50MB]"), "{help}");
}

#[test]
fn no_help_line_runs_long() {
    for (name, help) in [("-h", short_help()), ("--help", long_help())] {
        for line in help.lines() {
            assert!(
                line.chars().count() <= 100,
                "{name}: a line of {} columns: {line:?}",
                line.chars().count()
            );
        }
    }
}

#[test]
fn the_short_help_is_one_line_per_option() {
    let help = short_help();
    for heading in HEADINGS {
        assert!(help.contains(heading), "{heading}: {help}");
    }
    for line in help.lines().filter(|l| l.starts_with("  ")) {
        assert!(
            !line.contains("[env:") && !line.contains("[config:"),
            "{line}"
        );
    }
    let options = command().get_arguments().count();
    let option_lines = help
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .count();
    // Each option: its flag line and one line of help.
    let indented = help.lines().filter(|l| l.starts_with("          ")).count();
    assert_eq!(option_lines, options, "{help}");
    assert_eq!(indented, options, "{help}");
}

#[test]
fn the_help_ends_with_the_files_tables_and_the_stdout_contract() {
    let help = long_help();
    for text in [
        "[[users]]",
        "[[permissions]]",
        "[[policies]]",
        "[tls]",
        "replaces the default guest/guest",
        "then with --metrics\nthe metrics URL (http://ADDR/metrics)",
        "SIGTERM or Ctrl-C shuts down gracefully",
    ] {
        assert!(help.contains(text), "{text}: {help}");
    }
}

#[test]
fn the_readmes_excerpts_are_the_help() {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
    let help = long_help();
    let excerpts: Vec<&str> = readme
        .split("```text\n$ dwellmq --help\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap_or_default())
        .collect();
    assert!(!excerpts.is_empty(), "README.md shows no excerpt of --help");
    for excerpt in excerpts {
        for part in excerpt
            .split("...\n")
            .filter(|part| !part.trim().is_empty())
        {
            assert!(
                help.contains(part),
                "README.md's excerpt {part:?} is not in --help: {help}"
            );
        }
    }
}
