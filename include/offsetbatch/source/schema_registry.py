"""The Confluent Schema Registry as offsetbatch's plan task reads it (never Spark executors).

Records of an Avro topic behind a registry name their writer schema by id or by GUID; the plan task
resolves each name once through ``SchemaRegistry``, which wraps confluent-kafka's own client
(``confluent_kafka.schema_registry.SchemaRegistryClient``, 2.16.1) and turns its failures into
offsetbatch errors that say whether a retry can help.

The connection (an Airflow connection; ``conn_type`` ``http`` suits, any is accepted):

    host            the registry's URL with its scheme, ``https://registry.example:8081`` (a path is
                    kept); or the host name alone, with the scheme in ``schema`` and the port in ``port``
    login/password  HTTP basic auth (the client's ``basic.auth.user.info``)
    extra:
      bearer.auth.token            a static bearer token (the client's ``STATIC_TOKEN`` source)
      bearer.auth.logical.cluster  the ``target-sr-cluster`` header sent with the token (Confluent
                                   Cloud's ``lsrc-...``; empty when not set)
      ssl.ca.location              PEM file of the CA that signed an https registry's certificate
                                   (default: certifi's bundle, or ``SSL_CERT_FILE``)
      timeout                      seconds per HTTP request (default 5, at most 60)

An extra key not listed is an error naming it, never dropped. Secrets (password, token) are never
logged and hidden from ``repr``.

Errors (offsetbatch.errors): HTTP 404 (unknown id, GUID, subject, version) is ``SchemaNotFoundError``;
401/403 and an unverified TLS certificate are ``SchemaRegistryAuthError``; another 4xx is
``SchemaRegistryRefusedError``; all fail the task at once (``dag.retry_policy.PERMANENT``). A refused
or timed-out connection and HTTP 5xx/408/429 are ``SchemaRegistryUnavailableError``: the task's
retries apply. The client itself retries only the latter, ``MAX_RETRIES`` times ``RETRY_WAIT_MS``
apart at most, so a permanent error fails at once and a registry that refuses connections fails in
well under a second (one that never answers: ``(MAX_RETRIES + 1) * timeout``).

Confluent's wire formats (how a record names its schema) are in ``formats.confluent_wire``.
"""

from __future__ import annotations

import json
import logging
import ssl
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from offsetbatch import redact
from offsetbatch.errors import (
    SchemaNotFoundError,
    SchemaRegistryAuthError,
    SchemaRegistryConnectionError,
    SchemaRegistryRefusedError,
    SchemaRegistryUnavailableError,
)

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
MAX_TIMEOUT_S = 60.0
# The client's own retries: only transport errors and HTTP 408/429/5xx are retried (its is_retriable),
# so 404/401 fail at once; two attempts with a jittered wait of at most 0.2 s keep a down registry's
# failure short, and the task's own retries (30 s apart) do the waiting.
MAX_RETRIES = 1
RETRY_WAIT_MS = 200
RETRY_MAX_WAIT_MS = 1000
RETRIED_STATUSES = (408, 429, 500, 502, 503, 504)

EXTRA_KEYS = frozenset({"bearer.auth.token", "bearer.auth.logical.cluster", "ssl.ca.location", "timeout"})
HINTS = {  # client keys people copy from a producer's config, and where their setting goes instead
    "url": "put the registry's URL in the connection's host field",
    "basic.auth.user.info": "put the user in the connection's login field and the password in its password field",
    "basic.auth.credentials.source": "basic auth comes from the connection's login and password",
    "bearer.auth.credentials.source": "offsetbatch sets STATIC_TOKEN when bearer.auth.token is set; OAuth "
                                      "client credentials are not supported",
}
_CREDENTIALS_IN_URL = ("the URL holds credentials; put the user in the connection's login and the password in "
                       "its password field (a URL ends up in logs)")


