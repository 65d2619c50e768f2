"""The development tooling's Kafka 4 broker (``offsetbatch-stack kafka``: KRaft, from Maven Central jars),
exercised with kafka-python: what the suite's and the demo's broker does, not what offsetbatch does."""

from __future__ import annotations

import json
import logging
import re
import socket
import stat
import time
from pathlib import Path

import pytest
from harness import worker_port
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import (
    GroupAuthorizationFailedError,
    KafkaTimeoutError,
    TopicAuthorizationFailedError,
)
from kafka.structs import OffsetAndMetadata

from offsetbatch_dev.stack.kafka_broker import BrokerError, KafkaBroker

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 1, client: dict | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **(client or {}))
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **(client or {}))
    for i, v in enumerate(values):
        producer.send(topic, value=v, partition=i % partitions)
    producer.flush()
    producer.close()


def _consume_all(bootstrap: str, topic: str, partitions: int = 1, client: dict | None = None) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000,
                             **(client or {}))
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    end = consumer.end_offsets(tps)
    out: list[bytes] = []
    while any(consumer.position(tp) < end[tp] for tp in tps):
        for records in consumer.poll(timeout_ms=2000).values():
            out.extend(r.value for r in records)
    consumer.close()
    return out


@pytest.mark.parametrize("broker_fixture", ["kafka_broker", "secure_kafka_broker"])
def test_produce_and_consume(broker_fixture, request):
    """Plaintext, and SASL_SSL as ``admin`` (CA-verified, hostname checked): same records back."""
    broker = request.getfixturevalue(broker_fixture)
    values = [f"record-{i}".encode() for i in range(500)]
    _produce(broker.bootstrap, "broker-smoke", values, partitions=3, client=broker.client_kwargs())
    assert sorted(_consume_all(broker.bootstrap, "broker-smoke", 3, client=broker.client_kwargs())) == sorted(values)


def test_start_twice_is_harmless(kafka_broker):
    pid = kafka_broker.pid()
    kafka_broker.start()
    assert kafka_broker.pid() == pid


def test_port_in_use_is_a_clear_error(test_state):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        broker = KafkaBroker(port=port, home=test_state / "kafka-port-clash")
        with pytest.raises(BrokerError, match=f"port 127.0.0.1:{port} is already in use"):
            broker.start()


def test_restart_keeps_data_and_wipe_removes_it(test_state):
    broker = KafkaBroker(port=worker_port(29092), home=test_state / "kafka-restart")
    broker.wipe()
    broker.start()
    try:
        values = [f"durable-{i}".encode() for i in range(100)]
        _produce(broker.bootstrap, "durable", values)
        broker.stop(hard=True)  # a crash, not a clean shutdown
        assert broker.pid() is None
        broker.start()
        assert _consume_all(broker.bootstrap, "durable") == values
    finally:
        broker.wipe()
    assert not broker.data_dir.exists()


# --- the secured broker (issue 16): SASL_SSL, SCRAM-SHA-512, local CA, StandardAuthorizer ----------

SECURE_TOPIC, SECURE_GROUP, FORBIDDEN_TOPIC = "secure-pipeline", "secure-pipeline-group", "secure-forbidden"
SECURE_VALUES = [f"secret-record-{i}".encode() for i in range(50)]
FAIL_FAST = {"bootstrap_timeout_ms": 3000, "request_timeout_ms": 3000}


def _kafka_python(extra: dict[str, str]) -> dict:
    """The test's own reading of an Airflow Kafka connection extra (the project's translation is
    tested elsewhere): proves the extra the broker hands out is complete and correct."""
    return {
        "bootstrap_servers": extra["bootstrap.servers"],
        "security_protocol": extra["security.protocol"],
        "sasl_mechanism": extra["sasl.mechanism"],
        "sasl_plain_username": extra["sasl.username"],
        "sasl_plain_password": extra["sasl.password"],
        "ssl_cafile": extra["ssl.ca.location"],
        "ssl_check_hostname": True,
    }


