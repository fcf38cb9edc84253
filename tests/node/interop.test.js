// amqplib against the real dwellmq binary: the README's Node.js example and the everyday path.
// Run: npm install --prefix tests/node && node --test tests/node/
"use strict";

const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { spawn, execFileSync } = require("node:child_process");
const path = require("node:path");
const readline = require("node:readline");
const amqp = require("amqplib");
const defs = require("amqplib/lib/defs");

const root = path.resolve(__dirname, "..", "..");
const targetDir = process.env.CARGO_TARGET_DIR || path.join(root, "target");
let broker;
let url;

// $DWELLMQ_BIN when set (CI passes the one debug build every step shares), else a debug build.
function brokerBinary() {
  if (process.env.DWELLMQ_BIN) return process.env.DWELLMQ_BIN;
  execFileSync("cargo", ["build", "--quiet", "--bin", "dwellmq"], { cwd: root, stdio: "inherit" });
  return path.join(targetDir, "debug", "dwellmq");
}

// Bounded, as every wait here (CI also runs `node --test --test-timeout`): a broker that never
// prints its URL fails the run instead of hanging it.
before(async () => {
  broker = spawn(brokerBinary(), ["--listen", "127.0.0.1:0", "--in-memory", "--http", "off"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  url = await new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: broker.stdout });
    lines.once("line", resolve);
    broker.once("exit", (code) => reject(new Error(`broker exited with ${code}`)));
  });
}, { timeout: 60000 });

after(() => {
  if (broker) broker.kill("SIGTERM");
});

let counter = 0;
const unique = (name) => `${name}-${process.pid}-${++counter}`;

// Consumes `count` messages from `queue` with one consumer, acking each, then cancels and
// resolves with every message seen up to the cancel-ok: a duplicate or an extra delivery shows
// up in the result instead of being acked and dropped. Rejects after a hang guard.
function consumeExactly(ch, queue, count) {
  return new Promise((resolve, reject) => {
    const got = [];
    const guard = setTimeout(() => reject(new Error(`${got.length}/${count} messages on ${queue}`)), 10000);
    ch.consume(queue, (msg) => {
      got.push(msg);
      ch.ack(msg);
      if (got.length === count) {
        clearTimeout(guard);
        ch.cancel(msg.fields.consumerTag).then(() => resolve(got), reject);
      }
    }).catch(reject);
  });
}

test("the README example: a delayed exchange with confirms", async () => {
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  const exchange = unique("retries");
  const queue = unique("webhooks");
  await ch.assertExchange(exchange, "x-delayed-message", { arguments: { "x-delayed-type": "direct" } });
  await ch.assertQueue(queue);
  await ch.bindQueue(queue, exchange, "webhook");
  // amqplib sends integers below 128 as a signed byte, which the plugin (and dwellmq) read as
  // "no delay": real delays are larger anyway.
  ch.publish(exchange, "webhook", Buffer.from("later"), { headers: { "x-delay": 400 } });
  ch.publish(exchange, "webhook", Buffer.from("sooner"), { headers: { "x-delay": 200 } });
  await ch.waitForConfirms();
  const got = await consumeExactly(ch, queue, 2);
  assert.deepEqual(
    got.map((msg) => msg.content.toString()),
    ["sooner", "later"],
  );
  assert.equal(got[0].properties.headers["x-delay"], -200);
  assert.equal(got[1].properties.headers["x-delay"], -400);
  assert.equal((await ch.checkQueue(queue)).messageCount, 0);
  await conn.close();
});

test("publish, get, nack with requeue, and properties round trip", async () => {
  const conn = await amqp.connect(url);
  const ch = await conn.createChannel();
  const queue = unique("q");
  await ch.assertQueue(queue);
  ch.sendToQueue(queue, Buffer.from("hello"), {
    contentType: "text/plain",
    correlationId: "c-1",
    headers: { nested: { n: 1 }, list: [1, "two"] },
  });
  const got = await ch.get(queue);
  assert.ok(got, "a message");
  assert.equal(got.content.toString(), "hello");
  assert.equal(got.properties.contentType, "text/plain");
  assert.equal(got.properties.correlationId, "c-1");
  assert.deepEqual(got.properties.headers.nested, { n: 1 });
  assert.equal(got.fields.redelivered, false);
  ch.nack(got, false, true);
  const again = await ch.get(queue);
  assert.equal(again.fields.redelivered, true);
  ch.ack(again);
  assert.equal(await ch.get(queue), false);
  await conn.close();
});

