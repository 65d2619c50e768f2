"""The kafka sink's settings: the ``sink:`` mapping of the pipeline YAML.

    sink:
      type: kafka
      staging: /data/staging/clean_events # staging root (and the rejected records' Parquet)
      topic: clean-events
      conn_id: kafka_default              # Airflow Kafka connection of the output cluster
      key: [user_id]                      # key columns (none: null keys)
      partitioning: source                # or key
      producer: {linger.ms: 20, compression.type: zstd}

``producer`` takes the producer settings that matter for a batch publish, in the connection's
(librdkafka / Java) names; any other key is refused, naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from pydantic import Field, field_validator, model_validator

from offsetbatch.sinks.base import StagedSettings

TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# producer setting -> (librdkafka property, type, default here)
PRODUCER = {
    "batch.size": ("batch.size", int, 1_048_576),
    "linger.ms": ("linger.ms", int, 20),
    "compression.type": ("compression.type", str, "zstd"),
    "transaction.timeout.ms": ("transaction.timeout.ms", int, 300_000),
    "max.request.size": ("message.max.bytes", int, 4_194_304),  # the Java name; librdkafka calls it so
}
COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")  # librdkafka's codecs, all built into its wheel
BROKER_MAX_TRANSACTION_TIMEOUT_MS = 900_000  # the broker's transaction.max.timeout.ms default


class KafkaSinkSettings(StagedSettings):
    type: Literal["kafka"] = "kafka"
    topic: str = Field(description="output topic (must exist)")
    conn_id: str = Field("kafka_default", description="Airflow Kafka connection of the output cluster")
    key: list[str] = Field(default_factory=list, description="key columns: one column's text, or a JSON object")
    value: list[str] = Field(default_factory=list,
                             description="value columns, serialized as one JSON object (default: every column "
                                         "but the kafka_* coordinates)")
    partitioning: Literal["key", "source"] | None = Field(
        None, description="key: the Java client's murmur2 hash of the key; source: the source record's partition "
                          "(modulo the output's), keeping each source partition's order. Default: key if key is set")
    republish: bool = Field(False, description="allow replays and rewinds, which append the records again")
    dead_letter_topic: str | None = Field(None, description="rejected records to this topic, in the same transaction "
                                                            "(default: Parquet under path/_rejected)")
    producer: dict[str, str | int] = Field(default_factory=dict, description="producer settings (PRODUCER)")

    @field_validator("topic", "dead_letter_topic")
    @classmethod
    def _topic(cls, v: str | None) -> str | None:
        if v is not None and not TOPIC.match(v):
            raise ValueError(f"{v!r} is not a Kafka topic name (letters, digits, '.', '_', '-')")
        return v

    @field_validator("key", "value")
    @classmethod
    def _columns(cls, v: list[str]) -> list[str]:
        for col in v:
            if not COLUMN.match(col):
                raise ValueError(f"{col!r} is not a column name")
        return v

    @field_validator("producer")
    @classmethod
    def _producer(cls, v: dict) -> dict:
        for name, value in v.items():
            if name not in PRODUCER:
                raise ValueError(f"producer setting {name!r} is not one of {', '.join(sorted(PRODUCER))} (the "
                                 f"transactional and idempotence settings are the sink's own)")
            kind = PRODUCER[name][1]
            try:
                kind(value)
            except (TypeError, ValueError):
                raise ValueError(f"producer setting {name!r} must be {kind.__name__}, got {value!r}") from None
        if str(v.get("compression.type", "zstd")) not in COMPRESSION:
            raise ValueError(f"compression.type must be one of {', '.join(COMPRESSION)}")
        if int(v.get("transaction.timeout.ms", 0)) > BROKER_MAX_TRANSACTION_TIMEOUT_MS:
            raise ValueError(f"transaction.timeout.ms must not exceed the broker's transaction.max.timeout.ms "
                             f"({BROKER_MAX_TRANSACTION_TIMEOUT_MS} by default); the broker refuses larger ones")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "KafkaSinkSettings":
        if self.partitioning == "key" and not self.key:
            raise ValueError("partitioning 'key' needs key: [...] (the columns whose hash picks the partition)")
        if self.event_time_column:
            raise ValueError("event_time_column sub-partitions Parquet folders and has no meaning for a topic")
        return self

    @model_validator(mode="after")
    def _librdkafka_accepts(self) -> "KafkaSinkSettings":
        """Checked at load, not after the ledger commit: a publish that can never start would leave the
        batch committed and unpublished, and every later plan would fail on it (issue 41, case 11)."""
        from offsetbatch.sinks.kafka.producer import check_settings

        try:
            check_settings(self.producer_config())
        except ValueError as exc:
            given = f" {dict(self.producer)}" if self.producer else " (the defaults)"
            raise ValueError(f"sink.producer{given}: {exc}; fix the setting") from None
        return self

    def check_source_config(self, kafka_conn_id: str, reads_topic: Callable[[str], bool]) -> None:
        """An output that is one of the pipeline's own source topics (on the same connection) loops:
        every run writes its records back, and the next run reads them again."""
        if self.dead_letter_topic == self.topic:
            raise ValueError(f"sink.dead_letter_topic is sink.topic ({self.topic!r}): rejected records would "
                             f"be mixed into the output; give the dead-letter topic a name of its own")
        if self.conn_id != kafka_conn_id:
            return  # another cluster: the plan task compares the clusters (KafkaSink.check_source)
        for name, topic in (("topic", self.topic), ("dead_letter_topic", self.dead_letter_topic)):
            if topic is not None and reads_topic(topic):
                raise ValueError(
                    f"sink.{name} {topic!r} is a topic this pipeline reads (kafka.topics/kafka.pattern, connection "
                    f"'{kafka_conn_id}'): each run would write its records back into its own source and the "
                    f"next run would read them again. Write to another topic")

    @property
    def partitioned_by(self) -> str:
        return self.partitioning or ("key" if self.key else "source")

    def producer_config(self) -> dict[str, str | int]:
        """librdkafka properties of the producer settings (defaults for a large batch publish)."""
        return {prop: kind(self.producer.get(name, default)) for name, (prop, kind, default) in PRODUCER.items()}
