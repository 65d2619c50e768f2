"""The Airflow Kafka connection, translated in one place into every client offsetbatch runs.

A pipeline names one Airflow connection (``kafka.conn_id``, ``conn_type: kafka``). Its ``extra`` is
the client configuration the Airflow Kafka provider documents (librdkafka names, as confluent-kafka
takes them): ``bootstrap.servers``, ``security.protocol``, ``sasl.*``, ``ssl.*``. Everything that
talks to Kafka gets its settings from ``KafkaClientConfig``:

* ``kafka_python()``: keyword arguments of kafka-python's clients (planner, commit's group offsets,
  CLI, doctor, UI plugin);
* ``librdkafka()``: confluent-kafka's configuration (the Kafka sink's transactional publish);
* ``spark_options()`` / ``spark_secrets()``: the ``kafka.``-prefixed options of Spark's Kafka source
  (the job), split so that secrets never enter a job spec: the spark_job task hands them to the
  job in a file only its user can read (``offsetbatch.job_secrets``), removed after the run.

A key this module does not know is an error naming it, never silently dropped; the few consumer
keys that have no meaning for offsetbatch (``IGNORED``) are accepted and logged once with the
reason. The connection's ``login``/``password`` fields are the SASL credentials when the extra has
none (secrets backends often store them there).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offsetbatch.errors import KafkaConnectionError

log = logging.getLogger(__name__)

_ENTRY = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(:\d{1,5})?")
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
SUPPORTED = frozenset({
    "bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
    "sasl.password", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "client.id",
})
IGNORED = {
    "group.id": "the pipeline's consumer group is kafka.group_id in its YAML",
    "enable.auto.commit": "offsetbatch commits group offsets itself, after each batch",
    "auto.offset.reset": "the pipeline's starting_policy decides where a new partition starts",
}
SECRET_KEYS = frozenset({"sasl.password", "ssl.key.password"})


@dataclass(frozen=True)
class KafkaClientConfig:
    """One Kafka connection's client settings, in the connection's own (librdkafka) names."""

    conn_id: str
    settings: dict[str, str] = field(repr=False)

    @property
    def bootstrap(self) -> str:
        return self.settings["bootstrap.servers"]

    @property
    def protocol(self) -> str:
        return self.settings.get("security.protocol", "PLAINTEXT").upper()

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def mechanism(self) -> str | None:
        return self.settings.get("sasl.mechanism", "").upper() or None

    def describe(self) -> str:
        """For log lines and errors: never a secret."""
        who = f" as {self.settings['sasl.username']}" if self.uses_sasl and self.settings.get("sasl.username") else ""
        return f"connection '{self.conn_id}' ({self.protocol}{who}, {self.bootstrap})"

    # ---- kafka-python ---------------------------------------------------------------------------

    def kafka_python(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python's ``KafkaAdminClient`` / ``KafkaConsumer`` / ``KafkaProducer``."""
        s = self.settings
        kw: dict[str, Any] = {"bootstrap_servers": self.bootstrap, "security_protocol": self.protocol}
        if "client.id" in s:
            kw["client_id"] = s["client.id"]
        if self.uses_sasl:
            kw.update(sasl_mechanism=self.mechanism, sasl_plain_username=s["sasl.username"],
                      sasl_plain_password=s["sasl.password"])
        if self.uses_tls:
            kw["ssl_check_hostname"] = _verifies_hostname(s)
            for key, arg in (("ssl.ca.location", "ssl_cafile"), ("ssl.certificate.location", "ssl_certfile"),
                             ("ssl.key.location", "ssl_keyfile"), ("ssl.key.password", "ssl_password")):
                if key in s:
                    kw[arg] = s[key]
        return kw

    # ---- librdkafka (confluent-kafka: the Kafka sink's publish) ----------------------------------

    def librdkafka(self) -> dict[str, str]:
        """confluent-kafka's configuration: the connection's own keys (librdkafka names already),
        with hostname verification spelled as librdkafka takes it."""
        conf = dict(self.settings)
        if "ssl.endpoint.identification.algorithm" in conf:
            conf["ssl.endpoint.identification.algorithm"] = "https" if _verifies_hostname(conf) else "none"
        return conf

    # ---- Spark's Kafka source (the job) ---------------------------------------------------------

    def spark_options(self) -> dict[str, str]:
        """The non-secret ``kafka.*`` options: safe in a job spec (it is a file next to the table)."""
        s = self.settings
        opts = {"kafka.security.protocol": self.protocol}
        if self.uses_sasl:
            opts["kafka.sasl.mechanism"] = self.mechanism
        if self.uses_tls:
            opts["kafka.ssl.endpoint.identification.algorithm"] = "https" if _verifies_hostname(s) else ""
            if "ssl.ca.location" in s:
                # The CA inline (it is public): executors need no copy of the file, on any cluster.
                opts.update({"kafka.ssl.truststore.type": "PEM",
                             "kafka.ssl.truststore.certificates": _read(s["ssl.ca.location"], "ssl.ca.location", self)})
            if "ssl.certificate.location" in s:
                opts["kafka.ssl.keystore.type"] = "PEM"
        return opts

    def spark_secrets(self) -> dict[str, str]:
        """The secret ``kafka.*`` options (SASL login, client key): only ever in a private file."""
        s = self.settings
        secrets: dict[str, str] = {}
        if self.uses_sasl:
            secrets["kafka.sasl.jaas.config"] = (
                f'{MECHANISMS[self.mechanism]} required username="{_jaas_quote(s["sasl.username"])}" '
                f'password="{_jaas_quote(s["sasl.password"])}";')
        if self.uses_tls and "ssl.certificate.location" in s:
            # Java's PEM keystore takes the chain and the key inline; the key is secret.
            secrets["kafka.ssl.keystore.certificate.chain"] = _read(s["ssl.certificate.location"], "ssl.certificate.location", self)
            secrets["kafka.ssl.keystore.key"] = _read(s["ssl.key.location"], "ssl.key.location", self)
            if "ssl.key.password" in s:
                secrets["kafka.ssl.key.password"] = s["ssl.key.password"]
        return secrets


