//! Every key of the config file the binary accepted before its parser moved to clap, with
//! what it sets (the rest of the enumeration, and its helpers, in `tests_enumeration.rs`).

use std::path::PathBuf;
use std::time::Duration;

use dwellmq::{
    ApplyTo, ClockConfig, DiskFreeLimit, ExpiryMode, MemoryWatermark, PermissionConfig, Policy,
    PolicyConfig, PolicyDefinition, PolicyValue, TlsConfig, TlsVerify, UserConfig,
};

use super::test_support::{binary_defaults, from_file};
use super::tests_enumeration::{addr, assert_manual_now, defaults_with, now_ms};

#[test]
fn every_top_level_key_of_the_config_file() {
    let file = |text: &str| from_file(text).config();
    assert_eq!(
        file("listen = ['127.0.0.1:5673']"),
        defaults_with(|c| c.listen = vec![addr("127.0.0.1:5673")])
    );
    assert_eq!(
        file("data_dir = '/srv/mq'"),
        defaults_with(|c| c.data_dir = Some(PathBuf::from("/srv/mq")))
    );
    assert_eq!(
        file("in_memory = true"),
        defaults_with(|c| c.data_dir = None)
    );
    assert_eq!(file("in_memory = false"), binary_defaults());
    assert_eq!(from_file("log_level = 'debug'").log_level(), "debug");
    assert_eq!(
        file("vhosts = ['/', 'staging']"),
        defaults_with(|c| c.vhosts = vec!["/".into(), "staging".into()])
    );
    assert_eq!(
        file("expiry = 'head-only'"),
        defaults_with(|c| c.expiry_mode = ExpiryMode::HeadOnly)
    );
    assert_eq!(
        file("http = '0.0.0.0:8080'"),
        defaults_with(|c| c.http = Some(addr("0.0.0.0:8080")))
    );
    assert_eq!(file("http = 'off'"), defaults_with(|c| c.http = None));
    assert_eq!(
        file("metrics = '[::1]:15692'"),
        defaults_with(|c| c.metrics = Some(addr("[::1]:15692")))
    );
    assert_eq!(file("metrics = 'off'"), binary_defaults());
    assert_eq!(
        file("definitions = 'defs.json'"),
        defaults_with(|c| c.definitions = Some(PathBuf::from("defs.json")))
    );
    assert_eq!(
        file("name_seed = 3"),
        defaults_with(|c| c.name_seed = Some(3))
    );
    assert_eq!(
        file("timer_realtime_priority = 20"),
        defaults_with(|c| c.timer_realtime_priority = Some(20))
    );
    let at = |start_ms| defaults_with(|c| c.clock = ClockConfig::Manual { start_ms });
    assert_eq!(file("manual_clock = 42"), at(42));
    assert_eq!(
        file("manual_clock = '2026-01-01T09:00:00Z'"),
        at(1_767_258_000_000)
    );
    assert_eq!(file("manual_clock = false"), binary_defaults());
    let before = now_ms();
    assert_manual_now(&file("manual_clock = true"), before, "manual_clock = true");
}

#[test]
fn every_key_of_the_config_files_tables() {
    let config = from_file(
        r#"
        [[users]]
        name = "app"
        password = "secret"
        vhosts = ["staging"]
        loopback_only = true
        tags = ["management"]
        [[users]]
        name = "reports"
        password_hash = "AQIDBKSR723asempcKRBlyrPWcL1zhEiLhyy/se3Vks7S5g+"
        [[permissions]]
        user = "reports"
        vhost = "staging"
        configure = "^reports\\."
        write = "^reports\\."
        read = ".*"
        [[policies]]
        name = "ttl"
        pattern = "^orders\\."
        vhost = "staging"
        apply_to = "quorum_queues"
        priority = 5
        definition = { message-ttl = 60000, dead-letter-exchange = "dlx" }
        [tls]
        listen = ["0.0.0.0:5671"]
        certfile = "server.pem"
        keyfile = "server.key"
        cacertfile = "ca.pem"
        verify = "verify_peer"
        fail_if_no_peer_cert = true
        "#,
    )
    .config();
    let mut tls = TlsConfig::new(addr("0.0.0.0:5671"), "server.pem", "server.key");
    tls.cacertfile = Some(PathBuf::from("ca.pem"));
    tls.verify = TlsVerify::VerifyPeer;
    tls.fail_if_no_peer_cert = true;
    let definition = PolicyDefinition::from_entries([
        ("message-ttl", PolicyValue::Integer(60_000)),
        ("dead-letter-exchange", PolicyValue::Text("dlx".into())),
    ])
    .expect("a valid definition");
    let expected = defaults_with(|c| {
        c.users = vec![
            UserConfig {
                name: "app".into(),
                password: "secret".into(),
                password_hash: None,
                vhosts: vec!["staging".into()],
                loopback_only: true,
                tags: vec!["management".into()],
            },
            UserConfig {
                name: "reports".into(),
                password: String::new(),
                password_hash: Some("AQIDBKSR723asempcKRBlyrPWcL1zhEiLhyy/se3Vks7S5g+".into()),
                // Named by [[permissions]]: no default vhosts.
                vhosts: Vec::new(),
                loopback_only: false,
                tags: Vec::new(),
            },
        ];
        c.permissions = vec![PermissionConfig {
            user: "reports".into(),
            vhost: "staging".into(),
            configure: "^reports\\.".into(),
            write: "^reports\\.".into(),
            read: ".*".into(),
        }];
        c.policies = vec![PolicyConfig {
            vhost: "staging".into(),
            policy: Policy {
                name: "ttl".into(),
                pattern: "^orders\\.".into(),
                apply_to: ApplyTo::QuorumQueues,
                priority: 5,
                definition,
            },
        }];
        c.tls = Some(tls);
    });
    assert_eq!(config, expected);
    // The tables' defaults: a user gets every vhost, a permission and a policy the vhost "/",
    // a policy applies to all at priority 0, TLS listens on 127.0.0.1:5671 without verifying.
    let config = from_file(
        "[[users]]\nname = 'u'\npassword = 'p'\n\
         [[permissions]]\nuser = 'other'\nconfigure = ''\nwrite = ''\nread = ''\n\
         [[policies]]\nname = 'p'\npattern = '.*'\ndefinition = { max-length = 5 }\n\
         [tls]\ncertfile = 'c'\nkeyfile = 'k'\n",
    )
    .config();
    assert_eq!(config.users[0].vhosts, vec!["*".to_string()]);
    assert!(!config.users[0].loopback_only);
    assert_eq!(config.permissions[0].vhost, "/");
    assert_eq!(config.policies[0].vhost, "/");
    assert_eq!(config.policies[0].policy.apply_to, ApplyTo::All);
    assert_eq!(config.policies[0].policy.priority, 0);
    assert_eq!(
        config.tls,
        Some(TlsConfig::new(addr("127.0.0.1:5671"), "c", "k"))
    );
}

