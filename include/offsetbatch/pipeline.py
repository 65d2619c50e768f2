"""One pipeline as a task, a CLI command or a UI request works with it: its validated config, its
sink, and openers for its ledger and its Kafka cluster. Built once per task (``Pipeline.load``) and
handed down, so nothing below rebuilds the sink or re-reads the config.

Functions that take these take them in one order, ``(pipeline, ledger, kafka, request)``, with
optional ones (``commit_batch``'s ``kafka``) last.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from offsetbatch import redact
from offsetbatch.config import PipelineConfig, load_config
from offsetbatch.errors import ConfigError
from offsetbatch.jobspec import JobSpec
from offsetbatch.sinks import Sink, sink_for
from offsetbatch.validation import check_ledger_url

if TYPE_CHECKING:
    from offsetbatch.ledger import Ledger
    from offsetbatch.model import Batch
    from offsetbatch.source.admin import KafkaAdmin
    from offsetbatch.source.connection import KafkaClientConfig


@dataclass(frozen=True)
class Pipeline:
    cfg: PipelineConfig

    @cached_property
    def sink(self) -> Sink:
        """The pipeline's sink, built on first use and kept."""
        return sink_for(self.cfg.name, self.cfg.sink)

    @classmethod
    def load(cls, path: str | Path) -> "Pipeline":
        """The pipeline of a YAML file (``ConfigError`` naming the file and field when it does not load)."""
        return cls(load_config(path))

    @property
    def name(self) -> str:
        return self.cfg.name

    def ledger_url(self) -> str:
        """The database URL of the pipeline's ledger: ``ledger.url``, or its Airflow connection. A
        connection that cannot be read is a ``ConfigError`` naming the pipeline and the field."""
        from offsetbatch.ledger.engine import url_from_connection
        from offsetbatch.ledger.errors import LedgerError

        cfg = self.cfg
        if cfg.ledger.url:
            return cfg.ledger.url  # checked when the config loaded
        try:
            url = url_from_connection(cfg.ledger.conn_id)
        except LedgerError:
            raise
        except Exception as exc:  # noqa: BLE001 - Airflow's "conn_id isn't defined" and friends
            raise ConfigError(redact.url(f"pipeline {cfg.name}: cannot resolve its ledger (ledger.conn_id "
                                         f"'{cfg.ledger.conn_id}'): {' '.join(str(exc).split())}. Define the Airflow "
                                         f"connection or set ledger.url in {cfg.source_file}")) from None
        try:
            return check_ledger_url(url)
        except ValueError as exc:  # its message repeats the URL
            raise ConfigError(redact.url(f"pipeline {cfg.name}: the ledger connection '{cfg.ledger.conn_id}' "
                                         f"(ledger.conn_id): {exc}")) from None

    def ledger(self, create: bool = False) -> "Ledger":
        """The pipeline's ledger (a context manager). Never created unless ``create``: only a new
        pipeline's first run and ``offsetbatch ledger init`` create one."""
        from offsetbatch.ledger import Ledger

        return Ledger(self.ledger_url(), create=create)

    def kafka(self) -> "KafkaAdmin":
        """An admin client on the pipeline's Kafka connection (a context manager)."""
        from offsetbatch.source.admin import KafkaAdmin

        return KafkaAdmin.for_connection(self.cfg.kafka.conn_id, self.cfg.kafka.isolation_level)

    def job_spec(self, client: "KafkaClientConfig", batch: "Batch", value_schemas: dict | None = None,
                 key_schemas: dict | None = None) -> JobSpec:
        """Everything the job needs of the pipeline for ``batch``: the one place that maps config
        fields to the contract. A replay stages under its own id and publishes under its target's.
        Only the connection's non-secret Kafka options (the secrets reach the job in a private file).
        ``value_schemas``, ``key_schemas``: the schemas the plan task resolved for this batch's
        values and keys (``plan.schemas``)."""
        cfg, key = self.cfg, self.cfg.key
        key_settings = None if key.parser.leaves_bytes else {
            "format": key.format, "schema_ddl": key.schema_ddl, "required": list(key.required),
            "value_schemas": key_schemas, "schema_id": key.schema_id, "options": key.options}
        return JobSpec(
            pipeline=cfg.name, batch_id=batch.batch_id, output_id=batch.output_id, bootstrap=client.bootstrap,
            kafka_options=client.spark_options(), ranges=[r.to_dict() for r in batch.ranges],
            sink=cfg.sink.model_dump(), value_format=cfg.value.format, schema_ddl=cfg.value.schema_ddl,
            required=list(cfg.value.required), transform_sql=cfg.transform.sql,
            transform_python=cfg.transform.python, transform_system_access=cfg.transform.allow_system_access,
            isolation_level=cfg.kafka.isolation_level,
            records_per_task=cfg.spark.records_per_task, value_schemas=value_schemas,
            schema_id=cfg.value.schema_id, value_options=cfg.value.options, key=key_settings,
            tombstones=cfg.value.tombstones,
        )
