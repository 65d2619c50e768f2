"""The schema registry client of the plan task, against a real HTTP server (the stand-in registry of
tests/schema_registry_server.py): settings from an Airflow connection, lookups and their cache,
credentials, TLS, errors sorted into "no retry helps" and "a retry may", and the wire formats
confluent-kafka's own AvroSerializer writes."""

from __future__ import annotations

import io
import json
import time
import uuid

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12
from schema_registry_server import SchemaRegistryServer

from offsetbatch.dag.retry_policy import is_permanent
from offsetbatch.errors import (
    SchemaNotFoundError,
    SchemaRegistryAuthError,
    SchemaRegistryConnectionError,
    SchemaRegistryUnavailableError,
    SchemaWireFormatError,
)
from offsetbatch.source.schema_registry import MAX_RETRIES, RegistrySettings, SchemaRegistry
from offsetbatch.formats.confluent_wire import SchemaRef, parse_confluent_prefix, parse_schema_id_header, schema_ref
from offsetbatch_dev.stack.kafka_security import BrokerSecurity

WHERE = "pipeline events batch 7, events/3 offset 1234"
EVENT_V1 = json.dumps({"type": "record", "name": "Event", "namespace": "shop",
                       "fields": [{"name": "id", "type": "long"}]})
EVENT_V2 = json.dumps({"type": "record", "name": "Event", "namespace": "shop",
                       "fields": [{"name": "id", "type": "long"}, {"name": "sku", "type": ["null", "string"], "default": None}]})


@pytest.fixture
def server():
    with SchemaRegistryServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    """(CA file, server certificate, server key): the secure Kafka stack's CA and certificate
    (SANs 127.0.0.1 and localhost), the key taken out of its PKCS#12 keystore for http.server."""
    home = tmp_path_factory.mktemp("registry-tls")
    security = BrokerSecurity(home)
    security.ensure()
    password = json.loads(security.broker_secrets_file.read_text())["keystore_password"].encode()
    key, cert, _ = pkcs12.load_key_and_certificates(security.keystore_file.read_bytes(), password)
    cert_file, key_file = home / "registry.pem", home / "registry.key"
    cert_file.write_bytes(cert.public_bytes(Encoding.PEM))
    key_file.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    key_file.chmod(0o600)
    return security.ca_file, cert_file, key_file


def _registry(url: str, **settings) -> SchemaRegistry:
    return SchemaRegistry(RegistrySettings(url, **settings))


# ---- settings ------------------------------------------------------------------------------------

def test_settings_from_an_airflow_connection(monkeypatch, tls):
    ca = str(tls[0])
    monkeypatch.setenv("AIRFLOW_CONN_SR_UNIT", json.dumps({
        "conn_type": "http", "host": "https://registry.example:8081/", "login": "alice", "password": "s3cret",
        "extra": {"ssl.ca.location": ca, "timeout": "2.5"}}))
    monkeypatch.setenv("AIRFLOW_CONN_SR_PARTS", json.dumps({
        "conn_type": "http", "host": "registry.example", "schema": "https", "port": 8443,
        "extra": {"bearer.auth.token": "tok", "bearer.auth.logical.cluster": "lsrc-1"}}))
    settings = RegistrySettings.from_connection("sr_unit")
    assert (settings.url, settings.username, settings.password, settings.ca_location, settings.timeout) == (
        "https://registry.example:8081", "alice", "s3cret", ca, 2.5)
    conf = settings.client_config()
    assert conf["basic.auth.user.info"] == "alice:s3cret" and conf["ssl.ca.location"] == ca
    assert (conf["max.retries"], conf["timeout"]) == (MAX_RETRIES, 2.5)
    parts = RegistrySettings.from_connection("sr_parts")
    assert (parts.url, parts.bearer_token, parts.username) == ("https://registry.example:8443", "tok", None)
    assert {k: v for k, v in parts.client_config().items() if k.startswith("bearer")} == {
        "bearer.auth.credentials.source": "STATIC_TOKEN", "bearer.auth.token": "tok",
        "bearer.auth.logical.cluster": "lsrc-1"}