#[test]
fn every_limit_of_the_config_file() {
    let limits = |text: &str| from_file(&format!("[limits]\n{text}")).config().limits;
    let defaults = binary_defaults().limits;
    let l = limits("frame_max = 65536");
    assert_eq!(l.frame_max, 65_536);
    assert_eq!(limits("channel_max = 16").channel_max, 16);
    assert_eq!(limits("heartbeat = 0").heartbeat_secs, 0);
    assert_eq!(limits("max_connections = 10").max_connections, 10);
    assert_eq!(limits("max_message_size = 1024").max_message_size, 1024);
    assert_eq!(
        limits("handshake_timeout_ms = 2500").handshake_timeout,
        Duration::from_millis(2500)
    );
    assert_eq!(
        limits("store_backlog_bytes = 1048576").store_backlog_bytes,
        1 << 20
    );
    assert_eq!(
        limits("store_cache_bytes = 1048576").store_cache_bytes,
        1 << 20
    );
    assert_eq!(
        limits("memory_high_watermark_paging_ratio = 0.75").memory_paging_ratio,
        0.75
    );
    assert_eq!(
        limits("memory_high_watermark_paging_ratio = 2").memory_paging_ratio,
        2.0
    );
    // Each key changes its own limit only.
    assert_eq!(
        l,
        dwellmq::Limits {
            frame_max: 65_536,
            ..defaults
        }
    );
    for (text, watermark) in [
        (
            "memory_high_watermark.relative = 0.6",
            MemoryWatermark::Relative(0.6),
        ),
        (
            "memory_high_watermark = { relative = 0.6 }",
            MemoryWatermark::Relative(0.6),
        ),
        (
            "memory_high_watermark = 0.6",
            MemoryWatermark::Relative(0.6),
        ),
        (
            "memory_high_watermark.relative = 1",
            MemoryWatermark::Relative(1.0),
        ),
        (
            "memory_high_watermark.absolute = \"2GiB\"",
            MemoryWatermark::Absolute(2 << 30),
        ),
        (
            "memory_high_watermark.absolute = 2147483648",
            MemoryWatermark::Absolute(2 << 30),
        ),
        (
            "memory_high_watermark = 2147483648",
            MemoryWatermark::Absolute(2 << 30),
        ),
        (
            "memory_high_watermark = \"512MB\"",
            MemoryWatermark::Absolute(512_000_000),
        ),
    ] {
        assert_eq!(limits(text).memory_high_watermark, watermark, "{text}");
    }
    for (text, limit) in [
        (
            "disk_free_limit = \"2GB\"",
            DiskFreeLimit::Absolute(2_000_000_000),
        ),
        (
            "disk_free_limit.absolute = \"2GB\"",
            DiskFreeLimit::Absolute(2_000_000_000),
        ),
        (
            "disk_free_limit = 2000000000",
            DiskFreeLimit::Absolute(2_000_000_000),
        ),
        (
            "disk_free_limit.mem_relative = 1.5",
            DiskFreeLimit::MemRelative(1.5),
        ),
        (
            "disk_free_limit = { relative = 2 }",
            DiskFreeLimit::MemRelative(2.0),
        ),
    ] {
        assert_eq!(limits(text).disk_free_limit, limit, "{text}");
    }
}
