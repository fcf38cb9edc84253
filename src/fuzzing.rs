//! Fuzzing entry points (hidden from the docs; not part of the supported API).
//!
//! [`run_connection`] drives one whole client connection from arbitrary bytes through the real
//! connection state machine, in memory: a fresh broker on a manual clock, a handshake, then the
//! bytes read as a script of operations (channels, declarations of queues and exchanges including
//! a delayed one, bindings, publishes with delays, expirations and dead-lettering, consumers,
//! gets, acks, transactions, confirms, clock advances, raw bytes, closes), each sent as valid
//! frames with arbitrary fields, while the server's output is read and discarded. Then it checks
//! the broker's accounting: once the connection is gone and every queue and exchange it left is
//! deleted, no memory is counted, no output is buffered, no delayed message is held.
//!
//! A panic anywhere (also in a broker task, which tokio would otherwise swallow) aborts the
//! process, which is what a fuzzer needs to see. The cargo-fuzz target is
//! `fuzz/fuzz_targets/connection.rs`; `tests/amqp/fuzz_connection.rs` runs the seed corpus and
//! pseudo-random inputs on stable.

use std::sync::Once;
use std::time::Duration;

use bytes::BytesMut;
use dwellmq_codec::methods::{
    BasicAck, BasicCancel, BasicConsume, BasicGet, BasicNack, BasicQos, BasicRecover, BasicReject,
    ChannelClose, ChannelFlow, ConfirmSelect, ConnectionClose, ConnectionOpen, ConnectionStartOk,
    ConnectionTuneOk, ExchangeBind, ExchangeDeclare, ExchangeDelete, ExchangeUnbind, QueueBind,
    QueueDeclare, QueueDelete, QueuePurge, QueueUnbind,
};
use dwellmq_codec::{
    encode_body, encode_header, encode_method, BasicProperties, ContentHeader, FieldTable,
    FieldValue, Method, ShortStr,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{Broker, BrokerConfig, BrokerHandle};

/// The manual clock's start (2026-01-01).
const T0_MS: u64 = 1_767_225_600_000;

/// At most this many operations per input (keeps one run short).
const MAX_OPS: usize = 400;

const QUEUES: [&str; 4] = ["q0", "q1", "q2", ""];
const EXCHANGES: [&str; 6] = ["x0", "d0", "d1", "", "amq.direct", "missing"];
const KEYS: [&str; 5] = ["k0", "k1", "#", "q0", "q1"];

/// Reads the input as a script.
struct Script<'a> {
    data: &'a [u8],
}

impl Script<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.data.split_first()?;
        self.data = rest;
        Some(first)
    }

    /// A byte, 0 once the input is used up (fields never stop a script; opcodes do).
    fn b(&mut self) -> u8 {
        self.byte().unwrap_or(0)
    }

    /// True for one value of the next byte in `n` (0 when the input is used up: true).
    fn one_in(&mut self, n: u8) -> bool {
        self.b().is_multiple_of(n)
    }

    fn flag(&mut self) -> bool {
        self.b() & 1 == 1
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.b(), self.b()])
    }

    fn pick<'s>(&mut self, from: &[&'s str]) -> &'s str {
        from[usize::from(self.b()) % from.len()]
    }

    fn channel(&mut self) -> u16 {
        // Mostly the first three channels, sometimes any.
        match self.b() {
            0..=249 => u16::from(self.b() % 3) + 1,
            _ => self.u16(),
        }
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }
}

/// Queue arguments from the script: TTLs, limits, dead-lettering, type.
fn queue_arguments(s: &mut Script<'_>) -> FieldTable {
    let mut args = FieldTable::new();
    let bits = s.b();
    if bits & 1 != 0 {
        args.insert("x-message-ttl", FieldValue::I32(i32::from(s.u16() % 2000)));
    }
    if bits & 2 != 0 {
        args.insert("x-max-length", FieldValue::I32(i32::from(s.b() % 8)));
    }
    if bits & 4 != 0 {
        args.insert("x-dead-letter-exchange", s.pick(&EXCHANGES));
    }
    if bits & 8 != 0 {
        args.insert("x-expires", FieldValue::I32(i32::from(s.u16() % 3000) + 1));
    }
    if bits & 16 != 0 {
        let overflow = s.pick(&["drop-head", "reject-publish", "reject-publish-dlx", "bad"]);
        args.insert("x-overflow", overflow);
    }
    if bits & 32 != 0 {
        args.insert("x-queue-type", s.pick(&["classic", "quorum", "stream"]));
    }
    if bits & 64 != 0 {
        args.insert("x-max-priority", FieldValue::I32(i32::from(s.b() % 12)));
    }
    if bits & 128 != 0 {
        args.insert("x-dead-letter-routing-key", s.pick(&KEYS));
    }
    args
}

