"""Why a Kafka client could not connect, in words an operator can act on.

kafka-python reports a failed bootstrap as ``NoBrokersAvailable`` or a timeout and logs the real
cause (an authentication failure, an untrusted certificate) on its own logger. ``connect_admin``
collects those log lines while it connects, and ``explain`` turns the failure into:

* ``KafkaAuthError`` (a ``ConfigError``: no retry fixes it, the task fails at once): wrong
  password or unknown user, untrusted or mismatched certificate, a plaintext client at a TLS
  listener (or the reverse), an ACL denial;
* ``KafkaUnreachableError`` (retriable): nothing answered.

Both name the connection, the broker and the likely fix, never a secret.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from offsetbatch.errors import KafkaAuthError, KafkaConnectionError, KafkaUnreachableError, OffsetbatchError

if TYPE_CHECKING:
    from kafka import KafkaAdminClient

    from offsetbatch.source.connection import KafkaClientConfig

CONNECT_TIMEOUT_MS = 10_000  # Kafka clients' own socket.connection.setup.timeout.ms default
# A broker that accepts connections but has not finished the Kafka handshake in CONNECT_TIMEOUT_MS is
# slow (a loaded host, a GC pause), not absent: it gets this much longer before the failure is
# explained, so that a wrong password still fails at once instead of looking unreachable (retried).
SLOW_BROKER_TIMEOUT_MS = 30_000
log = logging.getLogger(__name__)


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(record.getMessage())
        except Exception:  # noqa: BLE001 - a bad log call must not hide the real failure
            pass


@contextmanager
def _collect_kafka_logs() -> Iterator[_Collector]:
    """kafka-python's log lines while connecting, kept for ``explain`` instead of printed: a
    connection that works needs none of them, one that fails gets one clear error."""
    logger = logging.getLogger("kafka")
    handler = _Collector()
    old_level, old_propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        logger.propagate = old_propagate


_CONNECTING = threading.Lock()  # the collector borrows the process-wide "kafka" logger (UI threads)


def connect_admin(client: "KafkaClientConfig") -> "KafkaAdminClient":
    """kafka-python's admin client for ``client``, or a ``KafkaAuthError``/``KafkaUnreachableError``."""
    from kafka import KafkaAdminClient

    def admin(timeout_ms: int) -> "KafkaAdminClient":
        return KafkaAdminClient(**{"client_id": "offsetbatch", **client.kafka_python()},
                                request_timeout_ms=30_000, bootstrap_timeout_ms=timeout_ms)

    with _CONNECTING, _collect_kafka_logs() as logs:
        try:
            return admin(CONNECT_TIMEOUT_MS)
        except Exception as exc:  # noqa: BLE001 - every failure is explained below
            error = explain(exc, client, logs.lines)
            if not isinstance(error, KafkaUnreachableError) or _listener(client.bootstrap) is None:
                raise error from exc
        log.warning("%s: the broker accepts connections but did not answer within %d s; waiting up to %d s more",
                    client.describe(), CONNECT_TIMEOUT_MS // 1000, SLOW_BROKER_TIMEOUT_MS // 1000)
        try:
            return admin(SLOW_BROKER_TIMEOUT_MS)
        except Exception as exc:  # noqa: BLE001
            error = explain(exc, client, logs.lines)
            if isinstance(error, KafkaUnreachableError):
                waited = (CONNECT_TIMEOUT_MS + SLOW_BROKER_TIMEOUT_MS) // 1000
                error = KafkaUnreachableError(
                    f"Kafka {client.describe()}: the broker accepts connections but did not answer the Kafka handshake "
                    f"within {waited} s ({type(exc).__name__}: {exc}). It is overloaded or stuck; check its log. The "
                    f"task's retries try again.")
            raise error from exc


def explain(exc: BaseException, client: "KafkaClientConfig", logged: list[str] | None = None,
            doing: str = "connect") -> OffsetbatchError:
    """The operator's version of a Kafka client failure (see the module docstring)."""
    from kafka import errors as kerr

    where = f"Kafka {client.describe()}"
    text = " ".join([f"{type(exc).__name__}: {exc}", *(logged or [])])
    low = text.lower()
    user = client.settings.get("sasl.username")
    if isinstance(exc, kerr.KafkaConfigurationError):
        return KafkaConnectionError(f"{where}: kafka-python refused the settings: {exc}. Fix the connection's extra.")
    if "unsupportedsaslmechanism" in low or "unsupported sasl mechanism" in low:
        return KafkaAuthError(
            f"{where}: the broker does not enable SASL mechanism {client.mechanism} on this listener. Set "
            f"sasl.mechanism of connection '{client.conn_id}' to one the broker enables. Nothing was changed.")
    if "bad decrypt" in low or "pem lib" in low or "bad password" in low:
        return KafkaConnectionError(
            f"{where}: the client key could not be loaded (wrong ssl.key.password, or not a PEM key). Fix "
            f"ssl.key.location / ssl.key.password of connection '{client.conn_id}'. Nothing was changed.")
    if "certificate required" in low or "certificate_required" in low:
        return KafkaAuthError(
            f"{where}: the broker requires a client certificate. Set ssl.certificate.location and ssl.key.location "
            f"of connection '{client.conn_id}'. Nothing was changed.")
    refused = isinstance(exc, kerr.SaslAuthenticationFailedError) or "authentication failed" in low or \
        "sasl" in low and "fail" in low
    if refused or client.uses_sasl and _closed_after_handshake(logged or []) >= 2:
        return KafkaAuthError(
            f"{where}: authentication failed for user {user!r} ({client.mechanism}). The password is wrong or the "
            f"user does not exist on the broker (SCRAM does not say which). Fix sasl.username / sasl.password of "
            f"connection '{client.conn_id}', or create the user on the cluster. Nothing was changed."
            + ("" if refused else " (The broker answered, then closed each connection during the SASL exchange.)"))
    if "certificate_verify_failed" in low or "certificate verify failed" in low or isinstance(exc, ssl.SSLCertVerificationError):
        if "hostname" in low or "ip address mismatch" in low:
            fix = ("its certificate does not name the host in bootstrap.servers: use the name the certificate has, or "
                   "(not recommended) set ssl.endpoint.identification.algorithm to none")
        else:
            fix = ("its certificate is not trusted: set ssl.ca.location of connection "
                   f"'{client.conn_id}' to the PEM file of the CA that signed the broker's certificate")
        return KafkaAuthError(f"{where}: the TLS handshake failed, {fix}. Nothing was changed.")
    if isinstance(exc, kerr.AuthorizationError) or "authorization" in low and "fail" in low:
        return KafkaAuthError(
            f"{where}: the broker denied {user or 'this client'!r} ({type(exc).__name__}) while trying to {doing}. "
            f"The pipeline's user needs DESCRIBE and READ on its topics and READ on its consumer group; ask the "
            f"cluster's admins for these ACLs. Nothing was changed.")
    listener = _listener(client.bootstrap)
    if listener in ("http", "https"):
        return KafkaConnectionError(
            f"{where}: {client.bootstrap.split(',')[0].strip()} answers {listener.upper()}, not the Kafka protocol: "
            f"bootstrap.servers of connection '{client.conn_id}' names a web endpoint (a REST proxy, schema registry "
            f"or UI?). Give the brokers' Kafka listener host:port. Nothing was changed.")
    speaks_tls = {"tls": True, "plain": False}.get(listener)
    if speaks_tls is True and not client.uses_tls:
        return KafkaAuthError(
            f"{where}: the broker's port speaks TLS but the connection's security.protocol is {client.protocol}. "
            f"Set security.protocol to SSL or SASL_SSL (and ssl.ca.location). Nothing was changed.")
    if speaks_tls is False and client.uses_tls:
        return KafkaAuthError(
            f"{where}: the connection's security.protocol is {client.protocol} but the broker's port does not speak "
            f"TLS. Set security.protocol to PLAINTEXT or SASL_PLAINTEXT, or use the broker's TLS port. Nothing was changed.")
    if speaks_tls is True and client.uses_tls and not client.uses_sasl and "disconnect" in low:
        return KafkaAuthError(
            f"{where}: the broker closed the connection after the TLS handshake; its listener probably wants SASL. "
            f"Set security.protocol to SASL_SSL with sasl.mechanism, sasl.username and sasl.password. Nothing was changed.")
    return KafkaUnreachableError(
        f"{where}: no broker answered within {CONNECT_TIMEOUT_MS // 1000} s ({type(exc).__name__}: {exc}). Is the "
        f"cluster up and {client.bootstrap} reachable from this host? The task's retries try again.")


def _closed_after_handshake(logged: list[str]) -> int:
    """How many connections the broker closed right after answering the client's first request
    (kafka-python logs "Broker version identified", then "socket disconnected"). With SASL that is
    the broker refusing the login: kafka-python does not always see the refusal itself before the
    socket closes, and a slow broker never answers, so the two are not confused."""
    closed, answered = 0, False
    for line in logged:
        if "Broker version identified" in line:
            answered = True
        elif "socket disconnected" in line and answered:
            closed, answered = closed + 1, False
    return closed


# A Kafka ApiVersions v0 request (a broker answers it before any authentication), followed by a
# blank line so that an HTTP server, which waits for the end of its request's head, answers too.
_CORRELATION = 0x0B5E7
_CLIENT_ID = b"offsetbatch-probe"
_HEADER = struct.pack(">hhih", 18, 0, _CORRELATION, len(_CLIENT_ID)) + _CLIENT_ID
_PROBE = struct.pack(">i", len(_HEADER)) + _HEADER + b"\r\n\r\n"


def _answer(sock: socket.socket) -> str:
    """What answered the probe: 'kafka' (the correlation id echoed), 'http', or 'other'."""
    try:
        sock.sendall(_PROBE)
        head = b""
        while len(head) < 8:
            chunk = sock.recv(8 - len(head))
            if not chunk:
                break
            head += chunk
    except (OSError, ssl.SSLError):
        return "other"
    if head.startswith((b"HTTP/", b"<")):  # a status line, or an HTTP/0.9-style error page (never a Kafka length)
        return "http"
    return "kafka" if len(head) == 8 and struct.unpack(">i", head[4:])[0] == _CORRELATION else "other"


def _listener(bootstrap: str, timeout_s: float = 3.0) -> str | None:
    """What the first bootstrap address speaks: 'tls' or 'plain' (anything else that is not HTTP),
    'https' or 'http' (a web endpoint, not a Kafka listener); ``None`` when nothing listens. The
    certificate is not checked: this only tells the protocols apart."""
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    address = (host.strip("[]"), int(port)) if port.isdigit() else None
    if address is None:
        return None
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection(address, timeout=timeout_s) as sock:
            try:
                with ctx.wrap_socket(sock, server_hostname=address[0]) as tls:
                    return "https" if _answer(tls) == "http" else "tls"
            except (ssl.SSLError, OSError):
                pass
        with socket.create_connection(address, timeout=timeout_s) as sock:
            return "http" if _answer(sock) == "http" else "plain"
    except (OSError, ValueError):
        return None