# ---- settings ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RegistrySettings:
    """One registry's URL, credentials and timeout; validated when made."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    bearer_token: str | None = field(default=None, repr=False)
    logical_cluster: str | None = None
    ca_location: str | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    conn_id: str | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if "@" in parts.netloc:  # checked first: no message below may show such a URL
            self._fail(_CREDENTIALS_IN_URL)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            self._fail(f"URL {self.url!r} is not an http:// or https:// URL with a host")
        if "," in self.url or parts.query or parts.fragment:
            self._fail(f"URL {self.url!r} must be one registry URL, without a query or fragment")
        if (self.username is None) != (self.password is None):
            self._fail("basic auth needs both a login and a password")
        if self.username is not None and ":" in self.username:
            self._fail("the login may not contain ':' (HTTP basic auth separates user and password with it)")
        if self.username is not None and self.bearer_token is not None:
            self._fail("set either basic auth (login/password) or extra bearer.auth.token, not both")
        if self.logical_cluster is not None and self.bearer_token is None:
            self._fail("extra bearer.auth.logical.cluster is only sent with bearer.auth.token; set both or neither")
        if self.ca_location is not None:
            if parts.scheme != "https":
                self._fail("extra ssl.ca.location is set but the URL is http://, so it would be ignored; use https://")
            if not Path(self.ca_location).is_file():
                self._fail(f"extra ssl.ca.location {self.ca_location!r} is not a file on this host")
        if not 0 < self.timeout <= MAX_TIMEOUT_S:
            self._fail(f"extra timeout must be seconds in (0, {MAX_TIMEOUT_S:g}], got {self.timeout!r}")

    def _fail(self, problem: str) -> None:
        """The URL's secret parameters (``?token=``) masked: a refused URL is echoed in the message."""
        raise SchemaRegistryConnectionError(redact.url(f"{self._owner()}: {problem}."))

    def _owner(self) -> str:
        return f"Schema registry connection '{self.conn_id}'" if self.conn_id else "Schema registry settings"

    def describe(self) -> str:
        """For log lines and errors: the URL and the connection, never a secret."""
        return f"Schema registry {self.url}" + (f" (Airflow connection '{self.conn_id}')" if self.conn_id else "")

    def auth_description(self) -> str:
        if self.username is not None:
            return f"basic auth as {self.username}"
        return "a bearer token" if self.bearer_token is not None else "no credentials"

    def client_config(self) -> dict[str, Any]:
        """``SchemaRegistryClient``'s configuration (holds the secrets: never log it)."""
        conf: dict[str, Any] = {"url": self.url, "timeout": self.timeout, "max.retries": MAX_RETRIES,
                                "retries.wait.ms": RETRY_WAIT_MS, "retries.max.wait.ms": RETRY_MAX_WAIT_MS}
        if self.username is not None:
            conf["basic.auth.user.info"] = f"{self.username}:{self.password}"
        if self.bearer_token is not None:
            conf.update({"bearer.auth.credentials.source": "STATIC_TOKEN", "bearer.auth.token": self.bearer_token,
                         "bearer.auth.logical.cluster": self.logical_cluster or ""})
        if self.ca_location is not None:
            conf["ssl.ca.location"] = self.ca_location
        return conf

    @classmethod
    def from_fields(cls, conn_id: str, host: str | None, scheme: str | None = None, port: int | None = None,
                    login: str | None = None, password: str | None = None,
                    extra: Mapping[str, Any] | None = None) -> RegistrySettings:
        """Settings from an Airflow connection's fields (raises ``SchemaRegistryConnectionError``
        naming the connection and the field or key)."""
        where = f"Schema registry connection '{conn_id}'"
        extra = {str(k): v for k, v in (extra or {}).items() if v is not None}
        unknown = sorted(set(extra) - EXTRA_KEYS)
        if unknown:
            hints = "".join(f" ({k}: {HINTS[k]})" for k in unknown if k in HINTS)
            raise SchemaRegistryConnectionError(
                f"{where}: extra key(s) {', '.join(unknown)} are not supported by offsetbatch (supported: "
                f"{', '.join(sorted(EXTRA_KEYS))}){hints}. Remove them: they would otherwise be dropped.")
        timeout = extra.get("timeout", DEFAULT_TIMEOUT_S)
        try:
            timeout = float(timeout)
        except (TypeError, ValueError):
            raise SchemaRegistryConnectionError(f"{where}: extra timeout must be a number of seconds, got {timeout!r}.") from None
        return cls(url=_url(where, host, scheme, port), username=login or None, password=password or None,
                   bearer_token=_opt(extra, "bearer.auth.token"),
                   logical_cluster=_opt(extra, "bearer.auth.logical.cluster"),
                   ca_location=_opt(extra, "ssl.ca.location"), timeout=timeout, conn_id=conn_id)

    @classmethod
    def from_connection(cls, conn_id: str, field: str = "schema_registry.conn_id") -> RegistrySettings:
        """Settings of an Airflow connection (environment, metadata DB or a secrets backend);
        ``field``: the config field that names it, for the error when it is not defined."""
        from offsetbatch.connections import get_connection

        conn = get_connection(conn_id, field)
        return cls.from_fields(conn_id, conn.host, conn.schema, conn.port, conn.login, conn.password, conn.extra_dejson)


