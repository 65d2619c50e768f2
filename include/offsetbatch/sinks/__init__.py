"""Output destinations. A sink is chosen by ``sink.type`` in the pipeline YAML (default ``files``).

Adding a sink: one module (or a package, like ``postgres``) defining a ``Sink`` subclass with one
publication trait (and its ``Settings`` if it has fields of its own, its ``doctor_checks`` and its
``lineage_dataset``), one ``register_sink`` line below, and its tests. Nothing outside this folder
branches on a sink's type. ``offsetbatch.sinks.base`` explains the two
halves a sink implements.
"""

from __future__ import annotations

from typing import Any

from offsetbatch.sinks.base import (SINKS, KeepsManifests, Maintained, PublishesAfterLedgerCommit, PublishesInLedgerTransaction,
                                    Sink, SinkSettings, StagedOutput, StagedSettings, TableSettings, register_sink)
from offsetbatch.sinks.delta import DeltaSink
from offsetbatch.sinks.files import FilesSink
from offsetbatch.sinks.iceberg import IcebergSink
from offsetbatch.sinks.kafka import KafkaSink
from offsetbatch.sinks.keyed import KeyedSettings
from offsetbatch.sinks.postgres import PostgresSink
from offsetbatch.sinks.staging import StagingLayout

register_sink(FilesSink)
register_sink(PostgresSink)
register_sink(IcebergSink)
register_sink(KafkaSink)
register_sink(DeltaSink)


def settings_for(value: Any) -> SinkSettings:
    """Validate a ``sink:`` mapping with the settings model of its ``type`` (raises ``ValueError``
    naming the type when it is unknown)."""
    if isinstance(value, SinkSettings):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"'sink' must be a mapping, got {type(value).__name__}")
    kind = value.get("type", "files")
    if kind not in SINKS:
        raise ValueError(f"sink type {kind!r} is not one of {', '.join(sorted(SINKS))}")
    if "mode" in value and not issubclass(SINKS[kind].Settings, KeyedSettings):
        keyed = sorted(k for k, s in SINKS.items() if issubclass(s.Settings, KeyedSettings))
        where = (f"the {keyed[0]} sink; remove sink.mode, or use that sink" if len(keyed) == 1 else
                 f"the {', '.join(keyed[:-1])} and {keyed[-1]} sinks; remove sink.mode, or use one of them")
        raise ValueError(f"sink type {kind!r} has no 'mode': it keeps every record of every batch. Keyed upserts and "
                         f"deletes (mode: upsert, key: [...]) are in {where}")
    return SINKS[kind].Settings.model_validate(value)


def sink_for(pipeline_name: str, settings: SinkSettings | dict) -> Sink:
    """The sink of a pipeline (``cfg.sink``) or of a job spec (``spec.sink``, a plain mapping)."""
    settings = settings_for(settings)
    return SINKS[settings.type](pipeline_name, settings)


__all__ = ["SINKS", "KeepsManifests", "Maintained", "PublishesAfterLedgerCommit", "PublishesInLedgerTransaction", "Sink", "SinkSettings", "StagedSettings", "TableSettings",
           "StagedOutput", "StagingLayout", "register_sink", "settings_for", "sink_for"]
