//! What the clap parser adds to what worked before (`tests_enumeration.rs`): a flag and a
//! variable for every limit and for the settings that had none, and messages that say what
//! is wrong and where.

use std::time::Duration;

use dwellmq::{ClockConfig, DiskFreeLimit, ExpiryMode, Limits, MemoryWatermark};

use super::test_support::{binary_defaults, from_file, outcome, ConfigFile};

fn limits(args: &[&str], env: &[(&str, &str)]) -> Limits {
    outcome(args, env).config().limits
}

#[test]
fn every_limit_has_a_flag_and_a_variable() {
    let defaults = Limits::default();
    let cases: [(&str, &str, Limits); 11] = [
        (
            "frame-max",
            "65536",
            Limits {
                frame_max: 65_536,
                ..defaults.clone()
            },
        ),
        (
            "channel-max",
            "16",
            Limits {
                channel_max: 16,
                ..defaults.clone()
            },
        ),
        (
            "heartbeat",
            "0",
            Limits {
                heartbeat_secs: 0,
                ..defaults.clone()
            },
        ),
        (
            "max-connections",
            "10",
            Limits {
                max_connections: 10,
                ..defaults.clone()
            },
        ),
        (
            "max-message-size",
            "1024",
            Limits {
                max_message_size: 1024,
                ..defaults.clone()
            },
        ),
        (
            "handshake-timeout-ms",
            "2500",
            Limits {
                handshake_timeout: Duration::from_millis(2500),
                ..defaults.clone()
            },
        ),
        (
            "memory-high-watermark",
            "0.6",
            Limits {
                memory_high_watermark: MemoryWatermark::Relative(0.6),
                ..defaults.clone()
            },
        ),
        (
            "memory-high-watermark-paging-ratio",
            "0.75",
            Limits {
                memory_paging_ratio: 0.75,
                ..defaults.clone()
            },
        ),
        (
            "store-backlog-bytes",
            "1048576",
            Limits {
                store_backlog_bytes: 1 << 20,
                ..defaults.clone()
            },
        ),
        (
            "store-cache-bytes",
            "1048576",
            Limits {
                store_cache_bytes: 1 << 20,
                ..defaults.clone()
            },
        ),
        (
            "disk-free-limit",
            "2GB",
            Limits {
                disk_free_limit: DiskFreeLimit::Absolute(2_000_000_000),
                ..defaults.clone()
            },
        ),
    ];
    for (flag, value, expected) in cases {
        assert_eq!(
            limits(&[&format!("--{flag}"), value], &[]),
            expected,
            "--{flag}"
        );
        let variable = format!("DWELLMQ_{}", flag.replace('-', "_").to_ascii_uppercase());
        assert_eq!(limits(&[], &[(&variable, value)]), expected, "{variable}");
    }
    assert_eq!(
        limits(&["--memory-high-watermark", "2GiB"], &[]).memory_high_watermark,
        MemoryWatermark::Absolute(2 << 30)
    );
    assert_eq!(
        limits(&["--disk-free-limit", "1.5"], &[]).disk_free_limit,
        DiskFreeLimit::MemRelative(1.5)
    );
}

#[test]
fn a_limit_flag_beats_the_file_and_the_file_the_default() {
    let file = ConfigFile::new("[limits]\nchannel_max = 16\nframe_max = 65536\n");
    let l = limits(&["--config", file.path(), "--channel-max", "32"], &[]);
    assert_eq!((l.channel_max, l.frame_max), (32, 65_536));
    let l = limits(&["--config", file.path()], &[("DWELLMQ_FRAME_MAX", "8192")]);
    assert_eq!((l.channel_max, l.frame_max), (16, 8192));
}