def _verifies_hostname(s: dict[str, str]) -> bool:
    # librdkafka's default since 1.9 is "https" (verify); "none" or "" switches it off.
    return s.get("ssl.endpoint.identification.algorithm", "https").lower() not in ("none", "")


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _read(path: str, key: str, cfg: KafkaClientConfig) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise KafkaConnectionError(f"Kafka {cfg.describe()}: {key} {path!r} cannot be read ({exc.strerror}). "
                                   f"Point it at a PEM file this user can read.") from exc


def from_settings(conn_id: str, extra: dict[str, Any], host: str | None = None, port: int | None = None,
                  login: str | None = None, password: str | None = None) -> KafkaClientConfig:
    """Validate a connection's fields into a ``KafkaClientConfig`` (raises ``KafkaConnectionError``
    naming the connection and the field)."""
    where = f"Kafka connection '{conn_id}'"
    settings = {str(k): str(v) for k, v in (extra or {}).items() if v is not None}
    unknown = sorted(k for k in settings if k not in SUPPORTED and k not in IGNORED)
    if unknown:
        raise KafkaConnectionError(
            f"{where}: extra key(s) {', '.join(unknown)} are not supported by offsetbatch (supported: "
            f"{', '.join(sorted(SUPPORTED))}). Remove them or ask for support: they would otherwise be dropped.")
    for key in sorted(set(settings) & set(IGNORED)):
        log.info("%s: extra %s is not used: %s", where, key, IGNORED[key])
        settings.pop(key)
    if "sasl.mechanisms" in settings:  # librdkafka accepts both spellings
        mech = settings.pop("sasl.mechanisms")
        if settings.setdefault("sasl.mechanism", mech) != mech:
            raise KafkaConnectionError(f"{where}: sasl.mechanism and sasl.mechanisms disagree; keep one")
    if "bootstrap.servers" not in settings:
        if not host:
            raise KafkaConnectionError(f"{where} has neither extra 'bootstrap.servers' nor a host. Set "
                                       f"extra {{\"bootstrap.servers\": \"host:9092\"}}.")
        settings["bootstrap.servers"] = f"{host}:{port or 9092}"
    settings["bootstrap.servers"] = _bootstrap_list(str(settings["bootstrap.servers"]), where)
    protocol = settings.setdefault("security.protocol", "PLAINTEXT").upper()
    settings["security.protocol"] = protocol
    if protocol not in PROTOCOLS:
        raise KafkaConnectionError(f"{where}: security.protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    for field_name, value in (("sasl.username", login), ("sasl.password", password)):
        if value:
            if settings.get(field_name, value) != value:
                raise KafkaConnectionError(f"{where}: the connection's {'login' if field_name.endswith('name') else 'password'} "
                                           f"field and extra {field_name} disagree; keep one")
            settings.setdefault(field_name, value)
    if protocol.startswith("SASL_"):
        mech = settings.get("sasl.mechanism", "").upper()
        if mech not in MECHANISMS:
            raise KafkaConnectionError(f"{where}: security.protocol {protocol} needs sasl.mechanism, one of "
                                       f"{', '.join(MECHANISMS)} (got {mech or 'none'}); GSSAPI and OAUTHBEARER are not supported")
        settings["sasl.mechanism"] = mech
        missing = [k for k in ("sasl.username", "sasl.password") if not settings.get(k)]
        if missing:
            raise KafkaConnectionError(f"{where}: security.protocol {protocol} needs {' and '.join(missing)} "
                                       f"(in extra, or the connection's login/password)")
    else:
        stray = sorted(k for k in settings if k.startswith("sasl."))
        if stray:
            raise KafkaConnectionError(f"{where}: {', '.join(stray)} set but security.protocol is {protocol}, so "
                                       f"they would be ignored. Set security.protocol to SASL_SSL (or SASL_PLAINTEXT).")
    if protocol in ("SSL", "SASL_SSL"):
        if ("ssl.certificate.location" in settings) != ("ssl.key.location" in settings):
            raise KafkaConnectionError(f"{where}: a client certificate needs both ssl.certificate.location and "
                                       f"ssl.key.location")
        for key in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"):
            if key in settings and not Path(settings[key]).is_file():
                raise KafkaConnectionError(f"{where}: {key} {settings[key]!r} is not a file on this host")
        if "ssl.key.location" in settings:
            head = Path(settings["ssl.key.location"]).read_text(errors="replace")[:200]
            if "BEGIN RSA PRIVATE KEY" in head or "BEGIN EC PRIVATE KEY" in head:
                raise KafkaConnectionError(
                    f"{where}: ssl.key.location {settings['ssl.key.location']!r} is a PKCS#1/SEC1 key, which Spark's "
                    f"(Java) Kafka client cannot read. Convert it once: openssl pkcs8 -topk8 -in KEY -out KEY.p8 "
                    f"(add -nocrypt for an unencrypted key) and point ssl.key.location at the result.")
    else:
        stray = sorted(k for k in settings if k.startswith("ssl."))
        if stray:
            raise KafkaConnectionError(f"{where}: {', '.join(stray)} set but security.protocol is {protocol}, so "
                                       f"they would be ignored. Set security.protocol to SSL or SASL_SSL.")
    return KafkaClientConfig(conn_id, settings)


def _bootstrap_list(value: str, where: str) -> str:
    """``host[:port][,host[:port]…]`` with each entry checked (a missing port is Kafka's 9092): an
    empty or mangled list (``''``, ``'::::,,'``) is a config error naming it, not a raw ``ValueError``
    retried as unreachable."""
    entries = [e.strip() for e in value.split(",") if e.strip()]
    bad = [e for e in entries if not _ENTRY.fullmatch(e) or (":" in e.rsplit("]", 1)[-1]
                                                             and not 0 < int(e.rsplit(":", 1)[1]) < 65536)]
    if not entries or bad:
        raise KafkaConnectionError(f"{where}: bootstrap.servers {value!r} is not a list of host:port (bad: "
                                   f"{', '.join(repr(b) for b in bad) or 'no entry'}); write it as "
                                   f"\"broker-1:9092,broker-2:9092\" (an IPv6 host in brackets: \"[::1]:9092\")")
    return ",".join(entries)


def from_connection(conn_id: str, field: str = "kafka.conn_id") -> KafkaClientConfig:
    """The client settings of an Airflow connection (environment, metadata DB or a secrets backend);
    ``field``: the config field that names it, for the error when it is not defined."""
    from offsetbatch.connections import get_connection

    conn = get_connection(conn_id, field)
    return from_settings(conn_id, conn.extra_dejson, conn.host, conn.port, conn.login, conn.password)