fn properties(s: &mut Script<'_>) -> BasicProperties {
    let mut p = BasicProperties::default();
    let bits = s.b();
    if bits & 1 != 0 {
        let mut headers = FieldTable::new();
        headers.insert("x-delay", FieldValue::I32(i32::from(s.u16() as i16)));
        p.headers = Some(headers);
    }
    if bits & 2 != 0 {
        p.expiration = Some(ShortStr::from(format!("{}", s.u16() % 3000)));
    }
    if bits & 4 != 0 {
        p.delivery_mode = Some(s.b() % 3);
    }
    if bits & 8 != 0 {
        p.priority = Some(s.b() % 12);
    }
    if bits & 16 != 0 {
        p.reply_to = Some(ShortStr::from_static("amq.rabbitmq.reply-to"));
    }
    if bits & 32 != 0 {
        p.expiration = Some(ShortStr::from_static("not a number"));
    }
    p
}

/// Appends the frames of one operation to `out`; `None` ends the script.
enum Step {
    Frames,
    Advance(u64),
    Flush,
    Close,
}

fn step(s: &mut Script<'_>, out: &mut BytesMut, frame_max: u32) -> Option<Step> {
    let op = s.byte()?;
    let ch = s.channel();
    let method = match op % 24 {
        0 | 1 => Method::ChannelOpen,
        2 => Method::ChannelClose(ChannelClose {
            reply_code: 200,
            ..Default::default()
        }),
        3 => Method::ChannelCloseOk,
        op @ 4..=7 => declaration(op, s),
        8..=10 => {
            publish(s, out, ch, frame_max);
            return Some(Step::Frames);
        }
        op @ 11..=16 => consuming(op, s),
        17 => mode(s),
        18 => removal(s),
        op @ 19..=22 => return Some(control(op, s, out)),
        _ => Method::BasicRecover(BasicRecover { requeue: true }),
    };
    encode_method(out, ch, &method);
    Some(Step::Frames)
}

/// Ops 4 to 7: a queue or exchange declared, a queue or exchange bound.
fn declaration(op: u8, s: &mut Script<'_>) -> Method {
    match op {
        4 => Method::QueueDeclare(QueueDeclare {
            queue: s.pick(&QUEUES).into(),
            passive: s.one_in(8),
            durable: s.flag(),
            exclusive: s.flag(),
            auto_delete: s.flag(),
            no_wait: s.one_in(8),
            arguments: queue_arguments(s),
        }),
        5 => exchange_declare(s),
        6 => Method::QueueBind(QueueBind {
            queue: s.pick(&QUEUES).into(),
            exchange: s.pick(&EXCHANGES).into(),
            routing_key: s.pick(&KEYS).into(),
            ..Default::default()
        }),
        // 7
        _ => Method::ExchangeBind(ExchangeBind {
            destination: s.pick(&EXCHANGES).into(),
            source: s.pick(&EXCHANGES).into(),
            routing_key: s.pick(&KEYS).into(),
            ..Default::default()
        }),
    }
}

/// An exchange declared: the `d` ones as delayed exchanges (with a delayed type, maybe a bad one).
fn exchange_declare(s: &mut Script<'_>) -> Method {
    let exchange = s.pick(&EXCHANGES);
    let mut arguments = FieldTable::new();
    let kind = if exchange.starts_with('d') {
        arguments.insert(
            "x-delayed-type",
            s.pick(&["direct", "fanout", "topic", "bad"]),
        );
        "x-delayed-message"
    } else {
        s.pick(&["direct", "fanout", "topic", "headers", "bogus"])
    };
    Method::ExchangeDeclare(ExchangeDeclare {
        exchange: exchange.into(),
        kind: kind.into(),
        passive: s.one_in(8),
        durable: s.flag(),
        auto_delete: s.flag(),
        internal: s.one_in(8),
        no_wait: s.one_in(8),
        arguments,
    })
}

/// Ops 8 to 10: a publish with its header and body frames on channel `ch`.
fn publish(s: &mut Script<'_>, out: &mut BytesMut, ch: u16, frame_max: u32) {
    let publish = Method::BasicPublish(dwellmq_codec::methods::BasicPublish {
        exchange: s.pick(&EXCHANGES).into(),
        routing_key: s.pick(&KEYS).into(),
        mandatory: s.flag(),
        immediate: s.one_in(16),
    });
    let properties = properties(s);
    let len = usize::from(s.b()) * usize::from(s.b() % 4 + 1);
    let body = vec![s.b(); len];
    // Now and then a header that announces another size than the body sent.
    let announced = match s.b() % 16 {
        0 => len as u64 + u64::from(s.b()),
        1 => (len as u64).saturating_sub(1),
        _ => len as u64,
    };
    encode_method(out, ch, &publish);
    encode_header(
        out,
        ch,
        &ContentHeader {
            class_id: 60,
            body_size: announced,
            properties,
        },
    );
    let chunk = (frame_max as usize).saturating_sub(8).max(1);
    for piece in body.chunks(chunk) {
        encode_body(out, ch, piece);
    }
}

