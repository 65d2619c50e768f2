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

from offsetbatch.config import PipelineConfig, load_config
from offsetbatch.sinks import Sink, sink_for

if TYPE_CHECKING:
    from offsetbatch.ledger import Ledger
    from offsetbatch.source.admin import KafkaAdmin


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

    def ledger(self, create: bool = False) -> "Ledger":
        """The pipeline's ledger (a context manager). Never created unless ``create``: only a new
        pipeline's first run and ``offsetbatch ledger init`` create one."""
        from offsetbatch.ledger import Ledger

        return Ledger.for_config(self.cfg, create=create)

    def kafka(self) -> "KafkaAdmin":
        """An admin client on the pipeline's Kafka connection (a context manager)."""
        from offsetbatch.source.admin import KafkaAdmin

        return KafkaAdmin.for_connection(self.cfg.kafka.conn_id, self.cfg.kafka.isolation_level)