test("a channel error is a 404 with RabbitMQ's text and the connection survives", async () => {
  const conn = await amqp.connect(url);
  const ch = await conn.createChannel();
  ch.on("error", () => {});
  const missing = unique("missing");
  await assert.rejects(ch.checkQueue(missing), (err) => {
    assert.equal(err.code, 404);
    assert.match(err.message, new RegExp(`NOT_FOUND - no queue '${missing}' in vhost '/'`));
    return true;
  });
  const fresh = await conn.createChannel();
  const { queue } = await fresh.assertQueue("", { exclusive: true });
  assert.match(queue, /^amq\.gen-/);
  await conn.close();
});

test("topic routing through an exchange-to-exchange binding", async () => {
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  const front = unique("front");
  const back = unique("back");
  const queue = unique("q");
  await ch.assertExchange(front, "topic");
  await ch.assertExchange(back, "fanout");
  await ch.bindExchange(back, front, "orders.#");
  await ch.assertQueue(queue);
  await ch.bindQueue(queue, back, "");
  ch.publish(front, "orders.eu.new", Buffer.from("routed"));
  ch.publish(front, "users.new", Buffer.from("not routed"));
  await ch.waitForConfirms();
  const { messageCount } = await ch.checkQueue(queue);
  assert.equal(messageCount, 1);
  await conn.close();
});

test("direct reply-to: an RPC round trip through amq.rabbitmq.reply-to", async () => {
  const conn = await amqp.connect(url);
  const client = await conn.createChannel();
  const server = await conn.createChannel();
  const requests = unique("rpc");
  await server.assertQueue(requests);
  await server.consume(
    requests,
    (msg) => {
      assert.match(msg.properties.replyTo, /^amq\.rabbitmq\.reply-to\./);
      server.sendToQueue(msg.properties.replyTo, Buffer.from(`pong:${msg.content}`), {
        correlationId: msg.properties.correlationId,
      });
    },
    { noAck: true },
  );
  const reply = new Promise((resolve, reject) => {
    const guard = setTimeout(() => reject(new Error("no reply")), 10000);
    client
      .consume(
        "amq.rabbitmq.reply-to",
        (msg) => {
          clearTimeout(guard);
          resolve(msg);
        },
        { noAck: true },
      )
      .then(() =>
        client.sendToQueue(requests, Buffer.from("ping"), {
          replyTo: "amq.rabbitmq.reply-to",
          correlationId: "c-42",
        }),
      )
      .catch(reject);
  });
  const msg = await reply;
  assert.equal(msg.content.toString(), "pong:ping");
  assert.equal(msg.properties.correlationId, "c-42");
  await conn.close();
});

// Rejects after `ms` (a hang guard, not a timing assertion).
function within(ms, promise, what) {
  let guard;
  const timeout = new Promise((_, reject) => {
    guard = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(guard));
}

test("close completes while the write buffer is still full", async () => {
  // amqplib's own suite hit this: the broker must keep reading after its close-ok until the
  // client closes, or the socket is reset under amqplib and close() never settles.
  const conn = await amqp.connect(url);
  const errors = [];
  conn.on("error", (err) => errors.push(err));
  const ch = await conn.createChannel();
  const queue = unique("full");
  await ch.assertQueue(queue);
  // 16 MiB queued on the socket: still being written when close() sends connection.close.
  const body = Buffer.alloc(256 * 1024);
  for (let i = 0; i < 64; i++) ch.sendToQueue(queue, body);
  await within(10000, conn.close(), "close");
  assert.deepEqual(errors, []);
});

test("channel.flow active=false closes the connection with 540, as RabbitMQ does", async () => {
  const conn = await amqp.connect(url);
  const closed = new Promise((resolve) => conn.once("close", resolve));
  conn.on("error", () => {});
  const ch = await conn.createChannel();
  ch.on("error", () => {});
  // amqplib has no flow() of its own: send the method through its generic RPC.
  await assert.rejects(ch.rpc(defs.ChannelFlow, { active: false }, defs.ChannelFlowOk));
  const err = await within(10000, closed, "connection close");
  assert.equal(err.code, 540);
  assert.match(err.message, /NOT_IMPLEMENTED - active=false/);
});
