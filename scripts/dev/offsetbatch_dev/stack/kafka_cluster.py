"""A multi-node Kafka 4 cluster on 127.0.0.1: N combined KRaft nodes (broker + controller each).

The cheapest replicated cluster that fails like a real one: three JVMs, each a broker and a voter
of the controller quorum, formatted with ``--initial-controllers`` (a dynamic quorum), topics
replicated to 3 nodes with ``min.insync.replicas=2`` (internal topics too), so one node can die
(``kill -9``) while producers with ``acks=all`` and readers carry on through the other two.

Ports: node i (1-based) serves clients on ``port + i - 1`` and its controller on
``port + N + i - 1`` (defaults: clients 9092-9094, controllers 9095-9097). Each node is a
``KafkaBroker`` with its own home ``<home>/node-<i>`` (config, data, log, pid file);
``<home>/cluster.json`` keeps the cluster id, the ports and the nodes' metadata directory ids,
chosen at the first start: a formatted cluster restarts only on the same ports (a dynamic quorum
records its controllers' endpoints), so other ports need a ``wipe`` first.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offsetbatch.paths import local_dir
from offsetbatch_dev.stack.kafka_broker import (
    DEFAULT_PORT,
    BrokerError,
    KafkaBroker,
    Quorum,
    new_kafka_uuid,
    registered_nodes,
)
from offsetbatch_dev.stack.processes import stop_pid, wait_for

log = logging.getLogger(__name__)

DEFAULT_BROKERS = 3
REPLICATION = 3
MIN_INSYNC = 2


@dataclass
class KafkaCluster:
    """``brokers`` combined KRaft nodes on loopback; ``nodes`` are ordinary ``KafkaBroker``s, so a
    test stops one (``node.stop(hard=True)`` is a ``kill -9``) and starts it again (``node.start()``)."""

    port: int = DEFAULT_PORT
    brokers: int = DEFAULT_BROKERS
    home: Path | None = None
    heap: str = "512m"

    def __post_init__(self) -> None:
        self.home = Path(self.home or local_dir() / "kafka-cluster")
        if self.brokers < REPLICATION:
            raise BrokerError(
                f"a cluster needs at least {REPLICATION} brokers (replication factor {REPLICATION}, "
                f"min.insync.replicas {MIN_INSYNC}); for one broker leave out --brokers"
            )
        self._mismatch: str | None = None
        self._requested = (self.port, self.brokers)
        stored = self._read_spec()
        if stored and (stored["port"], stored["brokers"]) != (self.port, self.brokers):
            self._mismatch = (
                f"the cluster in {self.home} was formatted with {stored['brokers']} brokers on ports from "
                f"{stored['port']}, not {self.brokers} from {self.port}: start it with --brokers "
                f"{stored['brokers']} --port {stored['port']}, or wipe it first (offsetbatch-stack kafka wipe "
                f"--brokers {stored['brokers']} --port {stored['port']})"
            )
            self.port, self.brokers = stored["port"], stored["brokers"]  # stop/status/wipe act on what exists
        self._build(stored or self._new_spec())

    def _new_spec(self) -> dict[str, Any]:
        return {"cluster_id": new_kafka_uuid(), "port": self.port, "brokers": self.brokers,
                "directory_ids": [new_kafka_uuid() for _ in range(self.brokers)]}

    def _build(self, spec: dict[str, Any]) -> None:
        self._spec = spec
        self.quorum = Quorum(
            cluster_id=spec["cluster_id"],
            voters=tuple((i + 1, self.port + self.brokers + i, spec["directory_ids"][i]) for i in range(self.brokers)),
            replication=REPLICATION, min_insync=MIN_INSYNC,
        )
        self.nodes: list[KafkaBroker] = []
        for i in range(self.brokers):
            node = KafkaBroker(port=self.port + i, home=self.home / f"node-{i + 1}", heap=self.heap,
                               node_id=i + 1, quorum=self.quorum)
            node.port_hint = f"--port of 'offsetbatch-stack kafka start --brokers {self.brokers}', or KAFKA_PORT=..."
            self.nodes.append(node)

    @property
    def spec_file(self) -> Path:
        return self.home / "cluster.json"

    def _read_spec(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.spec_file.read_text())
        except (OSError, ValueError):
            return None

    @property
    def bootstrap(self) -> str:
        """Every node's client endpoint, comma-separated: clients survive any one node's loss."""
        return ",".join(n.bootstrap for n in self.nodes)

    def client_kwargs(self, user: str | None = None) -> dict[str, Any]:
        """kafka-python keyword arguments besides ``bootstrap_servers``: none (PLAINTEXT), as
        ``KafkaBroker.client_kwargs`` of a plaintext broker, so callers treat both alike."""
        return {}

    def connection_extra(self, user: str | None = None) -> dict[str, str]:
        """The Airflow Kafka connection ``extra``: every node in ``bootstrap.servers``."""
        return {"bootstrap.servers": self.bootstrap}

    @property
    def cluster_id(self) -> str:
        return self.quorum.cluster_id

    def node(self, node_id: int) -> KafkaBroker:
        """The node with Kafka node id ``node_id`` (1-based, as ``leader_of`` returns)."""
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise BrokerError(f"no node {node_id} in the cluster of {self.home}; its nodes are 1..{self.brokers}")

    def pids(self) -> dict[int, int | None]:
        """Node id -> pid of its JVM, ``None`` for a node that is down."""
        return {n.node_id: n.pid() for n in self.nodes}

    def start(self, timeout: float = 120.0) -> float:
        """Start every node that is down (all at once: a node needs a controller majority), wait
        until each is registered and unfenced; returns seconds taken. Harmless when all run."""
        if self._mismatch:
            raise BrokerError(self._mismatch)
        t0 = time.monotonic()
        self.home.mkdir(parents=True, exist_ok=True)
        if not self.spec_file.exists():
            self.spec_file.write_text(json.dumps(self._spec, indent=2) + "\n")
        # Formatting is a JVM run per node: side by side, not one after another.
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            launched = list(zip(self.nodes, pool.map(KafkaBroker.launch, self.nodes)))
        deadline = time.monotonic() + timeout
        try:
            for node, proc in launched:
                node.wait_ready(max(1.0, deadline - time.monotonic()), proc)
            self.wait_registered(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop(hard=True)  # a node that failed leaves no others running without a majority
            raise
        took = time.monotonic() - t0
        if any(proc for _, proc in launched):
            log.info("kafka cluster of %d nodes ready on %s in %.1fs", self.brokers, self.bootstrap, took)
        return took

    def wait_registered(self, timeout: float = 60.0) -> None:
        """Until the cluster's metadata lists every node (none fenced)."""
        want = {n.node_id for n in self.nodes}

        def all_listed() -> bool:
            return self.live_nodes() == want

        wait_for(all_listed, timeout, None, f"kafka cluster on {self.bootstrap} (all {self.brokers} nodes)",
                 self.nodes[0].log_file, poll=0.3, error=BrokerError)

    def live_nodes(self) -> set[int]:
        """Node ids the cluster's metadata lists (registered, not fenced); empty if unreachable."""
        from kafka.errors import KafkaError

        try:
            admin = self.admin_client(request_timeout_ms=5000, bootstrap_timeout_ms=5000)
        except KafkaError:
            return set()
        try:
            return registered_nodes(admin.describe_cluster())
        except KafkaError:
            return set()
        finally:
            admin.close()

    def stop(self, timeout: float = 60.0, hard: bool = False) -> None:
        """Stop every node by pid: all signalled at once (one by one, the last ones would wait for
        a controller majority that is already gone), then each waited for (SIGKILL after
        ``timeout``). ``hard`` is a ``kill -9`` of the whole cluster."""
        running = [(n, n.pid()) for n in self.nodes]
        for _, pid in running:
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for node, pid in running:
            if pid:
                stop_pid(pid, timeout, hard, ports=(node.port, node.controller_port))
            node.pid_file.unlink(missing_ok=True)
        if any(pid for _, pid in running):
            log.info("kafka cluster on %s %s", self.bootstrap, "killed" if hard else "stopped")

    def wipe(self) -> None:
        """Stop every node and delete the cluster's data, logs and identity (the next start
        formats a new cluster)."""
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)
        self._mismatch = None
        self.port, self.brokers = self._requested
        self._build(self._new_spec())
        log.info("kafka cluster data in %s wiped", self.home)

    def admin_client(self, **overrides: Any):
        """A kafka-python admin client bootstrapping from every node."""
        from kafka import KafkaAdminClient

        return KafkaAdminClient(**{"bootstrap_servers": self.bootstrap, **overrides})

    def create_topic(self, name: str, partitions: int = 1, replication: int = REPLICATION,
                     min_insync: int = MIN_INSYNC, timeout: float = 30.0) -> None:
        """Create ``name`` replicated to ``replication`` nodes with ``min.insync.replicas`` set on
        the topic too, and wait until every partition has a leader and a full ISR."""
        from kafka.admin import NewTopic

        admin = self.admin_client(request_timeout_ms=15_000)
        try:
            admin.create_topics([NewTopic(name, partitions, replication,
                                          topic_configs={"min.insync.replicas": str(min_insync)})])
        finally:
            admin.close()
        self.wait_in_sync(name, timeout)

    def partitions(self, topic: str) -> dict[int, dict[str, Any]]:
        """Partition -> ``{"leader": node id (-1: none), "replicas": [...], "isr": [...]}``."""
        admin = self.admin_client(request_timeout_ms=10_000)
        try:
            described = admin.describe_topics([topic])
        finally:
            admin.close()
        out: dict[int, dict[str, Any]] = {}
        for t in described:
            if t.get("error_code"):
                raise BrokerError(f"describing topic {topic!r} on {self.bootstrap} failed: error code {t['error_code']}")
            for p in t["partitions"]:
                out[p["partition_index"]] = {"leader": p["leader_id"], "replicas": list(p["replica_nodes"]),
                                             "isr": list(p["isr_nodes"])}
        return out

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """The node id leading ``topic``/``partition`` now (``-1`` while none is elected)."""
        parts = self.partitions(topic)
        if partition not in parts:
            raise BrokerError(f"topic {topic!r} has no partition {partition} on {self.bootstrap}")
        return parts[partition]["leader"]

    def wait_in_sync(self, topic: str, timeout: float = 60.0) -> None:
        """Until every partition of ``topic`` has a leader and all its replicas in sync (after a
        node came back, before killing another)."""

        def in_sync() -> bool:
            try:
                parts = self.partitions(topic)
            except Exception:  # noqa: BLE001 - metadata not there yet
                return False
            return bool(parts) and all(p["leader"] >= 0 and set(p["isr"]) == set(p["replicas"]) for p in parts.values())

        wait_for(in_sync, timeout, None, f"topic {topic!r} fully in sync on {self.bootstrap}",
                 self.nodes[0].log_file, poll=0.3, error=BrokerError)