@pytest.fixture(scope="module")
def secured(secure_kafka_broker):
    """Admin writes the pipeline's topic and a topic the pipeline may not touch; the pipeline user
    gets only ``grant_pipeline``'s ACLs."""
    broker = secure_kafka_broker
    _produce(broker.bootstrap, SECURE_TOPIC, SECURE_VALUES, client=broker.client_kwargs())
    _produce(broker.bootstrap, FORBIDDEN_TOPIC, [b"not yours"], client=broker.client_kwargs())
    broker.grant_pipeline([SECURE_TOPIC], SECURE_GROUP)
    return broker


def _granted_topics(broker: KafkaBroker, user: str) -> set[str]:
    """The topics the broker's authorizer lets ``user`` DESCRIBE, read back from the broker as admin."""
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )

    admin = broker.admin_client(request_timeout_ms=10_000)
    try:
        acls, error = admin.describe_acls(ACLFilter(
            principal=f"User:{user}", host="*", operation=ACLOperation.DESCRIBE,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, None, ACLResourcePatternType.LITERAL)))
    finally:
        admin.close()
    assert error.errno == 0, error
    return {acl.resource_pattern.resource_name for acl in acls}


def _existing_topics(broker: KafkaBroker) -> set[str]:
    admin = broker.admin_client(request_timeout_ms=10_000)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def _pipeline_reads(broker: KafkaBroker) -> None:
    """What a pipeline does, as ``pipeline`` with its connection extra: list topics, read its topic
    from the log start to the end, commit the frontier to its group."""
    client = _kafka_python(broker.connection_extra("pipeline"))
    consumer = KafkaConsumer(**client, group_id=SECURE_GROUP, enable_auto_commit=False, **FAIL_FAST)
    try:
        # DESCRIBE only where granted: other modules' pipelines on this broker hold their own grants
        visible = consumer.topics()
        assert SECURE_TOPIC in visible and FORBIDDEN_TOPIC not in visible
        assert visible == _granted_topics(broker, "pipeline") & _existing_topics(broker)
        tp = TopicPartition(SECURE_TOPIC, 0)
        end = consumer.end_offsets([tp])[tp]
        assert end == len(SECURE_VALUES)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                got.extend(r.value for r in records)
        assert got == SECURE_VALUES
        consumer.commit({tp: OffsetAndMetadata(end, "", -1)})
        assert consumer.committed(tp) == end
    finally:
        consumer.close()


def test_secure_pipeline_user_lists_reads_and_commits(secured):
    assert secured.connection_extra("pipeline") == {
        "bootstrap.servers": secured.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "pipeline",
        "sasl.password": secured.connection_extra("pipeline")["sasl.password"],
        "ssl.ca.location": str(secured.ca_file),
    }
    _pipeline_reads(secured)


def _wrong_password(c: dict) -> dict:
    return {**c, "sasl_plain_password": c["sasl_plain_password"] + "x"}


def _unknown_user(c: dict) -> dict:
    return {**c, "sasl_plain_username": "mallory"}


def _no_ca(c: dict) -> dict:  # the system trust store does not know the local CA
    return {k: v for k, v in c.items() if k != "ssl_cafile"}


def _plaintext(c: dict) -> dict:
    return {"bootstrap_servers": c["bootstrap_servers"]}


SASL_REFUSED = (
    # kafka-python 3.0.12 loses the broker's SaslAuthenticate error response when it arrives in the
    # same read as the connection's close (it aborts with "socket disconnected"), so either form is
    # accepted: both mean TLS and ApiVersions succeeded and the SASL step dropped the connection.
    r"(invalid credentials with SASL mechanism SCRAM-SHA-512|broker_version=\(4, \d+\) \(disconnected\)>: "
    r"Connection lost: KafkaConnectionError: socket disconnected)"
)


