"""`/metrics` read as Prometheus reads it: the official client's parser
(`prometheus_client.parser.text_string_to_metric_families`) accepts the whole text, and every
family the RabbitMQ-Overview dashboard queries (issue 26) is there with RabbitMQ's type; the
global counters move when pika publishes and consumes.

Starts a broker of its own with the HTTP listener on an ephemeral port (the shared one runs
with `--http off`). Needs `python3 -m pip install prometheus-client`.
"""

from __future__ import annotations

import os
import subprocess
import threading
import urllib.request

import pika
import pytest

from prometheus_client import parser

from conftest import (
    STARTUP_TIMEOUT,
    STOP_TIMEOUT,
    broker_binary,
    skip_outside_ci,
    with_default_vhost,
)

# (name, type) as the client's parser reports them: it drops a counter's `_total` suffix
# from the family name, and RabbitMQ's info families are untyped ("unknown").
DASHBOARD_FAMILIES = [
    ("rabbitmq_identity_info", "unknown"),
    ("rabbitmq_build_info", "unknown"),
    ("rabbitmq_erlang_uptime_seconds", "gauge"),
    ("rabbitmq_process_resident_memory_bytes", "gauge"),
    ("rabbitmq_resident_memory_limit_bytes", "gauge"),
    ("rabbitmq_process_open_fds", "gauge"),
    ("rabbitmq_process_max_fds", "gauge"),
    ("rabbitmq_disk_space_available_bytes", "gauge"),
    ("rabbitmq_disk_space_available_limit_bytes", "gauge"),
    ("rabbitmq_connections", "gauge"),
    ("rabbitmq_connections_opened", "counter"),
    ("rabbitmq_connections_closed", "counter"),
    ("rabbitmq_channels", "gauge"),
    ("rabbitmq_channels_opened", "counter"),
    ("rabbitmq_channels_closed", "counter"),
    ("rabbitmq_queues", "gauge"),
    ("rabbitmq_queues_declared", "counter"),
    ("rabbitmq_queues_created", "counter"),
    ("rabbitmq_queues_deleted", "counter"),
    ("rabbitmq_queue_messages_ready", "gauge"),
    ("rabbitmq_queue_messages_unacked", "gauge"),
    ("rabbitmq_global_consumers", "gauge"),
    ("rabbitmq_global_publishers", "gauge"),
    ("rabbitmq_global_messages_received", "counter"),
    ("rabbitmq_global_messages_received_confirm", "counter"),
    ("rabbitmq_global_messages_routed", "counter"),
    ("rabbitmq_global_messages_unroutable_dropped", "counter"),
    ("rabbitmq_global_messages_unroutable_returned", "counter"),
    ("rabbitmq_global_messages_confirmed", "counter"),
    ("rabbitmq_global_messages_delivered", "counter"),
    ("rabbitmq_global_messages_delivered_consume_auto_ack", "counter"),
    ("rabbitmq_global_messages_delivered_consume_manual_ack", "counter"),
    ("rabbitmq_global_messages_delivered_get_auto_ack", "counter"),
    ("rabbitmq_global_messages_delivered_get_manual_ack", "counter"),
    ("rabbitmq_global_messages_get_empty", "counter"),
    ("rabbitmq_global_messages_redelivered", "counter"),
    ("rabbitmq_global_messages_acknowledged", "counter"),
    ("rabbitmq_message_size_bytes", "histogram"),
]


@pytest.fixture(scope="module")
def broker_with_http():
    """(AMQP URL, HTTP base URL) of a broker of this module's own."""
    if os.environ.get("DWELLMQ_URL"):
        skip_outside_ci("needs a dwellmq of its own; DWELLMQ_URL points at an external broker")
    proc = subprocess.Popen(
        [
            str(broker_binary()),
            "--listen",
            "127.0.0.1:0",
            "--in-memory",
            "--http",
            "127.0.0.1:0",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, NO_COLOR="1"),
    )
    lines: list[str] = []

    def read_two_lines() -> None:
        for _ in range(2):
            lines.append(proc.stdout.readline().decode().strip())

    reader = threading.Thread(target=read_two_lines, daemon=True)
    reader.start()
    reader.join(STARTUP_TIMEOUT)
    try:
        assert len(lines) == 2 and lines[1].startswith("http://"), f"broker printed {lines}"
        # Keep draining stdout so the broker can never block on a full pipe.
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
        yield with_default_vhost(lines[0]), lines[1]
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)


def scrape(http_url: str, path: str = "/metrics") -> dict:
    with urllib.request.urlopen(http_url + path, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return {family.name: family for family in parser.text_string_to_metric_families(text)}


def sample(families: dict, family: str, sample_name: str, **labels) -> float:
    values = [
        s.value
        for s in families[family].samples
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(values) == 1, f"{sample_name}{labels}: {values}"
    return values[0]


@pytest.mark.parametrize("path", ["/metrics", "/metrics/per-object"])
def test_every_dashboard_family_is_there(broker_with_http, path):
    _, http_url = broker_with_http
    families = scrape(http_url, path)
    for name, kind in DASHBOARD_FAMILIES:
        assert name in families, f"{name} missing from {path}"
        assert families[name].type == kind, f"{name}: {families[name].type}"
    identity = families["rabbitmq_identity_info"].samples[0].labels
    assert identity["rabbitmq_node"] and identity["rabbitmq_cluster"]


def test_global_counters_follow_pika_traffic(broker_with_http):
    amqp_url, http_url = broker_with_http
    before = scrape(http_url)
    received = "rabbitmq_global_messages_received"
    delivered = "rabbitmq_global_messages_delivered_get_auto_ack"
    classic = {"protocol": "amqp091", "queue_type": "rabbit_classic_queue"}

    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"0123456789")
        method, _, body = channel.basic_get(queue, auto_ack=True)
        assert body == b"0123456789"
        after = scrape(http_url)
    finally:
        connection.close()

    def moved(family: str, sample_name: str, **labels) -> float:
        return sample(after, family, sample_name, **labels) - sample(
            before, family, sample_name, **labels
        )

    assert moved(received, received + "_total", protocol="amqp091") == 1
    assert moved(
        "rabbitmq_global_messages_received_confirm",
        "rabbitmq_global_messages_received_confirm_total",
        protocol="amqp091",
    ) == 1
    assert moved(delivered, delivered + "_total", **classic) == 1
    size = "rabbitmq_message_size_bytes"
    assert moved(size, size + "_bucket", protocol="amqp091", le="100") == 1
    assert moved(size, size + "_sum", protocol="amqp091") == 10
