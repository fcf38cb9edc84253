//! `dwellmq-load --help`: its modes and the options each reads.

pub(crate) const USAGE: &str = "\
dwellmq-load: an end-to-end load generator for any AMQP 0-9-1 broker (dwellmq or RabbitMQ)

Usage: dwellmq-load MODE [--option value]...
       dwellmq-load --help

Every mode takes --addr HOST:PORT (default 127.0.0.1:5672) and --client-threads N (default 1);
--pid PID (where shown) also reports the broker's CPU time and RSS from /proc.

Modes:
  throughput      publish and consume as fast as confirms allow
                  --pairs 1 --messages 1000000 --size 16 --window 20000 --pid PID
  latency         publish at a fixed rate; latency percentiles
                  --rate 20000 --seconds 10 --pid PID
  delayed         publish to a delayed exchange; release lateness
                  --messages 100000 --min-delay-ms 1000 --max-delay-ms 10000 --rate 0
                  (0: as fast as confirms allow) --window 500 --size 16 --durable false
                  --schedule-only false --worst 0 --dump FILE --pid PID
  durable         persistent messages through a durable queue
                  --messages 200000 --size 16 --window 256 --prefetch 0 --persistent true
                  --pid PID
  fill            fill a durable queue for a restart measurement
                  --queue load-restart --messages 1000000 --size 16 --window 256
                  --transient false
  first-delivery  start the broker, time exec to accepting and to the first delivery
                  --exec \"BROKER ARGS\" --queue load-restart --timeout-s 60
  drain           consume a queue to the end
                  --queue load-restart --messages 1000000 --prefetch 1000 --ack-every 100

The values shown are the defaults.";

/// Whether the arguments ask for help, wherever they do.
pub(crate) fn asks_for_help(args: &[String]) -> bool {
    args.iter()
        .any(|arg| matches!(arg.as_str(), "-h" | "--help" | "help"))
}
