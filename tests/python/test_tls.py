"""AMQP over TLS with pika's SSLOptions: a broker of its own with a `[tls]` table, certificates
generated with the `openssl` CLI (a CA, the server's for localhost, a client's with CN guest),
password login over TLS, and the EXTERNAL mechanism with a client certificate."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import tempfile
from pathlib import Path

import pika
import pytest

def openssl(*args: str, cwd: Path) -> None:
    # Not a skip: without the CLI these tests would prove nothing, so they fail and say why.
    assert shutil.which("openssl"), "the TLS interop tests need the openssl CLI"
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def issue(dir: Path, name: str, subject: str, extfile: str | None = None) -> None:
    """`name`.key and `name`.pem, signed by ca.pem/ca.key."""
    openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", subject, cwd=dir)
    args = ["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2"]
    if extfile:
        (dir / f"{name}.ext").write_text(extfile)
        args += ["-extfile", f"{name}.ext"]
    openssl(*args, cwd=dir)


@pytest.fixture(scope="module")
def pki():
    dir = Path(tempfile.mkdtemp(prefix="dwellmq-tls-"))
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=dwellmq test CA", cwd=dir)
    issue(dir, "server", "/CN=localhost", "subjectAltName=DNS:localhost\n")
    issue(dir, "client", "/CN=guest", "extendedKeyUsage=clientAuth\n")
    yield dir
    shutil.rmtree(dir, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_tls_broker(own_broker, pki: Path, verify: str, fail: bool) -> int:
    port = free_port()
    own_broker(
        "[tls]\n"
        f'listen = ["127.0.0.1:{port}"]\n'
        f'certfile = "{pki / "server.pem"}"\n'
        f'keyfile = "{pki / "server.key"}"\n'
        f'cacertfile = "{pki / "ca.pem"}"\n'
        f'verify = "{verify}"\n'
        f"fail_if_no_peer_cert = {'true' if fail else 'false'}\n"
    )
    return port


def tls_params(pki: Path, port: int, client_cert: bool, **kwargs) -> pika.ConnectionParameters:
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if client_cert:
        context.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    return pika.ConnectionParameters(
        host="127.0.0.1",
        port=port,
        ssl_options=pika.SSLOptions(context, server_hostname="localhost"),
        **kwargs,
    )


def round_trip(connection: pika.BlockingConnection, queue: str) -> None:
    ch = connection.channel()
    ch.queue_declare(queue)
    ch.basic_publish("", queue, b"over tls")
    method, _props, body = ch.basic_get(queue, auto_ack=True)
    assert method is not None and body == b"over tls"


def test_pika_over_tls_with_a_password(own_broker, pki, name):
    port = start_tls_broker(own_broker, pki, "verify_none", False)
    params = tls_params(pki, port, False, credentials=pika.PlainCredentials("guest", "guest"))
    connection = pika.BlockingConnection(params)
    try:
        round_trip(connection, name("tls"))
    finally:
        connection.close()


def test_pika_external_login_with_a_client_certificate(own_broker, pki, name):
    port = start_tls_broker(own_broker, pki, "verify_peer", True)
    params = tls_params(pki, port, True, credentials=pika.credentials.ExternalCredentials())
    connection = pika.BlockingConnection(params)
    try:
        round_trip(connection, name("external"))
    finally:
        connection.close()


def test_a_client_without_a_certificate_is_refused_with_fail_if_no_peer_cert(own_broker, pki):
    port = start_tls_broker(own_broker, pki, "verify_peer", True)
    params = tls_params(pki, port, False, credentials=pika.PlainCredentials("guest", "guest"))
    with pytest.raises(pika.exceptions.AMQPConnectionError) as refused:
        pika.BlockingConnection(params)
    # Refused in the handshake for want of a certificate (TLS 1.3's certificate_required
    # alert), not for any other reason a connection can fail.
    assert "CERTIFICATE_REQUIRED" in repr(refused.value).upper(), repr(refused.value)
