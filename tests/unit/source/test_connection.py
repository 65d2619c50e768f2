"""The Airflow Kafka connection, translated once for kafka-python and Spark: nothing dropped, no
secret where it does not belong."""

from __future__ import annotations

from pathlib import Path

import pytest

from offsetbatch.errors import ConfigError
from offsetbatch.source.connection import (
    KafkaConnectionError,
    from_settings,
)
from offsetbatch.source.diagnosis import KafkaAuthError, KafkaUnreachableError, explain


@pytest.fixture
def ca(tmp_path):
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    return str(path)


def _secured(ca: str, **more) -> dict:
    return {"bootstrap.servers": "b1:9093,b2:9093", "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "pipe", "sasl.password": 'p"a\\ss', "ssl.ca.location": ca, **more}


def test_sasl_ssl_maps_to_kafka_python_and_spark_with_secrets_apart(ca):
    cfg = from_settings("kafka_secure", _secured(ca))
    assert cfg.kafka_python() == {
        "bootstrap_servers": "b1:9093,b2:9093", "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "pipe", "sasl_plain_password": 'p"a\\ss', "ssl_check_hostname": True, "ssl_cafile": ca}
    options = cfg.spark_options()
    assert options == {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                       "kafka.ssl.endpoint.identification.algorithm": "https",
                       "kafka.ssl.truststore.type": "PEM",  # the CA inline: executors need no copy of the file
                       "kafka.ssl.truststore.certificates": Path(ca).read_text()}
    assert not [v for v in options.values() if 'p"a' in v]  # the spec's part holds no secret
    assert cfg.spark_secrets() == {"kafka.sasl.jaas.config":
                                   'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                   'username="pipe" password="p\\"a\\\\ss";'}
    assert "p\"a" not in cfg.describe() and "pipe" in cfg.describe() and "kafka_secure" in cfg.describe()
    assert "p\"a" not in repr(cfg)


def test_plaintext_from_host_and_port_has_no_security_options():
    cfg = from_settings("k", {}, host="broker", port=19092)
    assert cfg.kafka_python() == {"bootstrap_servers": "broker:19092", "security_protocol": "PLAINTEXT"}
    assert cfg.spark_options() == {"kafka.security.protocol": "PLAINTEXT"} and cfg.spark_secrets() == {}


def test_login_and_password_fields_are_the_sasl_credentials(ca):
    extra = _secured(ca)
    del extra["sasl.username"], extra["sasl.password"]
    cfg = from_settings("k", extra, login="pipe", password="pw")
    assert cfg.kafka_python()["sasl_plain_username"] == "pipe" and cfg.kafka_python()["sasl_plain_password"] == "pw"
    with pytest.raises(KafkaConnectionError, match="password field and extra sasl.password disagree"):
        from_settings("k", _secured(ca), password="other")


def test_client_certificate_goes_inline_and_secret_to_spark(ca, tmp_path):
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("CERT")
    key.write_text("KEY")
    cfg = from_settings("k", {"bootstrap.servers": "b:9093", "security.protocol": "SSL", "ssl.ca.location": ca,
                              "ssl.certificate.location": str(cert), "ssl.key.location": str(key),
                              "ssl.key.password": "kp", "ssl.endpoint.identification.algorithm": "none"})
    assert cfg.kafka_python()["ssl_check_hostname"] is False
    assert (cfg.kafka_python()["ssl_certfile"], cfg.kafka_python()["ssl_password"]) == (str(cert), "kp")
    assert cfg.spark_options()["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert cfg.spark_secrets() == {"kafka.ssl.keystore.certificate.chain": "CERT", "kafka.ssl.keystore.key": "KEY",
                                   "kafka.ssl.key.password": "kp"}


@pytest.mark.parametrize("extra, message", [
    ({"bootstrap.servers": "b:1", "sasl.kerberos.keytab": "/k"}, "extra key(s) sasl.kerberos.keytab are not supported"),
    ({"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p"},
     "needs sasl.mechanism"),
    ({"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "GSSAPI and OAUTHBEARER"),
    ({"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"},
     "needs sasl.password"),
    ({"bootstrap.servers": "b:1", "sasl.username": "u"}, "sasl.username set but security.protocol is PLAINTEXT"),
    ({"bootstrap.servers": "b:1", "ssl.ca.location": "/ca"}, "ssl.ca.location set but security.protocol is PLAINTEXT"),
    ({"bootstrap.servers": "b:1", "security.protocol": "SSL", "ssl.ca.location": "/no/such/ca.pem"}, "is not a file"),
    ({"bootstrap.servers": "b:1", "security.protocol": "TLS"}, "is not one of PLAINTEXT, SSL"),
    ({}, "neither extra 'bootstrap.servers' nor a host"),
])
def test_bad_connections_name_the_connection_and_the_key(extra, message):
    with pytest.raises(KafkaConnectionError) as err:
        from_settings("kafka_prod", extra)
    assert "Kafka connection 'kafka_prod'" in str(err.value) and message in str(err.value)


def test_consumer_keys_without_meaning_here_are_accepted_and_logged(caplog):
    with caplog.at_level("INFO"):
        cfg = from_settings("k", {"bootstrap.servers": "b:1", "group.id": "theirs"})
    assert "group.id" not in cfg.settings
    assert "extra group.id is not used: the pipeline's consumer group is kafka.group_id" in caplog.text


def test_a_pkcs1_client_key_is_refused_with_the_conversion_command(ca, tmp_path):
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("CERT")
    key.write_text("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n")
    with pytest.raises(KafkaConnectionError, match="openssl pkcs8 -topk8"):
        from_settings("k", {"bootstrap.servers": "b:1", "security.protocol": "SSL", "ssl.ca.location": ca,
                            "ssl.certificate.location": str(cert), "ssl.key.location": str(key)})


def test_failures_are_explained_without_secrets(ca):
    from kafka import errors as kerr

    cfg = from_settings("kafka_secure", _secured(ca, **{"bootstrap.servers": "127.0.0.1:1"}))
    auth = explain(kerr.SaslAuthenticationFailedError("Authentication failed during authentication due to invalid "
                                                      "credentials with SASL mechanism SCRAM-SHA-512"), cfg)
    assert isinstance(auth, KafkaAuthError) and "authentication failed for user 'pipe'" in str(auth)
    cert = explain(kerr.KafkaTimeoutError("Unable to bootstrap from 127.0.0.1:1"), cfg, ["SSL: CERTIFICATE_VERIFY_FAILED certificate verify failed"])
    assert isinstance(cert, KafkaAuthError) and "set ssl.ca.location" in str(cert)
    down = explain(kerr.KafkaTimeoutError("Unable to bootstrap from 127.0.0.1:1"), cfg)  # nothing listens on port 1
    assert isinstance(down, KafkaUnreachableError) and "127.0.0.1:1" in str(down)
    mech = explain(kerr.KafkaTimeoutError("Unable to bootstrap"), cfg,
                   ["SaslHandshake failed: UnsupportedSaslMechanismError: [Error 33]"])
    assert isinstance(mech, KafkaAuthError) and "does not enable SASL mechanism SCRAM-SHA-512" in str(mech)
    key = explain(kerr.KafkaTimeoutError("Unable to bootstrap"), cfg, ["Handshake failed: [SSL] PEM lib (_ssl.c:3900)"])
    assert isinstance(key, KafkaConnectionError) and "ssl.key.password" in str(key)
    for err in (auth, cert, down, mech, key):
        assert "kafka_secure" in str(err) and 'p"a' not in str(err)


def _job_options(spec_options: dict, secrets: dict) -> dict:
    from offsetbatch.job.read import kafka_client_options
    from offsetbatch.jobspec import JobSpec

    js = JobSpec(pipeline="p", batch_id=3, output_id=3, bootstrap="b:1", ranges=[], sink={"path": "/t"},
                 kafka_options=spec_options)
    return kafka_client_options(js, secrets)


def test_the_job_joins_spec_options_and_secrets_and_refuses_a_mismatch():
    jaas = {"kafka.sasl.jaas.config": "x"}
    sasl = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"}
    assert _job_options(sasl, jaas) == {**sasl, **jaas}
    with pytest.raises(ConfigError, match="got no credentials"):
        _job_options(sasl, {})
    with pytest.raises(ConfigError, match="the Kafka connection changed after the batch was planned"):
        _job_options({"kafka.security.protocol": "PLAINTEXT"}, jaas)


class _SlowThenAnswering:
    """kafka-python's admin client as a loaded broker makes it look: the first bootstrap times out
    with nothing logged; a later one gets the broker's real answer (``answer``, a log line)."""

    def __init__(self, answer: str | None):
        self.answer, self.timeouts = answer, []

    def __call__(self, **kwargs):
        import logging

        from kafka import errors as kerr

        self.timeouts.append(kwargs["bootstrap_timeout_ms"])
        if len(self.timeouts) > 1 and self.answer:
            logging.getLogger("kafka.conn").error(self.answer)
        raise kerr.KafkaTimeoutError(f"Unable to bootstrap from {kwargs['bootstrap_servers']}")


@pytest.mark.parametrize("listening, answer, expected, timeouts", [
    ("tls", "<BrokerConnection host=127.0.0.1:9093>: Authentication failed due to invalid credentials with SASL "
           "mechanism SCRAM-SHA-512", "authentication failed for user 'pipe'", [10_000, 30_000]),
    ("tls", None, "accepts connections but did not answer the Kafka handshake within 40 s", [10_000, 30_000]),
    (None, None, "no broker answered within 10 s", [10_000]),
], ids=["slow-then-wrong-password", "slow-both-times", "nothing-listens"])
def test_a_slow_broker_gets_a_longer_wait_before_it_is_called_unreachable(ca, monkeypatch, listening, answer,
                                                                           expected, timeouts):
    """Under load the first Kafka handshake can outlast 10 s with nothing logged; calling that
    unreachable would retry a wrong password instead of failing the task at once."""
    import kafka

    from offsetbatch.source import diagnosis as kafka_errors

    fake = _SlowThenAnswering(answer)
    monkeypatch.setattr(kafka, "KafkaAdminClient", fake)
    monkeypatch.setattr(kafka_errors, "_listener", lambda bootstrap: listening)
    with pytest.raises((KafkaAuthError, KafkaUnreachableError), match=expected) as err:
        kafka_errors.connect_admin(from_settings("kafka_secure", _secured(ca)))
    assert fake.timeouts == timeouts
    assert isinstance(err.value, KafkaAuthError) == (answer is not None)


@pytest.fixture
def web_server():
    """A real HTTP server on loopback: what a bootstrap address pointing at a REST proxy or a UI reaches."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_web_endpoint_in_bootstrap_servers_is_named_as_such_not_as_tls(web_server):
    from kafka import errors as kerr

    from offsetbatch.errors import KafkaConnectionError
    from offsetbatch.source import diagnosis

    assert diagnosis._listener(web_server) == "http"
    client = from_settings("kafka_web", {"bootstrap.servers": web_server})
    error = diagnosis.explain(kerr.KafkaTimeoutError("Unable to bootstrap"), client, [])
    assert isinstance(error, KafkaConnectionError)  # a ConfigError: the task fails at once, unretried
    assert f"{web_server} answers HTTP, not the Kafka protocol: bootstrap.servers of connection 'kafka_web' names " \
           f"a web endpoint" in str(error), str(error)


def test_a_port_nothing_listens_on_is_not_classified():
    import socket

    from offsetbatch.source import diagnosis

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    assert diagnosis._listener(f"127.0.0.1:{port}") is None


# What kafka-python 3 logged while a SASL_SSL broker refused a wrong password without the client
# seeing the refusal (5 of 13 tries against the real broker): each connection is answered, then closed.
REFUSED_UNSEEN = [
    "Attempting bootstrap to bootstrap-0 at 127.0.0.1:22092 (rack None)",
    "<KafkaSSLTransport [127.0.0.1:22092<-35106]>: connected to <ssl.SSLSocket fd=19>",
    "<KafkaConnection node_id=bootstrap-0 host=[127.0.0.1:22092<-35106] broker_version=unknown (initializing)>: "
    "Broker version identified as 4.1",
    "<KafkaSSLTransport [127.0.0.1:22092<-35106]>: socket disconnected",
    "Bootstrap connection to bootstrap-0 failed: KafkaConnectionError: socket disconnected (backoff 0.06 secs)",
    "<KafkaSSLTransport [127.0.0.1:22092<-35114]>: connected to <ssl.SSLSocket fd=19>",
    "<KafkaConnection node_id=bootstrap-0 broker_version=(4, 1) (initializing)>: Broker version identified as 4.1",
    "<KafkaSSLTransport [127.0.0.1:22092<-35114]>: socket disconnected",
]


def test_a_broker_that_answers_then_closes_every_sasl_login_refused_it(ca):
    """Not "overloaded or stuck" after 40 s and retried: the broker answered each connection's first
    request, so it is up, and it closed each one during the SASL exchange."""
    from kafka import errors as kerr

    from offsetbatch.source import diagnosis

    client = from_settings("kafka_secure", _secured(ca))
    error = diagnosis.explain(kerr.KafkaTimeoutError("Unable to bootstrap"), client, REFUSED_UNSEEN)
    assert isinstance(error, KafkaAuthError)
    assert "authentication failed for user 'pipe'" in str(error) and "closed each connection during the SASL" in str(error)
    # a broker that never answered (no "Broker version identified") is not called a refusal
    silent = [line for line in REFUSED_UNSEEN if "Broker version" not in line]
    assert diagnosis._closed_after_handshake(silent) == 0 and diagnosis._closed_after_handshake(REFUSED_UNSEEN) == 2


@pytest.mark.parametrize("bootstrap, bad", [("::::,,", "'::::'"), ("", "no entry"), ("broker:99999", "'broker:99999'"),
                                            ("broker:9092, ::1:9092", "'::1:9092'")])
def test_a_mangled_bootstrap_list_is_a_config_error_naming_it(bootstrap, bad):
    """Issue 41, case 15: it was a raw ValueError, retried as "unreachable"; a ConfigError fails at once."""
    with pytest.raises(KafkaConnectionError) as err:
        from_settings("kafka_default", {"bootstrap.servers": bootstrap})
    assert f"bootstrap.servers {bootstrap!r} is not a list of host:port (bad: {bad})" in str(err.value)
    assert from_settings("k", {"bootstrap.servers": " broker-1:9092, [::1]:9093 ,broker-2"}).bootstrap == \
        "broker-1:9092,[::1]:9093,broker-2"
