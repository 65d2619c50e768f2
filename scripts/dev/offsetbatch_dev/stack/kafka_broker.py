"""A single Apache Kafka 4 broker in KRaft mode (broker + controller in one JVM) on 127.0.0.1.

Started from the jars Maven resolved (``artifacts.fetch_kafka``), with its data and log in
``.local/kafka``. A restart keeps the data (fault-injection tests rely on that); ``wipe`` removes
it. Starting a running broker is a no-op; a port held by anything else is a clear error.

The same class is one node of a multi-node KRaft cluster when given a ``Quorum`` (what the nodes
share: cluster id, the controllers' ports and metadata directory ids, replication settings):
``kafka_cluster.KafkaCluster`` builds three of them; the single broker keeps its static
``controller.quorum.voters`` and its home.

Two security modes, chosen when the home is first formatted and kept with it:

* ``plaintext`` (default): ``PLAINTEXT://127.0.0.1:<port>``, no authentication.
* ``sasl_ssl``: ``SASL_SSL://127.0.0.1:<port>`` with SCRAM-SHA-512 users ``admin`` (super user,
  inter-broker) and ``pipeline`` created at format time, a locally made self-signed CA whose PEM
  clients trust, and owner-only secret files; ``acl=True`` adds the StandardAuthorizer with
  ``allow.everyone.if.no.acl.found=false``. Layout, listener choices (the controller listener is
  loopback ``SASL_PLAINTEXT``/PLAIN, not an ANONYMOUS super user) and why: ``kafka_security``.
"""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from offsetbatch.paths import local_dir
from offsetbatch_dev.stack import artifacts
from offsetbatch_dev.stack.kafka_security import (
    ADMIN,
    PIPELINE,
    BrokerSecurity,
    KafkaSecurityError,
    _write_private,
    pipeline_acls,
)
from offsetbatch_dev.stack.processes import (
    StackProcessError,
    alive,
    launch,
    port_open,
    read_pid,
    require_free,
    stop_pid,
    tail,
)

log = logging.getLogger(__name__)

DEFAULT_PORT = 9092
Security = Literal["plaintext", "sasl_ssl"]
SECURITY_MODES: tuple[Security, ...] = ("plaintext", "sasl_ssl")
LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class BrokerError(StackProcessError):
    """The broker could not be started or stopped; the message says why and what to do."""


_port_open, _alive = port_open, alive  # the names this module used before processes.py existed


def new_kafka_uuid() -> str:
    """A random id as Kafka's ``Uuid.toString`` writes it (cluster ids, directory ids); never one
    starting with ``-``, which Kafka's tools would read as an option."""
    value = "-"
    while value.startswith("-"):
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return value


def registered_nodes(cluster: dict[str, Any]) -> set[int]:
    """Node ids in kafka-python's ``describe_cluster()`` answer that are registered and unfenced."""
    return {b["broker_id"] for b in cluster.get("brokers") or [] if not b.get("is_fenced")}


@dataclass(frozen=True)
class Quorum:
    """What every node of a multi-node KRaft cluster (combined broker + controller nodes) shares.

    ``voters`` are ``(node id, controller port, metadata directory id)``: the initial controllers
    every node's storage is formatted with (``--initial-controllers``: a dynamic quorum, Kafka 4's
    way; its voters' endpoints are recorded in the metadata log, so the ports cannot change later)."""

    cluster_id: str
    voters: tuple[tuple[int, int, str], ...]
    replication: int = 3
    min_insync: int = 2

    def controller_port(self, node_id: int) -> int:
        return next(port for nid, port, _ in self.voters if nid == node_id)

    @property
    def bootstrap_servers(self) -> str:
        """``controller.quorum.bootstrap.servers``: every controller's loopback endpoint."""
        return ",".join(f"127.0.0.1:{port}" for _, port, _ in self.voters)

    @property
    def initial_controllers(self) -> str:
        return ",".join(f"{nid}@127.0.0.1:{port}:{directory}" for nid, port, directory in self.voters)

    def properties(self, node_id: int) -> dict[str, str]:
        """``server.properties`` entries of node ``node_id``: its id, the dynamic quorum, and topics
        (internal ones too) replicated to ``replication`` nodes, acknowledged by ``min_insync``."""
        rf, isr = str(self.replication), str(self.min_insync)
        return {
            "node.id": str(node_id),
            "controller.quorum.bootstrap.servers": self.bootstrap_servers,
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
        }


