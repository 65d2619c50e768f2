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

from offsetbatch.config import installed
from offsetbatch.ledger import Ledger
from offsetbatch.ops.status import pipeline_status
from offsetbatch.pipeline import Pipeline
from offsetbatch.source.admin import KafkaAdmin
from offsetbatch.source.connection import from_connection

log = logging.getLogger(__name__)


class Sources:
    def __init__(self, spec: str | None = None):
        self._spec = spec
        self._lock = threading.Lock()
        self._pipelines: tuple[tuple, dict[str, Pipeline]] | None = None
        self._ledgers: dict[str, Ledger] = {}
        self._kafka: dict[str, tuple[KafkaAdmin, threading.Lock]] = {}

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
        """Frontier vs. log end per partition (``status.pipeline_status``); Kafka trouble is reported, not raised."""
        cfg = pipeline.cfg
        try:
            client = from_connection(cfg.kafka.conn_id)
        except Exception as exc:  # noqa: BLE001 - the ledger side is still worth showing
            st = pipeline_status(pipeline, ledger, None, batches=0)
            st.kafka_error = f"connection '{cfg.kafka.conn_id}': {exc}"
            return st.to_dict()
        # One client per connection and isolation level: two connections to one cluster may be two users.
        settings = hashlib.sha256(json.dumps(client.settings, sort_keys=True).encode()).hexdigest()[:16]
        bootstrap = f"{cfg.kafka.conn_id}|{cfg.kafka.isolation_level}|{settings}"  # a changed password: a new client
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