def test_an_unknown_extra_key_is_refused_naming_it(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SR_ODD", json.dumps({
        "conn_type": "http", "host": "http://registry.example:8081",
        "extra": {"basic.auth.user.info": "u:p", "cache.capacity": 10}}))
    with pytest.raises(SchemaRegistryConnectionError) as err:
        RegistrySettings.from_connection("sr_odd")
    message = str(err.value)
    assert "Schema registry connection 'sr_odd': extra key(s) basic.auth.user.info, cache.capacity are not supported" in message
    assert "put the user in the connection's login field" in message and "u:p" not in message


def test_secrets_are_not_in_repr_nor_in_descriptions():
    basic = RegistrySettings.from_fields("sr", "http://registry.example:8081", login="alice", password="pw-basic-1")
    bearer = RegistrySettings.from_fields("sr", "http://registry.example:8081", extra={"bearer.auth.token": "tok-bearer-2"})
    for settings, secret in ((basic, "pw-basic-1"), (bearer, "tok-bearer-2")):
        shown = repr(settings) + settings.describe() + settings.auth_description()
        assert secret not in shown and "registry.example:8081" in shown and "'sr'" in shown


@pytest.mark.parametrize("fields, message", [
    ({"host": "registry.example"}, "has no scheme. Write the whole URL in host"),
    ({"host": None}, "has no host"),
    ({"host": "https://u:p@registry.example:x"}, "the URL holds credentials"),
    ({"host": "ftp://registry.example"}, "is not an http:// or https:// URL"),
    ({"host": "https://registry.example:8081", "port": 9000}, "port field 9000 and the port of host"),
    ({"host": "https://r", "login": "alice", "extra": {"bearer.auth.token": "t"}, "password": "p"}, "not both"),
    ({"host": "https://r", "login": "alice"}, "needs both a login and a password"),
    ({"host": "http://r", "extra": {"ssl.ca.location": "/etc/hostname"}}, "the URL is http://, so it would be ignored"),
    ({"host": "https://r", "extra": {"ssl.ca.location": "/no/such/ca.pem"}}, "is not a file on this host"),
    ({"host": "https://r", "extra": {"timeout": 600}}, "extra timeout must be seconds in (0, 60]"),
    ({"host": "https://r", "extra": {"timeout": "soon"}}, "extra timeout must be a number of seconds"),
])
def test_bad_settings_name_the_connection_and_the_field(fields, message):
    with pytest.raises(SchemaRegistryConnectionError) as err:
        RegistrySettings.from_fields("sr_prod", **fields)
    assert "Schema registry connection 'sr_prod'" in str(err.value) and message in str(err.value)
    assert "u:p" not in str(err.value)


def test_credentials_in_a_url_are_refused_without_showing_them():
    with pytest.raises(SchemaRegistryConnectionError, match="the URL holds credentials") as err:
        RegistrySettings("ftp://alice:pw-in-url@registry.example")
    assert "pw-in-url" not in str(err.value)


def test_a_url_with_a_query_is_refused_without_showing_its_secret():
    """Issue 58, item 2: the refusal repeats the URL, less a token in its query."""
    with pytest.raises(SchemaRegistryConnectionError, match="must be one registry URL, without a query") as err:
        RegistrySettings("https://registry.example/?api_key=k3y-in-query&x=1")
    assert "k3y-in-query" not in str(err.value) and "'https://registry.example/?api_key=***&x=1'" in str(err.value)