/// Ops 11 to 16: consumers, gets, acks, nacks and rejects, prefetch.
fn consuming(op: u8, s: &mut Script<'_>) -> Method {
    match op {
        11 => Method::BasicConsume(BasicConsume {
            queue: s.pick(&QUEUES).into(),
            consumer_tag: s.pick(&["", "c0", "c1"]).into(),
            no_ack: s.flag(),
            exclusive: s.one_in(8),
            ..Default::default()
        }),
        12 => Method::BasicCancel(BasicCancel {
            consumer_tag: s.pick(&["c0", "c1", "nope"]).into(),
            no_wait: s.flag(),
        }),
        13 => Method::BasicGet(BasicGet {
            queue: s.pick(&QUEUES).into(),
            no_ack: s.flag(),
        }),
        14 => Method::BasicAck(BasicAck {
            delivery_tag: u64::from(s.b() % 16),
            multiple: s.flag(),
        }),
        15 => {
            let delivery_tag = u64::from(s.b() % 16);
            if s.flag() {
                Method::BasicNack(BasicNack {
                    delivery_tag,
                    multiple: s.flag(),
                    requeue: s.flag(),
                })
            } else {
                Method::BasicReject(BasicReject {
                    delivery_tag,
                    requeue: s.flag(),
                })
            }
        }
        // 16
        _ => Method::BasicQos(BasicQos {
            prefetch_size: 0,
            prefetch_count: u16::from(s.b() % 4),
            global: s.flag(),
        }),
    }
}

/// Op 17: a channel mode (confirms, transactions) or a recover.
fn mode(s: &mut Script<'_>) -> Method {
    match s.b() % 5 {
        0 => Method::ConfirmSelect(ConfirmSelect { no_wait: s.flag() }),
        1 => Method::TxSelect,
        2 => Method::TxCommit,
        3 => Method::TxRollback,
        _ => Method::BasicRecover(BasicRecover { requeue: s.flag() }),
    }
}

/// Op 18: a purge, a deletion or an unbinding (or a flow).
fn removal(s: &mut Script<'_>) -> Method {
    match s.b() % 6 {
        0 => Method::QueuePurge(QueuePurge {
            queue: s.pick(&QUEUES).into(),
            no_wait: false,
        }),
        1 => Method::QueueDelete(QueueDelete {
            queue: s.pick(&QUEUES).into(),
            if_unused: s.flag(),
            if_empty: s.flag(),
            no_wait: false,
        }),
        2 => Method::QueueUnbind(QueueUnbind {
            queue: s.pick(&QUEUES).into(),
            exchange: s.pick(&EXCHANGES).into(),
            routing_key: s.pick(&KEYS).into(),
            arguments: FieldTable::new(),
        }),
        3 => Method::ExchangeDelete(ExchangeDelete {
            exchange: s.pick(&EXCHANGES).into(),
            if_unused: s.flag(),
            no_wait: false,
        }),
        4 => Method::ExchangeUnbind(ExchangeUnbind {
            destination: s.pick(&EXCHANGES).into(),
            source: s.pick(&EXCHANGES).into(),
            routing_key: s.pick(&KEYS).into(),
            ..Default::default()
        }),
        _ => Method::ChannelFlow(ChannelFlow { active: s.flag() }),
    }
}

/// Ops 19 to 22: the clock advanced, the output flushed, raw octets, the connection closed.
fn control(op: u8, s: &mut Script<'_>, out: &mut BytesMut) -> Step {
    match op {
        19 => Step::Advance(u64::from(s.u16())),
        20 => Step::Flush,
        21 => {
            // Raw octets: framing errors, unknown methods, garbage.
            let n = usize::from(s.b() % 32);
            out.extend_from_slice(s.take(n));
            Step::Frames
        }
        // 22
        _ => {
            if !s.one_in(4) {
                return Step::Frames;
            }
            encode_method(
                out,
                0,
                &Method::ConnectionClose(ConnectionClose {
                    reply_code: 200,
                    ..Default::default()
                }),
            );
            Step::Close
        }
    }
}