def _opt(extra: Mapping[str, Any], key: str) -> str | None:
    value = extra.get(key)
    return None if value is None or value == "" else str(value)


def _url(where: str, host: str | None, scheme: str | None, port: int | None) -> str:
    """The registry URL from ``host`` (a whole URL) or ``schema`` + ``host`` + ``port``."""
    if not host:
        raise SchemaRegistryConnectionError(f"{where} has no host. Set host to the registry's URL, such as "
                                            f"https://registry.example:8081.")
    if "@" in host:  # before any message that shows the host
        raise SchemaRegistryConnectionError(f"{where}: {_CREDENTIALS_IN_URL}.")
    if "://" in host:
        parts = urlsplit(host.strip())
        if scheme and scheme.lower() != parts.scheme.lower():
            raise SchemaRegistryConnectionError(f"{where}: the schema field {scheme!r} and the scheme of host "
                                                f"{host!r} disagree; keep one.")
    elif not scheme:
        raise SchemaRegistryConnectionError(f"{where}: host {host!r} has no scheme. Write the whole URL in host "
                                            f"(https://{host}:8081), or set the connection's schema field to https (or http).")
    else:
        parts = urlsplit(f"{scheme.lower()}://{host.strip()}")
    try:
        url_port = parts.port
    except ValueError:
        raise SchemaRegistryConnectionError(f"{where}: host {host!r} has an invalid port.") from None
    netloc = parts.netloc
    if port:
        if url_port is not None and url_port != port:
            raise SchemaRegistryConnectionError(f"{where}: the port field {port} and the port of host {host!r} "
                                                f"disagree; keep one.")
        if url_port is None:
            netloc = f"{netloc}:{port}"
    return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), parts.query, parts.fragment))


# ---- the registry --------------------------------------------------------------------------------

@dataclass(frozen=True)
class SchemaReference:
    """A named type the schema imports from another subject's version."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegistrySchema:
    """A schema as the registry returned it. ``schema_id``/``guid``: what the lookup named, plus what
    the registry returned (a subject version has both when the registry assigns GUIDs)."""

    schema_str: str
    schema_type: str = "AVRO"
    references: tuple[SchemaReference, ...] = ()
    schema_id: int | None = None
    guid: str | None = None
    subject: str | None = None
    version: int | None = None


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The client's network-level errors: httpx2's (what 2.16.1 uses when installed) or httpx's."""
    found: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        try:
            found.append(__import__(name).TransportError)
        except ImportError:
            pass
    return tuple(found)


