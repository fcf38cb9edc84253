//! `dwellmq-load`: an end-to-end load generator for any AMQP 0-9-1 broker (dwellmq or RabbitMQ).
//!
//! It speaks raw pipelined frames so that the client costs far less than the broker, and reports
//! throughput, latency percentiles and — given the broker's pid — broker CPU time per message.
//!
//! ```text
//! cargo run --release --bin dwellmq-load -- throughput --addr 127.0.0.1:5672 --pairs 1 --messages 2000000 --pid PID
//! cargo run --release --bin dwellmq-load -- latency --addr 127.0.0.1:5672 --rate 20000 --seconds 10 --pid PID
//! cargo run --release --bin dwellmq-load -- delayed --addr 127.0.0.1:5672 --messages 100000 --max-delay-ms 10000
//! cargo run --release --bin dwellmq-load -- durable --addr 127.0.0.1:5672 --messages 200000 --size 16 --window 256 --pid PID
//! cargo run --release --bin dwellmq-load -- delayed --addr 127.0.0.1:5672 --messages 1000000 \
//!     --min-delay-ms 1000 --max-delay-ms 60000 --rate 100000 --pid PID --worst 5 --dump late.csv
//! ```
//!
//! `delayed` options: `--rate` caps publishing (messages per second, 0 = as fast as confirms
//! allow), `--window` bounds unconfirmed messages, `--schedule-only true` stops after the
//! confirms, `--worst N` prints the N latest releases, `--dump FILE` writes every sample as
//! `due µs since start,lateness ms`, `--durable true` declares a durable exchange (kept after
//! the run), `--size N` sets the body size (default and least 16). Besides lateness from the
//! publish, it prints lateness counted from the confirm: a lower bound of the broker's own.

mod delayed;
mod drain;
mod durable;
mod raw_client;
mod restart;
mod stats;
mod throughput;
mod usage;

use std::io::Write;
use std::process::ExitCode;

/// Parsed `--name value` options.
pub(crate) struct Options(Vec<(String, String)>);

impl Options {
    fn parse(args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut pairs = Vec::new();
        let mut args = args.peekable();
        while let Some(name) = args.next() {
            let name = name
                .strip_prefix("--")
                .ok_or_else(|| format!("expected --option, got '{name}'"))?
                .to_string();
            let value = args
                .next()
                .ok_or_else(|| format!("--{name} needs a value"))?;
            pairs.push((name, value));
        }
        Ok(Options(pairs))
    }

    pub(crate) fn get<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.0.iter().rev().find(|(n, _)| n == name) {
            Some((_, v)) => v
                .parse()
                .map_err(|_| format!("invalid value '{v}' for --{name}")),
            None => Ok(default),
        }
    }

    pub(crate) fn string(&self, name: &str, default: &str) -> String {
        self.get(name, default.to_string())
            .unwrap_or_else(|_| default.into())
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if usage::asks_for_help(&args) {
        // `dwellmq-load --help | head` closes the pipe early: no panic for it.
        let _ = writeln!(std::io::stdout().lock(), "{}", usage::USAGE);
        return ExitCode::SUCCESS;
    }
    let mut args = args.into_iter();
    let Some(mode) = args.next() else {
        eprintln!("{}", usage::USAGE);
        return ExitCode::from(2);
    };
    let options = match Options::parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("dwellmq-load: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.get("client-threads", 1usize).unwrap_or(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(async {
        match mode.as_str() {
            "throughput" => throughput::run_throughput(&options).await,
            "latency" => throughput::run_latency(&options).await,
            "delayed" => delayed::run(&options).await,
            "durable" => durable::run(&options).await,
            "fill" => restart::fill(&options).await,
            "first-delivery" => restart::first_delivery(&options).await,
            "drain" => drain::run(&options).await,
            other => Err(format!("unknown mode '{other}' (see --help)").into()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dwellmq-load: {e}");
            ExitCode::FAILURE
        }
    }
}
