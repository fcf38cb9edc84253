//! The queue state machine against a plain reference, under random commands with shrinking:
//! publishes (persistent or not, with and without a TTL), consumers, gets, acks, nacks with
//! and without requeue, channel closes, purges, time, memory pressure, and the store's write
//! completions and page reads delivered late, out of order, or failed. After every command
//! the reference checks queue order (RabbitMQ's requeue rule included), bodies, the
//! redelivered flag and the counts; once everything settles it checks that every deadline
//! was met (on time, or at the head in head-only mode), that a consumer with credit is never
//! left waiting beside a ready message, and that memory stays within the window; at the end
//! every message published is accounted for exactly once.
//!
//! `DWELLMQ_QUEUE_MODEL_CASES=N` runs N cases (the default is CI's); a long run is
//! `DWELLMQ_QUEUE_MODEL_CASES=1000000 cargo test --release -p dwellmq-core --test queue_model`.

mod harness;
mod reference;
mod script;
mod store;

use dwellmq_core::queue::{ExpiryMode, READ_RETRY_MS};
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};

use harness::Harness;
use reference::Verdict;
use script::{Cmd, Config};

fn run(harness: &mut Harness, cmd: &Cmd) -> Verdict {
    match *cmd {
        Cmd::Publish {
            persistent,
            ttl,
            body_len,
        } => harness.publish(persistent, ttl, body_len),
        Cmd::Consume { prefetch, no_ack } => harness.consume(prefetch, no_ack),
        Cmd::Cancel { which } => harness.cancel(which),
        Cmd::CloseChannel => harness.close_channel(),
        Cmd::Get { no_ack } => harness.get(no_ack),
        Cmd::Ack { which } => harness.ack(which),
        Cmd::Nack { which, requeue } => harness.nack(which, requeue),
        Cmd::Purge => harness.purge(),
        Cmd::Advance { ms } => harness.advance(ms),
        Cmd::Pressure { on } => harness.pressure(on),
        Cmd::Commit { n, ok } => harness.commit(n, ok),
        Cmd::Snapshot { which } => {
            harness.snapshot(which);
            Ok(())
        }
        Cmd::ReadBack { which, ok } => harness.read_back(which, ok),
        Cmd::Settle => {
            harness.settle()?;
            settled_checks(harness)
        }
    }
}

/// What must hold once nothing is in flight.
fn settled_checks(h: &Harness) -> Verdict {
    let r = &h.reference;
    let now = h.now;
    if now >= h.retry_until {
        match h.config.expiry_mode {
            ExpiryMode::OnTime => {
                if let Some(m) = r
                    .ready
                    .values()
                    .find(|m| m.deadline.is_some_and(|d| d <= now))
                {
                    return Err(format!(
                        "message {} still ready at {now}, past its deadline {:?}",
                        m.id, m.deadline
                    ));
                }
            }
            ExpiryMode::HeadOnly => {
                if let Some(m) = r.ready.values().next() {
                    if m.deadline.is_some_and(|d| d <= now) {
                        return Err(format!(
                            "message {} at the head at {now}, past its deadline {:?}",
                            m.id, m.deadline
                        ));
                    }
                }
            }
        }
    }
    if let Some(m) = r.ready.values().next() {
        if let Some((c, _)) = r.consumers.iter().find(|(_, c)| c.can_take()) {
            return Err(format!(
                "consumer {c} has credit, but message {} stays ready",
                m.id
            ));
        }
    }
    if h.config.paging && h.pressed {
        let (in_memory, bound) = (h.in_memory(), h.memory_bound());
        if in_memory > bound {
            return Err(format!(
                "{in_memory} ready messages in memory under pressure, the window allows {bound}"
            ));
        }
        // What is in memory is charged: at most a slot and a packed buffer per message.
        let most = in_memory as u64 * (48 + 256);
        if h.q.packed_footprint() > most {
            return Err(format!(
                "{} octets charged for {in_memory} messages in memory",
                h.q.packed_footprint()
            ));
        }
    }
    if let Some(max) = h.config.max_length {
        let drop_head = h.config.overflow == dwellmq_core::arguments::Overflow::DropHead;
        if drop_head && r.ready.len() as u64 > max {
            return Err(format!("{} ready past x-max-length {max}", r.ready.len()));
        }
    }
    Ok(())
}

/// The end of a case: time passes every deadline, a consumer drains what is left, and
/// every message is accounted for exactly once.
fn finish(h: &mut Harness, published: u64) -> Verdict {
    h.settle()?;
    h.advance(READ_RETRY_MS * 2)?;
    h.settle()?;
    settled_checks(h)?;
    h.consume(0, false)?;
    h.settle()?;
    settled_checks(h)?;
    let r = &h.reference;
    if !r.ready.is_empty() {
        return Err(format!("{} messages never delivered", r.ready.len()));
    }
    for id in 0..published {
        let held = r.unacked.contains_key(&id);
        let gone = r.gone.contains(&id);
        if held == gone {
            return Err(format!("message {id} is held={held} and gone={gone}"));
        }
    }
    if h.q.paged_out().0 != 0 || h.q.ready() != 0 {
        return Err("the queue still counts messages after the drain".into());
    }
    Ok(())
}