#[test]
fn settings_without_a_variable_before_have_one() {
    let config = |env| outcome(&[], env).config();
    assert_eq!(
        config(&[("DWELLMQ_EXPIRY", "head-only")]).expiry_mode,
        ExpiryMode::HeadOnly
    );
    assert_eq!(config(&[("DWELLMQ_NAME_SEED", "9")]).name_seed, Some(9));
    assert_eq!(
        config(&[("DWELLMQ_TIMER_RT_PRIORITY", "12")]).timer_realtime_priority,
        Some(12)
    );
    let tls = ConfigFile::new("[tls]\ncertfile = 'c'\nkeyfile = 'k'\n");
    let c = config(&[
        ("DWELLMQ_CONFIG", tls.path()),
        ("DWELLMQ_TLS_LISTEN", "127.0.0.1:5681,127.0.0.1:5682"),
    ]);
    let listen = c.tls.expect("tls").listen;
    assert_eq!(listen.len(), 2);
    assert_eq!(listen[1].port(), 5682);
}

#[test]
fn the_in_memory_variable_is_a_switch() {
    for on in ["yes", "on", "TRUE", "1"] {
        assert_eq!(
            outcome(&[], &[("DWELLMQ_IN_MEMORY", on)]).config().data_dir,
            None,
            "{on}"
        );
    }
    for off in ["no", "off", "0", ""] {
        assert_eq!(
            outcome(&[], &[("DWELLMQ_IN_MEMORY", off)]).config(),
            binary_defaults(),
            "{off:?}"
        );
    }
    let refused = outcome(&[], &[("DWELLMQ_IN_MEMORY", "maybe")]);
    let message = refused.refusal().expect("refused");
    assert!(message.contains("invalid value 'maybe'"), "{message}");
}

#[test]
fn the_manual_clock_takes_now_and_repeated_flags_take_the_last() {
    assert!(matches!(
        outcome(&["--manual-clock", "now"], &[]).config().clock,
        ClockConfig::Manual { start_ms } if start_ms > 0
    ));
    let c = outcome(&["--data-dir", "/a", "--data-dir", "/b"], &[]).config();
    assert_eq!(c.data_dir, Some("/b".into()));
}

#[test]
fn messages_say_what_is_wrong_and_where() {
    let message = |args: &[&str]| {
        let refused = outcome(args, &[]);
        refused
            .refusal()
            .map(str::to_string)
            .unwrap_or_else(|| panic!("{args:?}: {refused:?}"))
    };
    let m = message(&["--frobnicate"]);
    assert!(
        m.starts_with("error: unexpected argument '--frobnicate' found"),
        "{m}"
    );
    let m = message(&["--in-memroy"]);
    assert!(
        m.contains("a similar argument exists: '--in-memory'"),
        "{m}"
    );
    let m = message(&["--timer-rt-priority", "100"]);
    assert!(m.contains("100 is not a priority from 1 to 99"), "{m}");
    let m = message(&["--tls-listen", "0.0.0.0:5671"]);
    assert!(m.contains("the config file's [tls] table"), "{m}");
    let m = message(&["--manual-clock", "yesterday"]);
    assert!(
        m.contains("invalid value 'yesterday' for '--manual-clock [<START>]'"),
        "{m}"
    );

    // From the file: the file's path, then the key.
    let refused = |text: &str| {
        let outcome = from_file(text);
        outcome
            .refusal()
            .map(str::to_string)
            .unwrap_or_else(|| panic!("{text}: {outcome:?}"))
    };
    let m = refused("[limits]\nchannel_max = 70000");
    assert!(m.contains(".toml: limits.channel_max: "), "{m}");
    let m = refused("[limits]\nmemory_high_watermark = true");
    assert!(
        m.contains(".toml: limits.memory_high_watermark: expected a fraction"),
        "{m}"
    );
    let m = refused("[[policies]]\nname = 'p'\npattern = '.*'\ndefinition = { message-ttl = -5 }");
    assert!(
        m.ends_with(".toml: policy 'p': Validation failed: -5 is not a valid message-ttl"),
        "{m}"
    );
    let m = refused("[tls]\ncertfile = 'c'\nkeyfile = 'k'\nciphers = 1");
    assert!(m.contains("unknown setting tls.ciphers"), "{m}");
}
