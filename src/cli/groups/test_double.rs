//! The test double: time that moves only when a test moves it, and reproducible names.

use crate::cli::declare::settings;
use crate::cli::values::ManualClock;

settings! {
    #[derive(clap::Args, Debug, Default)]
    pub(crate) struct TestDouble {
        /// Time moves only when a test moves it; it starts at START, or now
        ///
        /// START is ms since 1970 or an RFC 3339 time. Tests move the clock with
        /// POST /test/clock/advance.
        #[toml = "manual_clock"]
        #[arg(
            long,
            env = "DWELLMQ_MANUAL_CLOCK",
            value_name = "START",
            num_args = 0..=1,
            default_missing_value = "now"
        )]
        manual_clock: ManualClock,

        /// Server-generated names from a generator seeded with N
        ///
        /// amq.gen- and amq.ctag- names become reproducible from run to run (and
        /// guessable: for tests only).
        #[toml = "name_seed"]
        #[arg(long, env = "DWELLMQ_NAME_SEED", value_name = "N")]
        name_seed: u64,

        /// Serve the test double's /test/... endpoints on the system clock too
        ///
        /// They exist with --manual-clock; otherwise only with this flag (reset, faults,
        /// inspection: a test harness's, never an operator's).
        #[toml = "test_api"]
        #[arg(
            long,
            env = "DWELLMQ_TEST_API",
            value_name = "BOOL",
            num_args = 0..=1,
            default_missing_value = "true",
            value_parser = crate::cli::values::switch
        )]
        test_api: bool,
    }
}