def test_a_ca_file_that_is_not_pem_is_a_settings_error(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate")
    with pytest.raises(SchemaRegistryConnectionError, match="the client refused its settings") as err:
        SchemaRegistry(RegistrySettings.from_fields("sr", "https://registry.example", extra={"ssl.ca.location": str(ca)}))
    assert "Airflow connection 'sr'" in str(err.value) and is_permanent(err.value)


# ---- lookups -------------------------------------------------------------------------------------

def test_schemas_by_id_by_guid_and_subject_version(server):
    v1 = server.register("events-value", EVENT_V1)
    v2 = server.register("events-value", EVENT_V2)
    registry = _registry(server.url)
    by_id = registry.schema_by_id(v1.id, WHERE)
    assert (by_id.schema_str, by_id.schema_type, by_id.schema_id) == (EVENT_V1, "AVRO", v1.id)
    by_guid = registry.schema_by_guid(v2.guid.upper(), WHERE)  # any spelling of the UUID
    assert (by_guid.schema_str, by_guid.guid) == (EVENT_V2, v2.guid)
    latest = registry.subject_version("events-value", "latest", WHERE)
    assert (latest.subject, latest.version, latest.schema_id, latest.guid, latest.schema_str) == (
        "events-value", 2, v2.id, v2.guid, EVENT_V2)
    first = registry.subject_version("events-value", 1, WHERE)
    assert (first.version, first.schema_id, first.guid, first.schema_str) == (1, v1.id, v1.guid, EVENT_V1)


def test_each_lookup_is_fetched_once_per_instance(server):
    s = server.register("events-value", EVENT_V1)
    registry = _registry(server.url)
    lookups = [lambda: registry.schema_by_id(s.id, WHERE), lambda: registry.schema_by_guid(s.guid, WHERE),
               lambda: registry.subject_version("events-value", "latest", WHERE),
               lambda: registry.subject_version("events-value", 1, WHERE)]
    first = [lookup() for lookup in lookups]
    asked = list(server.requests)
    assert asked  # (the client's own cache may answer a GUID it saw with an id: fewer than 4 requests)
    again = [lookup() for lookup in lookups]
    assert server.requests == asked, "no request the second time"
    assert all(a is b for a, b in zip(first, again)), "answered from this instance's cache"


# ---- credentials and TLS -------------------------------------------------------------------------

def test_basic_auth_good_and_bad():
    with SchemaRegistryServer(basic_auth=("alice", "right")) as server:
        s = server.register("events-value", EVENT_V1)
        assert _registry(server.url, username="alice", password="right").schema_by_id(s.id, WHERE).schema_str == EVENT_V1
        server.requests.clear()
        with pytest.raises(SchemaRegistryAuthError) as err:
            _registry(server.url, username="alice", password="wrong").schema_by_id(s.id, WHERE)
        assert len(server.requests) == 1, "a refusal is not retried"
    message = str(err.value)
    assert server.url in message and "basic auth as alice" in message and "HTTP 401" in message and WHERE in message
    assert "wrong" not in message and is_permanent(err.value)


def test_bearer_token_good_and_bad():
    with SchemaRegistryServer(bearer_token="token-ok") as server:
        s = server.register("events-value", EVENT_V1)
        assert _registry(server.url, bearer_token="token-ok").schema_by_guid(s.guid, WHERE).schema_str == EVENT_V1
        with pytest.raises(SchemaRegistryAuthError, match="a bearer token; HTTP 401") as err:
            _registry(server.url, bearer_token="token-bad").schema_by_guid(s.guid, WHERE)
        with pytest.raises(SchemaRegistryAuthError, match=r"no credentials; HTTP 401"):
            _registry(server.url).schema_by_id(s.id, WHERE)
    assert "token-bad" not in str(err.value) and f"schema GUID {s.guid}" in str(err.value)


def test_tls_verified_with_the_ca_and_refused_without_it(tls, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    ca, cert, key = tls
    with SchemaRegistryServer(tls=(cert, key)) as server:
        s = server.register("events-value", EVENT_V1)
        assert server.url.startswith("https://127.0.0.1:")
        assert _registry(server.url, ca_location=str(ca)).schema_by_id(s.id, WHERE).schema_str == EVENT_V1
        with pytest.raises(SchemaRegistryAuthError) as err:
            _registry(server.url).schema_by_id(s.id, WHERE)
    message = str(err.value)
    assert f"Schema registry {server.url}: the registry's TLS certificate was not verified" in message
    assert "set the connection's extra ssl.ca.location" in message.lower() and WHERE in message and is_permanent(err.value)


def test_https_to_a_plain_http_registry_is_a_settings_error(server):
    with pytest.raises(SchemaRegistryConnectionError, match="the TLS handshake failed .*https:// only if") as err:
        _registry(server.url.replace("http://", "https://")).schema_by_id(1, WHERE)
    assert WHERE in str(err.value) and is_permanent(err.value)


# ---- errors --------------------------------------------------------------------------------------

def test_unknown_id_guid_subject_and_version_are_permanent_and_say_where(server):
    server.register("events-value", EVENT_V1)
    registry = _registry(server.url)
    with pytest.raises(SchemaNotFoundError) as err:
        registry.schema_by_id(42, WHERE)
    message = str(err.value)
    assert message.startswith(f"Schema registry {server.url}: schema id 42 is not there (HTTP 404, error code 40403")
    assert f"needed by {WHERE}" in message and "points at the registry its producers write to" in message
    assert is_permanent(err.value) and len(server.requests) == 1, "a 404 is not retried"
    unknown_guid = uuid.uuid4()
    with pytest.raises(SchemaNotFoundError, match=f"schema GUID {unknown_guid} is not there"):
        registry.schema_by_guid(unknown_guid, WHERE)
    with pytest.raises(SchemaNotFoundError, match="subject 'orders-value' is not there .*40401.*TopicNameStrategy"):
        registry.subject_version("orders-value", "latest", WHERE)
    with pytest.raises(SchemaNotFoundError, match="version 3 of subject 'events-value' is not there .*40402"):
        registry.subject_version("events-value", 3, WHERE)


def test_a_url_that_is_not_a_registry_says_so_instead_of_a_missing_subject(tmp_path):
    """A web server's own 404 page (Python's http.server over an empty folder: a real HTTP server
    that is not a registry) used to be reported as "subject … is not there" (issue 41, case 15)."""
    import functools
    import http.server
    import threading

    from offsetbatch.errors import SchemaRegistryRefusedError

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        with pytest.raises(SchemaRegistryRefusedError) as err:
            _registry(f"http://127.0.0.1:{web.server_address[1]}").subject_version("events-value", "latest", WHERE)
    finally:
        web.shutdown()
        web.server_close()
    message = str(err.value)
    assert "answered HTTP 404 without a schema registry's error" in message
    assert "this URL is not a schema registry's REST API" in message and "is not there" not in message
    assert f"needed by {WHERE}" in message and is_permanent(err.value)


def test_a_registry_that_is_down_is_retryable_and_fails_within_seconds():
    with SchemaRegistryServer() as server:
        url = server.url
    registry = _registry(url)  # the port is closed now: connections are refused
    started = time.monotonic()
    with pytest.raises(SchemaRegistryUnavailableError) as err:
        registry.schema_by_id(1, WHERE)
    assert time.monotonic() - started < 3
    message = str(err.value)
    assert message.startswith(f"Schema registry {url} did not answer (ConnectError:")
    assert WHERE in message and "A retry may succeed" in message and not is_permanent(err.value)


@pytest.mark.parametrize("status", [500, 503])
def test_a_failing_registry_is_retryable_after_a_bounded_retry(server, status):
    s = server.register("events-value", EVENT_V1)
    server.answer_with = status
    with pytest.raises(SchemaRegistryUnavailableError) as err:
        _registry(server.url).schema_by_id(s.id, WHERE)
    assert f"failed (HTTP {status}" in str(err.value) and WHERE in str(err.value) and not is_permanent(err.value)
    assert len(server.requests) == MAX_RETRIES + 1


def test_forbidden_is_permanent(server):
    server.answer_with = 403
    with pytest.raises(SchemaRegistryAuthError, match="HTTP 403.*grant it read access") as err:
        _registry(server.url).subject_version("events-value", "latest", WHERE)
    assert is_permanent(err.value) and len(server.requests) == 1


# ---- wire formats, written by confluent-kafka's own serializer -----------------------------------

@pytest.mark.parametrize("form", ["prefix", "header"])
def test_avro_serializer_round_trip(server, form):
    from confluent_kafka.schema_registry import SchemaRegistryClient, header_schema_id_serializer
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from fastavro import parse_schema, schemaless_reader

    registry = _registry(server.url)
    conf = {"schema.id.serializer": header_schema_id_serializer} if form == "header" else {}
    with SchemaRegistryClient(registry.settings.client_config()) as client:
        serializer = AvroSerializer(client, EVENT_V2, conf=conf)  # auto.register.schemas: the default
        headers: list[tuple[str, bytes]] = []
        value = serializer({"id": 7, "sku": "A-1"}, SerializationContext("events", MessageField.VALUE, headers))
    assert ("POST", "/subjects/events-value/versions?normalize=False") in server.requests
    ref = schema_ref(value, headers, where=WHERE)
    if form == "prefix":
        assert headers == [] and value[:1] == b"\x00" and ref == SchemaRef(parse_confluent_prefix(value), None, 5)
        writer = registry.schema_by_id(ref.schema_id, WHERE)
    else:
        [(name, header)] = headers
        assert name == "__value_schema_id" and len(header) == 17 and header[:1] == b"\x01"
        assert ref == SchemaRef(None, parse_schema_id_header(header), 0)
        writer = registry.schema_by_guid(ref.guid, WHERE)
    assert json.loads(writer.schema_str) == json.loads(EVENT_V2)
    body = io.BytesIO(value[ref.body_offset:])
    assert schemaless_reader(body, parse_schema(json.loads(writer.schema_str))) == {"id": 7, "sku": "A-1"}


def test_the_guid_prefix_v1_form_and_the_key_header():
    guid = uuid.uuid4()
    assert schema_ref(b"\x01" + guid.bytes + b"\x0e") == SchemaRef(None, str(guid), 17)
    headers = {"__key_schema_id": b"\x01" + guid.bytes}
    assert schema_ref(b"\x0e", headers, key=True) == SchemaRef(None, str(guid), 0)
    assert schema_ref(b"\x00\x00\x00\x01\x00\x0e", headers) == SchemaRef(256, None, 5)  # a value's id is its own


@pytest.mark.parametrize("value, reason", [
    (b"\x7b\"id\": 7}", "starts with byte 0x7b, not Confluent's magic byte 0x00"),
    (b"\x00\x00\x01", "is 3 byte(s), shorter than the 5 of Confluent's prefix"),
    (b"", "is empty or null"),
    (None, "is empty or null"),
    (b"\x01" + bytes(16), "magic byte 1, the GUID prefix (v1) form"),
])
def test_parse_confluent_prefix_refuses_what_is_not_the_prefix_form(value, reason):
    with pytest.raises(SchemaWireFormatError) as err:
        parse_confluent_prefix(value, where=WHERE)
    assert reason in str(err.value) and WHERE in str(err.value) and is_permanent(err.value)


@pytest.mark.parametrize("header, reason", [
    (b"\x00" + bytes(16), "starts with byte 0x00, not the GUID form's magic byte 0x01"),
    (b"\x01" + bytes(5), "is 6 byte(s), shorter than the 17"),
    (None, "starts with nothing"),
])
def test_parse_schema_id_header_refuses_bad_headers(header, reason):
    with pytest.raises(SchemaWireFormatError, match="the schema id header") as err:
        parse_schema_id_header(header)
    assert reason in str(err.value)
    with pytest.raises(SchemaWireFormatError):
        schema_ref(b"\x0e", [("__value_schema_id", header or b"")])