@dataclass
class KafkaBroker:
    """One local broker; ``home`` holds its config, data, log and pid file (and, secured, its
    TLS material and secrets). With ``quorum``, node ``node_id`` of a multi-node cluster."""

    port: int = DEFAULT_PORT
    home: Path | None = None
    heap: str = "768m"
    # JVM options besides the heap: a test suite's brokers, busy for seconds at a time, take the quick
    # (C1) compiler and the serial collector, which cost less CPU than C2 and G1's threads there.
    jvm_options: tuple[str, ...] = ("-XX:+UseG1GC",)
    security: Security = "plaintext"
    acl: bool = False
    node_id: int = 1
    quorum: Quorum | None = None

    def __post_init__(self) -> None:
        self.home = Path(self.home or local_dir() / "kafka")
        self.controller_port = self.quorum.controller_port(self.node_id) if self.quorum else self.port + 1
        if self.security not in SECURITY_MODES:
            raise BrokerError(f"unknown broker security {self.security!r}; use one of {', '.join(SECURITY_MODES)}")
        if self.acl and not self.secure:
            raise BrokerError("ACLs need authenticated clients: use security='sasl_ssl' (--secure) with acl=True (--acl)")
        if self.quorum and self.secure:
            raise BrokerError("a multi-node cluster runs PLAINTEXT only for now: start a single broker for --secure")
        self.material = BrokerSecurity(self.home)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def secure(self) -> bool:
        return self.security == "sasl_ssl"

    @property
    def ca_file(self) -> Path:
        """The local CA's PEM certificate, for clients' ``ssl.ca.location`` (secured mode)."""
        return self.material.ca_file

    def credentials_file(self, user: str = PIPELINE) -> Path:
        """Owner-only JSON file with ``user``'s Airflow Kafka connection ``extra`` (secured mode)."""
        return self.material.credentials_file(user)

    @property
    def mode_file(self) -> Path:
        return self.home / "security.mode"

    def formatted_security(self) -> Security | None:
        """The mode the home's storage was formatted with; ``None`` before the first start."""
        if not (self.data_dir / "meta.properties").exists():
            return None
        try:
            mode = self.mode_file.read_text().strip()
        except OSError:
            return "plaintext"  # formatted before security modes existed
        return mode if mode in SECURITY_MODES else "plaintext"  # type: ignore[return-value]

    def _require_secure(self, what: str) -> None:
        if not self.secure:
            raise BrokerError(f"{what} exists only for a secured broker: KafkaBroker(security='sasl_ssl') (--secure)")

    def client_kwargs(self, user: str = ADMIN) -> dict[str, Any]:
        """kafka-python keyword arguments (besides ``bootstrap_servers``) to connect as ``user``:
        SCRAM-SHA-512 over TLS verified against the local CA, hostname checked. Empty in plaintext
        mode, so callers can always splat it."""
        return self.material.kafka_python_kwargs(user) if self.secure else {}

    def connection_extra(self, user: str = PIPELINE) -> dict[str, str]:
        """``user``'s client settings in the Airflow Kafka connection ``extra`` vocabulary
        (``bootstrap.servers``, ``security.protocol``, ``sasl.*``, ``ssl.ca.location``)."""
        if not self.secure:
            return {"bootstrap.servers": self.bootstrap}
        return self.material.connection_extra(self.bootstrap, user)

    def secret_files(self) -> list[Path]:
        """Every broker-side file holding a secret (all mode 0600)."""
        self._require_secure("secret files")
        return [self.home / "server.properties", *self.material.secret_files()]

    def admin_client(self, **overrides: Any):
        """A kafka-python admin client authenticated as ``admin`` (plaintext: anonymous)."""
        from kafka import KafkaAdminClient

        return KafkaAdminClient(**{"bootstrap_servers": self.bootstrap, **self.client_kwargs(ADMIN), **overrides})

    def grant_pipeline(self, topics: list[str] | tuple[str, ...], group: str, user: str = PIPELINE) -> list[Any]:
        """Let ``user`` do what a pipeline does and nothing else: DESCRIBE+READ on ``topics``,
        READ+DESCRIBE on ``group``. Created as ``admin`` with the admin client's ``create_acls``;
        returns the ACLs. Granting again is harmless (ACLs are a set)."""
        self._require_secure("grant_pipeline")
        return self._create_acls(user, pipeline_acls(user, topics, group))

    def grant(self, user: str, resource: str, name: str, *operations: str) -> list[Any]:
        """Allow ``user`` the ``operations`` (``ACLOperation`` names: ``"WRITE"``…) on one resource
        (a ``ResourceType`` name: ``"TOPIC"``, ``"GROUP"``, ``"TRANSACTIONAL_ID"``), as ``admin``."""
        from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType

        self._require_secure("grant")
        pattern = ResourcePattern(ResourceType[resource], name)
        return self._create_acls(user, [ACL(principal=f"User:{user}", host="*", operation=ACLOperation[op],
                                            permission_type=ACLPermissionType.ALLOW, resource_pattern=pattern)
                                        for op in operations])

    def revoke(self, user: str, resource: str, name: str, *operations: str) -> None:
        """Take back what ``grant`` gave (the same arguments)."""
        from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ResourcePatternFilter, ResourceType
        from kafka.admin import ACLResourcePatternType

        pattern = ResourcePatternFilter(ResourceType[resource], name, ACLResourcePatternType.LITERAL)
        admin = self.admin_client(request_timeout_ms=10_000)
        try:
            for op in operations:
                admin.delete_acls([ACLFilter(principal=f"User:{user}", host="*", operation=ACLOperation[op],
                                             permission_type=ACLPermissionType.ALLOW, resource_pattern=pattern)])
        finally:
            admin.close()

    def _create_acls(self, user: str, acls: list[Any]) -> list[Any]:
        if not self.acl:
            raise BrokerError("granting ACLs needs the authorizer: start the broker with acl=True (--acl)")
        admin = self.admin_client(request_timeout_ms=10_000)
        try:
            result = admin.create_acls(acls)
        finally:
            admin.close()
        if result["failed"]:
            raise BrokerError(f"creating ACLs for User:{user} on {self.bootstrap} failed: {result['failed']}")
        return acls

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def log_file(self) -> Path:
        return self.home / "broker.log"

    @property
    def pid_file(self) -> Path:
        return self.home / "broker.pid"

    def pid(self) -> int | None:
        return read_pid(self.pid_file)

    def _write_config(self) -> Path:
        props: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Keep records of any age (tests and demos produce back-dated timestamps); retention tests
            # delete records explicitly, and the cleaner notices within a second.
            "log.retention.ms": "-1",
            "log.retention.check.interval.ms": "1000",
            "log.segment.delete.delay.ms": "0",
            "delete.topic.enable": "true",
        }
        if self.quorum:
            del props["controller.quorum.voters"]
            props |= self.quorum.properties(self.node_id)
        self.home.mkdir(parents=True, exist_ok=True)
        if self.secure:
            self.material.ensure()
            props |= self.material.broker_properties(self.port, self.controller_port, self.acl)
            self.material.write_credentials(self.bootstrap)
        cfg = self.home / "server.properties"
        # Owner-only: in secured mode it holds the keystore password and the JAAS entries.
        _write_private(cfg, "".join(f"{k}={v}\n" for k, v in props.items()))
        (self.home / "log4j2.properties").write_text(LOG4J2.format(log_file=self.home / "server.log"))
        return cfg

    def _java(self, main_class: str, *args: str) -> list[str]:
        libs = artifacts.fetch_kafka()
        return [
            shutil.which("java") or "java",
            f"-Xmx{self.heap}", "-Xms256m", *self.jvm_options,
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
            "-cp", f"{libs}/*", main_class, *args,
        ]

    def _format_storage(self, cfg: Path) -> None:
        if (self.data_dir / "meta.properties").exists():
            return
        cluster_id = self.quorum.cluster_id if self.quorum else new_kafka_uuid()
        args = ["format", f"--cluster-id={cluster_id}", "-c", str(cfg)]
        if self.quorum:
            args.append(f"--initial-controllers={self.quorum.initial_controllers}")
        if self.secure:
            # SCRAM users are created with the storage: arguments from an owner-only @argfile.
            argfile = self.material.format_argfile(["kafka.tools.StorageTool", *args])
            cmd = self._java(f"@{argfile}")
        else:
            argfile, cmd = None, self._java("kafka.tools.StorageTool", *args)
        try:
            result = subprocess.run(cmd, capture_output=True, text=True)
        finally:
            if argfile is not None:
                argfile.unlink(missing_ok=True)
        if result.returncode != 0:
            out = f"{result.stdout}{result.stderr}"
            if self.secure:
                out = out.replace(self.material.password(ADMIN), "***").replace(self.material.password(PIPELINE), "***")
            raise BrokerError(f"formatting KRaft storage in {self.data_dir} failed:\n{out}")
        self.mode_file.write_text(self.security + "\n")
        log.info("formatted KRaft storage in %s (cluster id %s, %s)", self.data_dir, cluster_id, self.security)

    def _check_mode(self) -> None:
        have = self.formatted_security()
        if have is not None and have != self.security:
            flag = "with --secure" if have == "sasl_ssl" else "without --secure"
            raise BrokerError(
                f"the broker in {self.home} was formatted as {have}, not {self.security}: start it {flag}, "
                f"or wipe it first (offsetbatch-stack kafka wipe) to change its security mode"
            )

    port_hint = "KAFKA_PORT=..."

    def start(self, timeout: float = 90.0) -> float:
        """Start (or find running) and wait until it answers metadata requests; returns seconds taken."""
        t0 = time.monotonic()
        proc = self.launch()
        self.wait_ready(timeout, proc)
        took = time.monotonic() - t0
        if proc is not None:
            log.info("kafka broker ready on %s (pid %d) in %.1fs", self.bootstrap, proc.pid, took)
        return took

    def launch(self) -> subprocess.Popen | None:
        """Start the broker's JVM without waiting for it (``None`` if it runs already): a cluster
        launches all its nodes before any can be ready, since a node needs a controller majority."""
        self._check_mode()
        if self.pid():
            return None
        require_free((self.port, self.controller_port), f"the broker of {self.home}", self.port_hint, BrokerError)
        try:
            cfg = self._write_config()
        except KafkaSecurityError as exc:
            raise BrokerError(str(exc)) from exc
        self._format_storage(cfg)
        return launch(self._java("kafka.Kafka", str(cfg)), self.log_file, self.pid_file)

    def wait_ready(self, timeout: float, proc: subprocess.Popen | None = None) -> None:
        """Block until the broker answers a metadata request listing itself (secured: as ``admin``):
        a node is listed once it has registered with the controller and is not fenced."""
        from kafka.errors import KafkaError, SaslAuthenticationFailedError

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise BrokerError(f"the broker exited with code {proc.returncode}; see {self.log_file}:\n{self._tail()}")
            if port_open(self.port):
                try:
                    admin = self.admin_client(request_timeout_ms=5000, bootstrap_timeout_ms=5000)
                    try:
                        if self.node_id in registered_nodes(admin.describe_cluster()):
                            return
                    finally:
                        admin.close()
                except SaslAuthenticationFailedError as exc:
                    raise BrokerError(
                        f"the broker on {self.bootstrap} rejected the admin credentials of {self.material.secrets_dir} "
                        f"({exc}); another broker may hold the port, or the home's secrets were replaced: "
                        f"wipe it (offsetbatch-stack kafka wipe) and start again"
                    ) from None
                except KafkaError as exc:  # not ready yet: controller still electing itself
                    last = exc
            time.sleep(0.2)
        raise BrokerError(f"broker on {self.bootstrap} not ready after {timeout:.0f}s ({last}); see {self.log_file}:\n{self._tail()}")

    def _tail(self, lines: int = 30) -> str:
        return tail(self.log_file, lines)

    def stop(self, timeout: float = 60.0, hard: bool = False) -> None:
        """Stop by pid: SIGTERM (controlled shutdown) or, with ``hard``, SIGKILL (a crash)."""
        pid = self.pid()
        if pid is None:
            return
        stop_pid(pid, timeout, hard, ports=(self.port, self.controller_port))
        self.pid_file.unlink(missing_ok=True)
        log.info("kafka broker on %s %s", self.bootstrap, "killed" if hard else "stopped")

    def wipe(self) -> None:
        """Stop and delete all topics, offsets and logs."""
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)
        log.info("kafka broker data in %s wiped", self.home)