@pytest.mark.parametrize("make_client, logged, not_logged", [
    (_wrong_password, [SASL_REFUSED], ["CERTIFICATE_VERIFY_FAILED", "KafkaTCPTransport"]),
    (_unknown_user, [SASL_REFUSED], ["CERTIFICATE_VERIFY_FAILED", "KafkaTCPTransport"]),
    (_no_ca, [r"\[SSL: CERTIFICATE_VERIFY_FAILED\] certificate verify failed: self-signed certificate in certificate chain"],
     ["broker_version=(4", "Sasl"]),
    (_plaintext, [r"KafkaTCPTransport.*socket disconnected"], ["SSL", "broker_version=(4", "Sasl"]),
], ids=["wrong-password", "unknown-user", "untrusted-certificate", "plaintext-client"])
def test_secure_broker_refuses(secured, make_client, logged, not_logged, caplog):
    """kafka-python 3 reports every failed bootstrap as a KafkaTimeoutError and logs the cause; both
    are checked, so each case fails for its own reason (and within the bounded timeout)."""
    client = make_client(_kafka_python(secured.connection_extra("pipeline")))
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="kafka"):
        with pytest.raises(KafkaTimeoutError, match=f"Unable to bootstrap from {secured.bootstrap}"):
            admin = KafkaAdminClient(**client, **FAIL_FAST)
            admin.close()
    assert time.monotonic() - t0 < 15
    for pattern in logged:
        assert re.search(pattern, caplog.text), pattern
    for text in not_logged:
        assert text not in caplog.text, text


def _read_forbidden_topic(client: dict) -> None:
    consumer = KafkaConsumer(**client, **FAIL_FAST)
    try:
        consumer.end_offsets([TopicPartition(FORBIDDEN_TOPIC, 0)])
    finally:
        consumer.close()


def _commit_foreign_group(client: dict) -> None:
    consumer = KafkaConsumer(**client, group_id="someone-elses-group", enable_auto_commit=False, **FAIL_FAST)
    try:
        consumer.commit({TopicPartition(SECURE_TOPIC, 0): OffsetAndMetadata(1, "", -1)})
    finally:
        consumer.close()


def _write_own_topic(client: dict) -> None:
    producer = KafkaProducer(**client, enable_idempotence=False, max_block_ms=3000, request_timeout_ms=3000)
    try:
        producer.send(SECURE_TOPIC, b"pipelines only read").get(timeout=10)
    finally:
        producer.close(timeout=2)


@pytest.mark.parametrize("action, error", [
    (_read_forbidden_topic, TopicAuthorizationFailedError),
    (_commit_foreign_group, GroupAuthorizationFailedError),
    (_write_own_topic, TopicAuthorizationFailedError),
], ids=["read-other-topic", "commit-other-group", "write-own-topic"])
def test_secure_pipeline_user_gets_nothing_else(secured, action, error):
    with pytest.raises(error):
        action(_kafka_python(secured.connection_extra("pipeline")))


def test_secure_broker_secrets_are_owner_only(secured):
    files = secured.secret_files()
    names = {f.name for f in files}
    assert {"server.properties", "broker.p12", "broker.json", "scram-users.json",
            "pipeline.connection.json", "admin.connection.json"} <= names
    assert "format.args" not in names  # the format step's argfile is gone
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert stat.S_IMODE(secured.material.secrets_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(secured.ca_file.stat().st_mode) == 0o644  # public: every client reads it
    assert not list(secured.home.rglob("*.key"))  # the CA's key was dropped once it signed
    assert json.loads(secured.credentials_file("pipeline").read_text()) == secured.connection_extra("pipeline")
    # No password in the broker's command line (JAAS and keystore password live in the 0600 files).
    cmdline = Path(f"/proc/{secured.pid()}/cmdline").read_bytes()
    for user in ("admin", "pipeline"):
        assert secured.material.password(user).encode() not in cmdline
    assert secured.material._broker_secret("keystore_password").encode() not in cmdline


def test_secure_broker_restart_keeps_users_and_acls(secured):
    """Last of the secured tests: a controlled restart, then the same credentials, certificate
    and ACLs still work (SCRAM users and ACLs live in the metadata log)."""
    ca_before = secured.ca_file.read_bytes()
    extra_before = secured.connection_extra("pipeline")
    secured.stop()
    assert secured.pid() is None
    secured.start()
    assert secured.ca_file.read_bytes() == ca_before
    assert secured.connection_extra("pipeline") == extra_before
    _pipeline_reads(secured)