/// Aborts the process on any panic, also one inside a broker task.
fn abort_on_panic() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            // Straight to the process's stderr: a test harness's output capture would lose
            // the message with the abort.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "fuzzing: panic: {info}");
            std::process::abort();
        }));
    });
}

/// Drives one connection from `data` and checks the broker's accounting afterwards; panics
/// (aborting the process) on any failure.
pub fn run_connection(data: &[u8]) {
    abort_on_panic();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a tokio runtime: {e}"));
    runtime.block_on(drive(data));
}

async fn drive(data: &[u8]) {
    let config = BrokerConfig::ephemeral()
        .with_manual_clock(T0_MS)
        .with_name_seed(7);
    let broker = Broker::start(config)
        .await
        .unwrap_or_else(|e| panic!("the broker starts: {e}"));
    let (mut reader, mut writer) = tokio::io::split(broker.connect_in_memory());
    // The server's output is read and dropped as it comes, so that it never stops reading us.
    let drain = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while matches!(reader.read(&mut buf).await, Ok(n) if n > 0) {}
    });

    let mut script = Script { data };
    let frame_max = 4096 + u32::from(script.u16() % 4) * 32 * 1024;
    let mut out = BytesMut::new();
    out.extend_from_slice(b"AMQP\x00\x00\x09\x01");
    let mut response = b"\0guest\0guest".to_vec();
    if script.b() == 0xff {
        response = script.take(8).to_vec();
    }
    encode_method(
        &mut out,
        0,
        &Method::ConnectionStartOk(ConnectionStartOk {
            client_properties: FieldTable::new(),
            mechanism: "PLAIN".into(),
            response: response.into(),
            locale: "en_US".into(),
        }),
    );
    encode_method(
        &mut out,
        0,
        &Method::ConnectionTuneOk(ConnectionTuneOk {
            channel_max: 8,
            frame_max,
            heartbeat: 0,
        }),
    );
    encode_method(
        &mut out,
        0,
        &Method::ConnectionOpen(ConnectionOpen {
            virtual_host: "/".into(),
        }),
    );

    for _ in 0..MAX_OPS {
        let Some(step) = step(&mut script, &mut out, frame_max) else {
            break;
        };
        match step {
            Step::Frames => continue,
            Step::Close => break,
            Step::Flush => {}
            Step::Advance(ms) => {
                if send(&mut writer, &mut out).await.is_err() {
                    break;
                }
                settle_tasks().await;
                broker.advance(Duration::from_millis(ms));
            }
        }
        if send(&mut writer, &mut out).await.is_err() {
            break;
        }
        settle_tasks().await;
    }
    let _ = send(&mut writer, &mut out).await;
    let _ = writer.shutdown().await;
    // The broker ends the connection once it has read our end (or sooner, after an error).
    let _ = drain.await;
    drop(writer);
    wait_for(&broker, "the connection is gone", |b| {
        b.connection_count() == 0
    })
    .await;

    check_accounting(&broker).await;
    broker.shutdown().await;
}

async fn send<W: tokio::io::AsyncWrite + Unpin>(
    writer: &mut W,
    out: &mut BytesMut,
) -> std::io::Result<()> {
    let bytes = out.split();
    writer.write_all(&bytes).await
}

/// Lets the broker's tasks run what the frames sent so far set off.
async fn settle_tasks() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
}

async fn wait_for(broker: &BrokerHandle, what: &str, condition: impl Fn(&BrokerHandle) -> bool) {
    for _ in 0..10_000 {
        if condition(broker) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("fuzzing: timed out waiting until {what}");
}

/// Deletes what the connection left (queues, exchanges, with their held messages), then
/// checks that nothing is counted any more.
async fn check_accounting(broker: &BrokerHandle) {
    let state = broker.state();
    if let Some(vhost) = state.vhost("/") {
        for queue in vhost.queues() {
            let _ = vhost.delete_queue_instance_reporting(
                &queue,
                crate::broker::persist::DefinitionWrites::UNAWAITED,
            );
        }
        for exchange in vhost.exchanges() {
            if exchange.name.is_empty() || exchange.name.starts_with("amq.") {
                continue;
            }
            let _ = vhost.delete_exchange_reporting(
                &exchange.name,
                false,
                crate::broker::persist::DefinitionWrites::UNAWAITED,
            );
        }
    }
    wait_for(broker, "nothing is buffered for output", |b| {
        b.buffered_output() == 0
    })
    .await;
    assert_eq!(broker.delayed_total(), 0, "delayed messages left held");
    assert_eq!(
        broker.memory_used(),
        0,
        "memory still counted with no connection, queue or exchange left"
    );
}