class SchemaRegistry:
    """Schemas by id, GUID or subject version, each fetched once per instance (make one per plan
    task: a subject's "latest" then stays the same for the whole plan)."""

    def __init__(self, settings: RegistrySettings) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.settings = settings
        self._cache: dict[tuple[Any, ...], RegistrySchema] = {}
        self._transport_errors = _transport_errors()
        try:
            self._client = SchemaRegistryClient(settings.client_config())
        except (ValueError, TypeError, OSError) as exc:  # OSError: a CA file that does not load
            raise SchemaRegistryConnectionError(f"{settings.describe()}: the client refused its settings "
                                                f"({type(exc).__name__}: {exc}). Fix the connection.") from exc

    @classmethod
    def from_connection(cls, conn_id: str, field: str = "schema_registry.conn_id") -> SchemaRegistry:
        return cls(RegistrySettings.from_connection(conn_id, field))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> SchemaRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_by_id(self, schema_id: int, where: str) -> RegistrySchema:
        """The schema registered under ``schema_id`` (the prefix form's id); ``where``: the record or
        batch that needs it, for the error message."""
        if isinstance(schema_id, bool) or not isinstance(schema_id, int) or not 0 <= schema_id < 2**32:
            raise ValueError(f"a schema id is an unsigned 32-bit int, got {schema_id!r}")
        return self._fetch(("id", schema_id), f"schema id {schema_id}", where,
                           lambda: self._client.get_schema(schema_id))

    def schema_by_guid(self, guid: str | uuid.UUID, where: str) -> RegistrySchema:
        """The schema with ``guid`` (the header form's GUID)."""
        canonical = str(uuid.UUID(str(guid)))
        return self._fetch(("guid", canonical), f"schema GUID {canonical}", where,
                           lambda: self._client.get_schema_by_guid(canonical))

    def subject_version(self, subject: str, version: int | Literal["latest"], where: str) -> RegistrySchema:
        """Version ``version`` (a number from 1, or "latest") of ``subject``, with its id and GUID."""
        if version != "latest" and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
            raise ValueError(f"a subject version is a number from 1 or 'latest', got {version!r}")
        what = (f"the latest version of subject '{subject}'" if version == "latest"
                else f"version {version} of subject '{subject}'")

        def call() -> Any:
            if version == "latest":
                return self._client.get_latest_version(subject)
            return self._client.get_version(subject, version)

        return self._fetch(("subject", subject, version), what, where, call)

    def versions(self, subject: str, where: str) -> list[int]:
        """The version numbers ``subject`` has now (``GET /subjects/{subject}/versions``), not cached:
        the plan task asks again after it fixed a batch's ranges."""
        from confluent_kafka.schema_registry import SchemaRegistryError

        what, started = f"the versions of subject '{subject}'", time.monotonic()
        try:
            return sorted(int(v) for v in self._client.get_versions(subject))
        except SchemaRegistryError as exc:
            raise self._http_error(exc, "subject", what, where, time.monotonic() - started) from exc
        except self._transport_errors as exc:
            raise self._transport_error(exc, what, where, time.monotonic() - started) from exc

    # ---- calls and their errors -----------------------------------------------------------------

    def _fetch(self, key: tuple[Any, ...], what: str, where: str, call: Callable[[], Any]) -> RegistrySchema:
        if key in self._cache:
            return self._cache[key]
        from confluent_kafka.schema_registry import SchemaRegistryError

        started = time.monotonic()
        try:
            found = call()
        except SchemaRegistryError as exc:
            raise self._http_error(exc, key[0], what, where, time.monotonic() - started) from exc
        except self._transport_errors as exc:
            raise self._transport_error(exc, what, where, time.monotonic() - started) from exc
        except json.JSONDecodeError as exc:  # a 2xx whose body is not JSON: a proxy's or a UI's page
            raise SchemaRegistryRefusedError(
                f"{self.settings.describe()} answered the request for {what}, needed by {where}, with something "
                f"that is not the registry's JSON ({exc}). Check that the URL is the registry's REST API.") from exc
        schema = _registry_schema(found, key)
        if not schema.schema_str:
            raise SchemaRegistryRefusedError(f"{self.settings.describe()} answered the request for {what}, needed by "
                                             f"{where}, without a schema. Check that the URL is the registry's REST API.")
        log.debug("%s: fetched %s", self.settings.describe(), what)
        self._cache[key] = schema
        return schema

    def _http_error(self, exc: Any, kind: str, what: str, where: str, seconds: float) -> Exception:
        status, who = exc.http_status_code, self.settings.describe()
        answer = f"HTTP {status}, error code {exc.error_code}: {exc.error_message}"
        if status == 404 and not 40400 <= (exc.error_code or 0) < 40500:
            # A registry's 404 carries its JSON error (40401 subject, 40402 version, 40403 schema…);
            # a 404 without one is a web server's: the URL is not the registry's REST API.
            body = " ".join(str(exc.error_message).split())[:200]
            return SchemaRegistryRefusedError(
                f"{who} answered HTTP 404 without a schema registry's error (its body: {body!r}) when asked for "
                f"{what}, needed by {where}: this URL is not a schema registry's REST API (a web page, a wrong "
                f"path or port?). Check the connection's host, port and path. No retry fixes this.")
        if status == 404:
            if kind in ("id", "guid"):
                hint = ("The record names a schema this registry does not have: check that the connection points at "
                        "the registry its producers write to (another registry numbers its schemas differently) "
                        "and that the schema was not deleted.")
            else:
                hint = ("Check the subject's name (the default TopicNameStrategy names a topic's subjects "
                        "'<topic>-value' and '<topic>-key') and its versions (GET /subjects/<subject>/versions).")
            return SchemaNotFoundError(f"{who}: {what} is not there ({answer}); needed by {where}. {hint} "
                                       f"No retry fixes this.")
        if status in (401, 403):
            fix = ("The account may not read this: grant it read access to the subject or schema."
                   if status == 403 else
                   "Fix the connection's credentials: login and password for basic auth, or extra bearer.auth.token.")
            return SchemaRegistryAuthError(f"{who} refused this client ({self.settings.auth_description()}; {answer}) "
                                           f"when asked for {what}, needed by {where}. {fix} No retry fixes this.")
        if status >= 500 or status in RETRIED_STATUSES:
            attempts = MAX_RETRIES + 1 if status in RETRIED_STATUSES else 1
            return SchemaRegistryUnavailableError(
                f"{who} failed ({answer}) when asked for {what}, needed by {where}; {attempts} attempt(s) in "
                f"{seconds:.1f} s. A retry may succeed; if it persists, see the registry's own log.")
        return SchemaRegistryRefusedError(f"{who} refused the request for {what} ({answer}), needed by {where}. "
                                          f"The same request gets the same answer. No retry fixes this.")

    def _transport_error(self, exc: BaseException, what: str, where: str, seconds: float) -> Exception:
        who = self.settings.describe()
        tls = _tls_failure(exc)
        if isinstance(tls, ssl.SSLCertVerificationError):
            ca = self.settings.ca_location or "none set, so the default CA bundle"
            return SchemaRegistryAuthError(
                f"{who}: the registry's TLS certificate was not verified ({tls.verify_message or tls}) when asking "
                f"for {what}, needed by {where}. Set the connection's extra ssl.ca.location to the PEM file of the "
                f"CA that signed it (now: {ca}), and use a host name the certificate names. No retry fixes this.")
        if tls is not None:
            return SchemaRegistryConnectionError(
                f"{who}: the TLS handshake failed ({tls}) when asking for {what}, needed by {where}. Check the URL's "
                f"scheme: https:// only if the registry serves TLS. No retry fixes this.")
        return SchemaRegistryUnavailableError(
            f"{who} did not answer ({type(exc).__name__}: {exc}) when asked for {what}, needed by {where}; "
            f"{MAX_RETRIES + 1} attempts in {seconds:.1f} s. A retry may succeed once it is back: check that the "
            f"registry is running and that this host reaches {self.settings.url} (scheme, host and port).")


def _tls_failure(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error under a transport error, if one is a configuration problem (not an EOF)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ssl.SSLError) and not isinstance(
                cur, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


def _registry_schema(found: Any, key: tuple[Any, ...]) -> RegistrySchema:
    """``RegistrySchema`` from the client's ``Schema`` (by id/GUID) or ``RegisteredSchema`` (subject)."""
    registered = found if hasattr(found, "schema_id") else None
    schema = registered.schema if registered is not None else found
    refs = tuple(SchemaReference(r.name, r.subject, r.version) for r in (schema.references or []))
    return RegistrySchema(
        schema_str=schema.schema_str or "", schema_type=schema.schema_type or "AVRO", references=refs,
        schema_id=registered.schema_id if registered is not None else (key[1] if key[0] == "id" else None),
        guid=registered.guid if registered is not None else (key[1] if key[0] == "guid" else None),
        subject=registered.subject if registered is not None else None,
        version=registered.version if registered is not None else None)
