"""What the UI reads from, shared by the requests of one API-server process: the installed pipelines
(``config.installed``, each a ``Pipeline`` whose sink is built once), one ``Ledger`` per database and
one Kafka admin client per cluster.

Opening a ledger engine or a Kafka client costs far more than a page's queries, so both are kept
open; a Kafka client that fails is closed and reopened on the next request.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from offsetbatch.config import installed
from offsetbatch.ledger import Ledger
from offsetbatch.ops.status import pipeline_status
from offsetbatch.pipeline import Pipeline
from offsetbatch.source.admin import KafkaAdmin
from offsetbatch.source.connection import from_connection

log = logging.getLogger(__name__)
STATUS_TIMEOUT_S = 5.0  # how long a page waits for one pipeline's cluster
RETRY_AFTER_S = 60.0  # a cluster that did not answer is shown as such this long before it is asked again


class Sources:
    def __init__(self, spec: str | None = None):
        self._spec = spec
        self._lock = threading.Lock()
        self._pipelines: tuple[tuple, dict[str, Pipeline]] | None = None
        self._ledgers: dict[str, Ledger] = {}
        self._kafka: dict[str, tuple[KafkaAdmin, threading.Lock]] = {}
        # Status checks run here, so a page stops waiting for a cluster that does not answer.
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="offsetbatch-ui-kafka")
        self._checks: dict[tuple[str, str], Future] = {}  # (cluster, pipeline) -> its check in flight
        self._failed: dict[str, tuple[float, str]] = {}  # cluster -> (when, what) it last failed

    def pipelines(self) -> dict[str, Pipeline]:
        """The installed pipelines (``config.installed``, as the DAGs and the CLI read them), re-read
        when a file changes: a new pipeline shows up without a restart. A file that does not load is
        logged and left out, as it has no DAG. Each ``Pipeline`` is built once per reading, so its
        sink is too."""
        stamp = (self._spec, installed.stamp(self._spec))
        with self._lock:
            if self._pipelines is None or self._pipelines[0] != stamp:
                found = installed.read(self._spec)
                for problem in (*found.missing, *found.errors):
                    log.warning("offsetbatch UI: pipeline config left out: %s", problem)
                self._pipelines = (stamp, {name: Pipeline(cfg) for name, cfg in found.configs.items()})
            return self._pipelines[1]

    def by_dag_id(self, dag_id: str) -> Pipeline | None:
        return next((p for p in self.pipelines().values() if p.cfg.dag_id == dag_id), None)

    def ledger(self, pipeline: Pipeline) -> Ledger:
        url = pipeline.ledger_url()
        with self._lock:
            if url not in self._ledgers:
                self._ledgers[url] = Ledger(url)
            return self._ledgers[url]

    def status(self, pipeline: Pipeline, ledger: Ledger) -> dict:
        """Frontier vs. log end per partition (``status.pipeline_status``); Kafka trouble is reported,
        not raised. Bounded: a page waits at most ``STATUS_TIMEOUT_S`` for one pipeline's cluster, and a
        cluster that did not answer is shown as such, not asked again, for ``RETRY_AFTER_S``, so one
        pipeline whose Kafka hangs never holds up the others' pages (issue 41, case 12)."""
        cfg = pipeline.cfg
        try:
            client = from_connection(cfg.kafka.conn_id)
        except Exception as exc:  # noqa: BLE001 - the ledger side is still worth showing
            return self._without_kafka(pipeline, ledger, f"connection '{cfg.kafka.conn_id}': {exc}")
        # One client per connection and isolation level: two connections to one cluster may be two users.
        settings = hashlib.sha256(json.dumps(client.settings, sort_keys=True).encode()).hexdigest()[:16]
        bootstrap = f"{cfg.kafka.conn_id}|{cfg.kafka.isolation_level}|{settings}"  # a changed password: a new client
        with self._lock:
            failed = self._failed.get(bootstrap)
            if failed is not None and time.monotonic() - failed[0] < RETRY_AFTER_S:
                age = time.monotonic() - failed[0]
                return self._without_kafka(pipeline, ledger, f"{failed[1]} (checked {age:.0f} s ago; asked again "
                                                             f"{RETRY_AFTER_S - age:.0f} s from now)")
            check = self._checks.get((bootstrap, cfg.name))
            if check is None or check.done():
                check = self._checks[(bootstrap, cfg.name)] = self._pool.submit(
                    self._kafka_status, pipeline, ledger, client, bootstrap)
        try:
            return check.result(timeout=STATUS_TIMEOUT_S)
        except FutureTimeout:
            problem = f"Kafka {client.describe()} did not answer within {STATUS_TIMEOUT_S:.0f} s"
            with self._lock:
                self._failed[bootstrap] = (time.monotonic(), problem)
            log.warning("offsetbatch UI: pipeline %s: %s; shown as unreachable for %.0f s", cfg.name, problem,
                        RETRY_AFTER_S)
            return self._without_kafka(pipeline, ledger, problem)

    def _without_kafka(self, pipeline: Pipeline, ledger: Ledger, problem: str) -> dict:
        st = pipeline_status(pipeline, ledger, None, batches=0)
        st.kafka_error = problem
        out = st.to_dict()
        out["checked_at"] = time.time()
        return out

    def _kafka_status(self, pipeline: Pipeline, ledger: Ledger, client, bootstrap: str) -> dict:
        """One pipeline's status with its cluster's admin client (opened once and kept)."""
        cfg = pipeline.cfg
        with self._lock:
            entry = self._kafka.get(bootstrap)
        try:
            if entry is None:
                entry = (KafkaAdmin(client, cfg.kafka.isolation_level), threading.Lock())
                with self._lock:
                    self._kafka[bootstrap] = entry
            kafka, lock = entry
            with lock:  # kafka-python's admin client is not meant for concurrent use
                st = pipeline_status(pipeline, ledger, kafka, batches=0)
        except Exception as exc:  # noqa: BLE001
            st = pipeline_status(pipeline, ledger, None, batches=0)
            st.kafka_error = f"{type(exc).__name__}: {exc}"
        with self._lock:
            if st.kafka_error:
                self._failed[bootstrap] = (time.monotonic(), st.kafka_error)
            else:
                self._failed.pop(bootstrap, None)
        if st.kafka_error:
            self._drop_kafka(bootstrap)
        out = st.to_dict()
        out["checked_at"] = time.time()
        return out

    def _drop_kafka(self, bootstrap: str) -> None:
        with self._lock:
            entry = self._kafka.pop(bootstrap, None)
        if entry is not None:
            try:
                entry[0].close()
            except Exception:  # noqa: BLE001 - already broken
                log.debug("closing Kafka client of %s failed", bootstrap, exc_info=True)
