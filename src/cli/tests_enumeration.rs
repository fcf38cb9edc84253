//! Every flag, environment variable and config-file key the binary accepted before its parser
//! moved to clap, each with what it sets in the resulting [`BrokerConfig`], and the precedence
//! between them (defaults < file < environment < flags). Written against the hand-written
//! parser and kept as it was: what works here keeps working. The config file's keys are in
//! `tests_enumeration_file.rs`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use dwellmq::{BrokerConfig, ClockConfig, ExpiryMode};

use super::test_support::{binary_defaults, from_file, outcome, ConfigFile, Outcome};

pub(super) fn addr(text: &str) -> SocketAddr {
    text.parse().expect("a socket address")
}

/// The binary's defaults with `change` made.
pub(super) fn defaults_with(change: impl FnOnce(&mut BrokerConfig)) -> BrokerConfig {
    let mut config = binary_defaults();
    change(&mut config);
    config
}

fn config(args: &[&str], env: &[(&str, &str)]) -> BrokerConfig {
    outcome(args, env).config()
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A manual clock that starts "now": between `before` and the time of the check.
pub(super) fn assert_manual_now(config: &BrokerConfig, before: u64, what: &str) {
    match config.clock {
        ClockConfig::Manual { start_ms } => {
            assert!(
                (before..=now_ms()).contains(&start_ms),
                "{what}: start {start_ms} is not now"
            )
        }
        other => panic!("{what}: expected a manual clock, got {other:?}"),
    }
}

#[test]
fn nothing_given_is_the_binarys_defaults() {
    let outcome = outcome(&[], &[]);
    let Outcome::Run(config, level) = outcome else {
        panic!("expected a configuration, got {outcome:?}")
    };
    assert_eq!(*config, binary_defaults());
    assert_eq!(level, "info");
    assert_eq!(
        config.listen,
        vec![addr("127.0.0.1:5672"), addr("[::1]:5672")]
    );
    assert_eq!(config.data_dir, Some(PathBuf::from("./dwellmq-data")));
    assert_eq!(config.http, Some(addr("127.0.0.1:15672")));
}

#[test]
fn help_and_version() {
    for flag in ["-h", "--help"] {
        assert!(matches!(outcome(&[flag], &[]), Outcome::Help), "{flag}");
    }
    for flag in ["-V", "--version"] {
        assert!(matches!(outcome(&[flag], &[]), Outcome::Version), "{flag}");
    }
}

#[test]
fn every_flag() {
    let listen = defaults_with(|c| c.listen = vec![addr("127.0.0.1:5673"), addr("[::1]:5673")]);
    assert_eq!(
        config(
            &["--listen", "127.0.0.1:5673", "--listen", "[::1]:5673"],
            &[]
        ),
        listen
    );
    assert_eq!(
        config(&["--listen=127.0.0.1:5673", "--listen=[::1]:5673"], &[]),
        listen
    );
    let data_dir = defaults_with(|c| c.data_dir = Some(PathBuf::from("/var/lib/dwellmq")));
    assert_eq!(config(&["--data-dir", "/var/lib/dwellmq"], &[]), data_dir);
    assert_eq!(config(&["--data-dir=/var/lib/dwellmq"], &[]), data_dir);
    assert_eq!(
        config(&["--in-memory"], &[]),
        defaults_with(|c| c.data_dir = None)
    );
    assert_eq!(outcome(&["--log-level", "debug"], &[]).log_level(), "debug");
    assert_eq!(
        outcome(&["--log-level=dwellmq=trace,warn"], &[]).log_level(),
        "dwellmq=trace,warn"
    );
    assert_eq!(
        config(&["--timer-rt-priority", "10"], &[]),
        defaults_with(|c| c.timer_realtime_priority = Some(10))
    );
    assert_eq!(
        config(&["--expiry", "head-only"], &[]),
        defaults_with(|c| c.expiry_mode = ExpiryMode::HeadOnly)
    );
    assert_eq!(config(&["--expiry", "on-time"], &[]), binary_defaults());
    assert_eq!(
        config(&["--http", "0.0.0.0:8080"], &[]),
        defaults_with(|c| c.http = Some(addr("0.0.0.0:8080")))
    );
    assert_eq!(
        config(&["--http", "off"], &[]),
        defaults_with(|c| c.http = None)
    );
    assert_eq!(
        config(&["--metrics", "127.0.0.1:15692"], &[]),
        defaults_with(|c| c.metrics = Some(addr("127.0.0.1:15692")))
    );
    assert_eq!(config(&["--metrics", "off"], &[]), binary_defaults());
    assert_eq!(
        config(&["--definitions", "defs.json"], &[]),
        defaults_with(|c| c.definitions = Some(PathBuf::from("defs.json")))
    );
    assert_eq!(
        config(&["--name-seed", "7"], &[]),
        defaults_with(|c| c.name_seed = Some(7))
    );
    let file = ConfigFile::new("[tls]\ncertfile = 'c.pem'\nkeyfile = 'k.pem'\n");
    let tls = config(
        &["--config", file.path(), "--tls-listen", "0.0.0.0:5671"],
        &[],
    )
    .tls
    .expect("tls from the file");
    assert_eq!(tls.listen, vec![addr("0.0.0.0:5671")]);
}

#[test]
fn the_manual_clock_flag_takes_an_optional_start() {
    let before = now_ms();
    // Without START: now, whether another flag follows or nothing does.
    let c = config(&["--manual-clock", "--in-memory"], &[]);
    assert_manual_now(&c, before, "--manual-clock --in-memory");
    assert_eq!(c.data_dir, None, "the next flag is not taken as START");
    assert_manual_now(&config(&["--manual-clock"], &[]), before, "--manual-clock");
    let at = |start_ms| defaults_with(|c| c.clock = ClockConfig::Manual { start_ms });
    assert_eq!(config(&["--manual-clock", "5000"], &[]), at(5000));
    assert_eq!(config(&["--manual-clock=5000"], &[]), at(5000));
    assert_eq!(
        config(&["--manual-clock", "2026-01-01T09:00:00Z"], &[]),
        at(1_767_258_000_000)
    );
}

#[test]
fn every_environment_variable() {
    let listen = defaults_with(|c| c.listen = vec![addr("127.0.0.1:5673"), addr("[::1]:5673")]);
    assert_eq!(
        config(&[], &[("DWELLMQ_LISTEN", "127.0.0.1:5673,[::1]:5673")]),
        listen
    );
    assert_eq!(
        config(&[], &[("DWELLMQ_LISTEN", "127.0.0.1:5673, [::1]:5673")]),
        listen,
        "spaces after the commas"
    );
    assert_eq!(
        config(&[], &[("DWELLMQ_DATA_DIR", "/srv/mq")]),
        defaults_with(|c| c.data_dir = Some(PathBuf::from("/srv/mq")))
    );
    for yes in ["1", "true"] {
        assert_eq!(
            config(&[], &[("DWELLMQ_IN_MEMORY", yes)]),
            defaults_with(|c| c.data_dir = None),
            "DWELLMQ_IN_MEMORY={yes}"
        );
    }
    for no in ["0", "false"] {
        assert_eq!(
            config(&[], &[("DWELLMQ_IN_MEMORY", no)]),
            binary_defaults(),
            "DWELLMQ_IN_MEMORY={no}"
        );
    }
    let file = ConfigFile::new("vhosts = ['/', 'env']");
    assert_eq!(
        config(&[], &[("DWELLMQ_CONFIG", file.path())]),
        defaults_with(|c| c.vhosts = vec!["/".into(), "env".into()])
    );
    assert_eq!(outcome(&[], &[("DWELLMQ_LOG", "warn")]).log_level(), "warn");
    assert_eq!(
        config(&[], &[("DWELLMQ_HTTP", "0.0.0.0:8080")]),
        defaults_with(|c| c.http = Some(addr("0.0.0.0:8080")))
    );
    assert_eq!(
        config(&[], &[("DWELLMQ_HTTP", "off")]),
        defaults_with(|c| c.http = None)
    );
    assert_eq!(
        config(&[], &[("DWELLMQ_METRICS", "0.0.0.0:9419")]),
        defaults_with(|c| c.metrics = Some(addr("0.0.0.0:9419")))
    );
    assert_eq!(
        config(&[], &[("DWELLMQ_DEFINITIONS", "defs.json")]),
        defaults_with(|c| c.definitions = Some(PathBuf::from("defs.json")))
    );
    let before = now_ms();
    for now in ["1", "true"] {
        let c = config(&[], &[("DWELLMQ_MANUAL_CLOCK", now)]);
        assert_manual_now(&c, before, &format!("DWELLMQ_MANUAL_CLOCK={now}"));
    }
    assert_eq!(
        config(&[], &[("DWELLMQ_MANUAL_CLOCK", "2026-01-01T09:00:00Z")]),
        defaults_with(|c| c.clock = ClockConfig::Manual {
            start_ms: 1_767_258_000_000
        })
    );
}

#[test]
fn the_environment_beats_the_file_and_flags_beat_both() {
    let file = ConfigFile::new(
        "listen = ['127.0.0.1:1001']\ndata_dir = '/file'\nlog_level = 'error'\n\
         http = '127.0.0.1:1002'\nmetrics = '127.0.0.1:1003'\ndefinitions = 'file.json'\n\
         manual_clock = 1000\nexpiry = 'head-only'\ntimer_realtime_priority = 5\nname_seed = 1\n\
         [tls]\ncertfile = 'c'\nkeyfile = 'k'\nlisten = ['127.0.0.1:1004']\n",
    );
    let env = [
        ("DWELLMQ_CONFIG", file.path()),
        ("DWELLMQ_LISTEN", "127.0.0.1:2001"),
        ("DWELLMQ_DATA_DIR", "/env"),
        ("DWELLMQ_LOG", "warn"),
        ("DWELLMQ_HTTP", "127.0.0.1:2002"),
        ("DWELLMQ_METRICS", "127.0.0.1:2003"),
        ("DWELLMQ_DEFINITIONS", "env.json"),
        ("DWELLMQ_MANUAL_CLOCK", "2000"),
    ];
    let from_env = outcome(&[], &env);
    let Outcome::Run(c, level) = from_env else {
        panic!("expected a configuration, got {from_env:?}")
    };
    assert_eq!(c.listen, vec![addr("127.0.0.1:2001")]);
    assert_eq!(c.data_dir, Some(PathBuf::from("/env")));
    assert_eq!(level, "warn");
    assert_eq!(c.http, Some(addr("127.0.0.1:2002")));
    assert_eq!(c.metrics, Some(addr("127.0.0.1:2003")));
    assert_eq!(c.definitions, Some(PathBuf::from("env.json")));
    assert_eq!(c.clock, ClockConfig::Manual { start_ms: 2000 });
    // No variable for these: the file's.
    assert_eq!(c.expiry_mode, ExpiryMode::HeadOnly);
    assert_eq!(c.timer_realtime_priority, Some(5));
    assert_eq!(c.name_seed, Some(1));
    assert_eq!(c.tls.expect("tls").listen, vec![addr("127.0.0.1:1004")]);

    let other = ConfigFile::new("vhosts = ['flag']\n[tls]\ncertfile = 'c'\nkeyfile = 'k'\n");
    let flags = [
        "--config",
        other.path(),
        "--listen",
        "127.0.0.1:3001",
        "--data-dir",
        "/flag",
        "--log-level",
        "debug",
        "--http",
        "127.0.0.1:3002",
        "--metrics",
        "127.0.0.1:3003",
        "--definitions",
        "flag.json",
        "--manual-clock",
        "3000",
        "--expiry",
        "on-time",
        "--timer-rt-priority",
        "7",
        "--name-seed",
        "3",
        "--tls-listen",
        "127.0.0.1:3004",
    ];
    let from_flags = outcome(&flags, &env);
    let Outcome::Run(c, level) = from_flags else {
        panic!("expected a configuration, got {from_flags:?}")
    };
    assert_eq!(
        c.vhosts,
        vec!["flag".to_string()],
        "--config beats DWELLMQ_CONFIG"
    );
    assert_eq!(c.listen, vec![addr("127.0.0.1:3001")]);
    assert_eq!(c.data_dir, Some(PathBuf::from("/flag")));
    assert_eq!(level, "debug");
    assert_eq!(c.http, Some(addr("127.0.0.1:3002")));
    assert_eq!(c.metrics, Some(addr("127.0.0.1:3003")));
    assert_eq!(c.definitions, Some(PathBuf::from("flag.json")));
    assert_eq!(c.clock, ClockConfig::Manual { start_ms: 3000 });
    assert_eq!(c.expiry_mode, ExpiryMode::OnTime);
    assert_eq!(c.timer_realtime_priority, Some(7));
    assert_eq!(c.name_seed, Some(3));
    assert_eq!(c.tls.expect("tls").listen, vec![addr("127.0.0.1:3004")]);
}

#[test]
fn in_memory_and_data_dir_precedence() {
    let data_dir = |args: &[&str], env: &[(&str, &str)]| config(args, env).data_dir;
    let dir = |d: &str| Some(PathBuf::from(d));
    let file = ConfigFile::new("data_dir = '/file'\nin_memory = true\n");
    // In the file, in_memory wins over data_dir whatever their order.
    assert_eq!(data_dir(&["--config", file.path()], &[]), None);
    // A data directory from the environment or a flag beats the file's in_memory.
    assert_eq!(
        data_dir(&["--config", file.path()], &[("DWELLMQ_DATA_DIR", "/env")]),
        dir("/env")
    );
    assert_eq!(
        data_dir(&["--config", file.path(), "--data-dir", "/flag"], &[]),
        dir("/flag")
    );
    // Within the environment, and within the flags, in-memory wins.
    let both_env = [("DWELLMQ_DATA_DIR", "/env"), ("DWELLMQ_IN_MEMORY", "1")];
    assert_eq!(data_dir(&[], &both_env), None);
    assert_eq!(data_dir(&["--in-memory", "--data-dir", "/flag"], &[]), None);
    assert_eq!(data_dir(&["--data-dir", "/flag", "--in-memory"], &[]), None);
    // A flag beats the environment either way.
    assert_eq!(data_dir(&["--data-dir", "/flag"], &both_env), dir("/flag"));
    assert_eq!(
        data_dir(&["--in-memory"], &[("DWELLMQ_DATA_DIR", "/env")]),
        None
    );
    // The file's data_dir stands when nothing else speaks.
    let on_disk = ConfigFile::new("data_dir = '/file'\n");
    assert_eq!(data_dir(&["--config", on_disk.path()], &[]), dir("/file"));
    assert_eq!(
        data_dir(&["--config", on_disk.path()], &[("DWELLMQ_IN_MEMORY", "1")]),
        None
    );
}

#[test]
fn http_follows_free_amqp_ports_unless_named_anywhere() {
    let http = |args: &[&str], env: &[(&str, &str)]| config(args, env).http;
    let free = Some(addr("127.0.0.1:0"));
    let fixed = Some(addr("127.0.0.1:15672"));
    assert_eq!(http(&["--listen", "127.0.0.1:0"], &[]), free);
    assert_eq!(
        http(&[], &[("DWELLMQ_LISTEN", "127.0.0.1:0,[::1]:0")]),
        free
    );
    let file = ConfigFile::new("listen = ['127.0.0.1:0']\n");
    assert_eq!(http(&["--config", file.path()], &[]), free);
    assert_eq!(
        http(&["--listen", "127.0.0.1:0", "--listen", "[::1]:5672"], &[]),
        fixed
    );
    assert_eq!(
        http(
            &["--listen", "127.0.0.1:0", "--http", "127.0.0.1:15672"],
            &[]
        ),
        fixed
    );
    assert_eq!(
        http(
            &["--listen", "127.0.0.1:0"],
            &[("DWELLMQ_HTTP", "127.0.0.1:15672")]
        ),
        fixed
    );
    let named = ConfigFile::new("listen = ['127.0.0.1:0']\nhttp = '127.0.0.1:15672'\n");
    assert_eq!(http(&["--config", named.path()], &[]), fixed);
    assert_eq!(
        http(&["--listen", "127.0.0.1:0", "--http", "off"], &[]),
        None
    );
    // TLS on a fixed port is a chosen port.
    let tls = ConfigFile::new("[tls]\ncertfile = 'c'\nkeyfile = 'k'\n");
    assert_eq!(
        http(&["--config", tls.path(), "--listen", "127.0.0.1:0"], &[]),
        fixed
    );
    assert_eq!(
        http(
            &[
                "--config",
                tls.path(),
                "--listen",
                "127.0.0.1:0",
                "--tls-listen",
                "127.0.0.1:0"
            ],
            &[]
        ),
        free
    );
}

#[test]
fn what_is_refused() {
    for args in [
        &["--frobnicate"][..],
        &["--listen"],
        &["--listen", "nope"],
        &["--data-dir"],
        &["--http", "nope"],
        &["--metrics", "x"],
        &["--timer-rt-priority", "0"],
        &["--timer-rt-priority", "100"],
        &["--timer-rt-priority", "high"],
        &["--expiry", "sometimes"],
        &["--manual-clock", "yesterday"],
        &["--name-seed", "x"],
        &["--config", "/nonexistent/dwellmq.toml"],
        // --tls-listen needs certfile and keyfile from the file's [tls].
        &["--tls-listen", "0.0.0.0:5671"],
    ] {
        assert!(outcome(args, &[]).refused(), "{args:?} was accepted");
    }
    for env in [
        ("DWELLMQ_LISTEN", "nope"),
        ("DWELLMQ_HTTP", "nope"),
        ("DWELLMQ_METRICS", "nope"),
        ("DWELLMQ_MANUAL_CLOCK", "yesterday"),
        ("DWELLMQ_CONFIG", "/nonexistent/dwellmq.toml"),
    ] {
        assert!(outcome(&[], &[env]).refused(), "{env:?} was accepted");
    }
    for text in [
        "frobnicate = 1",
        "listen = '127.0.0.1:5672'",
        "listen = ['nope']",
        "in_memory = 'yes'",
        "expiry = 1",
        "expiry = 'sometimes'",
        "http = 'nope'",
        "manual_clock = 'soon'",
        "manual_clock = -1",
        "name_seed = -1",
        "timer_realtime_priority = 100",
        "[[users]]\nname = 'x'",
        "[[users]]\nname = 'x'\npassword = 'a'\npassword_hash = 'b'",
        "[[permissions]]\nuser = 'x'\nwrite = ''\nread = ''",
        "[[policies]]\nname = 'p'\npattern = '.*'\ndefinition = { message-ttl = -5 }",
        "[tls]\nkeyfile = 'k'",
        "[tls]\ncertfile = 'c'\nkeyfile = 'k'\nverify = 'maybe'",
        "[tls]\ncertfile = 'c'\nkeyfile = 'k'\nciphers = 1",
        "[limits]\nframe_max = -1",
        "[limits]\nchannel_max = 70000",
        "[limits]\nheartbeat = 70000",
        "[limits]\nno_such_limit = 1",
        "[limits]\nmemory_high_watermark.relative = -0.1",
        "[limits]\nmemory_high_watermark = { relative = 0.4, absolute = 100 }",
        "[limits]\nmemory_high_watermark = true",
        "[limits]\nmemory_high_watermark_paging_ratio = 0",
        "[limits]\ndisk_free_limit = 'lots'",
        "[limits]\ndisk_free_limit.mem_relative = -1.0",
        "not toml at all [",
    ] {
        assert!(from_file(text).refused(), "{text:?} was accepted");
    }
}