fn case(config: Config, cmds: Vec<Cmd>) -> Result<(), TestCaseError> {
    let mut h = Harness::new(config);
    for (i, cmd) in cmds.iter().enumerate() {
        if let Err(why) = run(&mut h, cmd) {
            return Err(TestCaseError::fail(format!("step {i} ({cmd:?}): {why}")));
        }
    }
    let published = cmds
        .iter()
        .filter(|c| matches!(c, Cmd::Publish { .. }))
        .count() as u64;
    finish(&mut h, published).map_err(|why| TestCaseError::fail(format!("at the end: {why}")))
}

#[test]
fn the_queue_keeps_every_promise_of_the_reference() {
    let cases = std::env::var("DWELLMQ_QUEUE_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut runner = TestRunner::new(RunnerConfig {
        cases,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    let strategy = (
        script::config(),
        proptest::collection::vec(script::cmd(), 1..160),
    );
    let result = runner.run(&strategy, |(config, cmds)| case(config, cmds));
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A paging queue's configuration for the regression cases below: on-time expiry, no limits,
/// reads waiting like any other; a durable queue's (`stores_persistent`) or a transient one's,
/// with its window and write budget.
fn paging_config(
    stores_persistent: bool,
    window_messages: usize,
    window_bytes: u64,
    write_budget: usize,
) -> Config {
    Config {
        paging: true,
        stores_persistent,
        window: dwellmq_core::paging::Paging {
            window_messages,
            window_bytes,
        },
        expiry_mode: ExpiryMode::OnTime,
        message_ttl: None,
        max_length: None,
        max_length_bytes: None,
        overflow: dwellmq_core::arguments::Overflow::DropHead,
        due_reads_at_once: false,
        write_budget,
    }
}

/// Found by CI: under memory pressure, a consumer holding its prefetch and one failed commit,
/// the queue kept writing (it never settled).
#[test]
fn a_failed_spill_under_pressure_beside_a_full_consumer_settles() {
    let config = paging_config(false, 4, 68, 1);
    let publish = |body_len| Cmd::Publish {
        persistent: false,
        ttl: None,
        body_len,
    };
    let cmds = vec![
        Cmd::Pressure { on: true },
        publish(1),
        publish(1),
        Cmd::Consume {
            prefetch: 3,
            no_ack: false,
        },
        publish(1),
        publish(33),
        publish(36),
        Cmd::Commit { n: 1, ok: false },
    ];
    if let Err(e) = case(config, cmds) {
        panic!("{e}");
    }
}

/// Found by a long run: a transient message with a TTL, spilled under memory pressure and
/// read back, expired twice.
#[test]
fn a_spilled_message_read_back_expires_once() {
    let config = paging_config(true, 2, 1_048_576, 5);
    let publish = |persistent, ttl| Cmd::Publish {
        persistent,
        ttl,
        body_len: 1,
    };
    let consume = Cmd::Consume {
        prefetch: 0,
        no_ack: false,
    };
    let read_back = Cmd::ReadBack { which: 0, ok: true };
    let cmds = vec![
        publish(false, None),
        publish(true, None),
        Cmd::Get { no_ack: false },
        publish(false, None),
        publish(true, None),
        publish(false, None),
        publish(false, None),
        Cmd::Commit { n: 2, ok: true },
        Cmd::Pressure { on: true },
        publish(false, Some(63)),
        consume.clone(),
        publish(false, None),
        Cmd::Cancel { which: 0 },
        read_back.clone(),
        publish(false, Some(1)),
        publish(true, Some(2)),
        publish(true, None),
        Cmd::Advance { ms: 63 },
        Cmd::Advance { ms: 1 },
        Cmd::Commit { n: 4, ok: true },
        consume,
        read_back,
        Cmd::Advance { ms: 1 },
        Cmd::Snapshot { which: 0 },
    ];
    if let Err(e) = case(config, cmds) {
        panic!("{e}");
    }
}

/// Found by a long run: a message larger than the whole window, read back for a `basic.get`
/// that found none, was paged out again and read again, without end.
#[test]
fn a_message_larger_than_the_window_read_back_stays() {
    let config = paging_config(true, 1, 40, 1);
    let cmds = vec![
        Cmd::Publish {
            persistent: true,
            ttl: None,
            body_len: 41,
        },
        Cmd::Commit { n: 1, ok: true },
        Cmd::Get { no_ack: false },
    ];
    if let Err(e) = case(config, cmds) {
        panic!("{e}");
    }
}
