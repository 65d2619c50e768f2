"""``KafkaSink``: the seam's halves for a Kafka topic. The job half serializes each row's key and
JSON value in Spark (``to_json``, vectorized) and stages them as Parquet with the source record's
coordinates; the commit half, after the ledger transaction, publishes them in one Kafka
transaction together with the marker that proves the batch is in.
"""

from __future__ import annotations

import json
import logging
import time
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Sequence

from offsetbatch import faults, storage
from offsetbatch.errors import SinkError
from offsetbatch.jobspec import Manifest
from offsetbatch.sinks.base import PublishesAfterLedgerCommit, RejectedRows, Sink, StagedOutput
from offsetbatch.sinks.rejected_files import RejectedFolders
from offsetbatch.sinks.kafka.settings import KafkaSinkSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from offsetbatch.sinks.kafka.producer import TransactionalProducer
    from offsetbatch.source.admin import KafkaAdmin
    from offsetbatch.source.connection import KafkaClientConfig

log = logging.getLogger(__package__)

RECORD_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset")
KEY, VALUE = "_key", "_value"
SENT = "commit.kafka_records_sent"
AFTER_COMMIT = "commit.after_kafka_commit"
MARKER_PARTITION = 0
SEND_CHUNK = 65_536  # rows turned into Python objects at a time while publishing
LARGEST = "largest_record"  # the manifest's sink metric: the largest staged key + value, in bytes
# The headers every published record carries (``_send``, ``_send_rejected``) and the most bytes
# their values take (a partition, an offset, a batch id in decimal digits; ``None``: the source
# topic's name; 0: the dead-letter record's error, a column of its own, counted with the record).
DATA_HEADERS = {"offsetbatch.source": None, "offsetbatch.partition": 10, "offsetbatch.offset": 20,
                "offsetbatch.batch-id": 20, "offsetbatch.republish-of": 20}
REJECTED_HEADERS = {"offsetbatch.source": None, "offsetbatch.partition": 10, "offsetbatch.offset": 20,
                    "offsetbatch.batch-id": 20, "offsetbatch.error": 0}


def _header_bytes(headers: dict[str, int | None], source_topic: int) -> int:
    """The most bytes ``headers`` add to a record (``None``: the source topic's name, whose longest
    is ``source_topic`` bytes)."""
    from offsetbatch.sinks.kafka.record_size import HEADER_FRAMING

    return sum(len(name) + (source_topic if most is None else most) + HEADER_FRAMING for name, most in headers.items())


def _as_bytes(column) -> list[bytes | None]:
    """An Arrow column as Python ``bytes`` (text as UTF-8, integers as their decimal digits), cast in C."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_integer(column.type):
        column = pc.cast(column, pa.string())
    return pc.cast(column, pa.binary()).to_pylist()


class KafkaSink(PublishesAfterLedgerCommit, Sink):
    type = "kafka"
    Settings = KafkaSinkSettings

    def __init__(self, pipeline_name: str, settings: KafkaSinkSettings):
        super().__init__(pipeline_name, settings)
        self.settings: KafkaSinkSettings = settings
        self.rejected = RejectedFolders(settings.staging)  # without a dead-letter topic
        self.timings: dict[str, float] = {}  # the last publish's seconds per step (log line, benchmark)

    @cached_property
    def client(self) -> "KafkaClientConfig":
        """The output cluster's client settings (``sink.conn_id``), read from Airflow once per sink."""
        from offsetbatch.source.connection import from_connection

        return from_connection(self.settings.conn_id, "sink.conn_id")

    @property
    def transactional_id(self) -> str:
        """One per pipeline and output topic: a new producer fences any older one (a zombie task)."""
        return f"offsetbatch.{self.pipeline_name}.{self.settings.topic}"

    @property
    def marker_group(self) -> str:
        """The consumer group whose committed offset on the output topic's partition 0, written in
        each publish's transaction, names the last batch published (nobody consumes with it)."""
        return f"offsetbatch.{self.pipeline_name}.published"

    @property
    def target(self) -> str:
        return f"topic {self.settings.topic}"

    def asset_uri(self) -> str:
        """``kafka://<first bootstrap server>/<topic>``, the Kafka provider's asset URI."""
        from offsetbatch.sinks.uris import kafka_topic_uri

        return kafka_topic_uri(self.settings.conn_id, self.settings.topic)

    def lineage_dataset(self) -> tuple[str, str]:
        from offsetbatch.sinks.uris import kafka_dataset

        return kafka_dataset(self.asset_uri())

    def rejected_lineage_dataset(self) -> tuple[str, str]:
        """The dead-letter topic when there is one, else the Parquet under ``path``."""
        from offsetbatch.sinks.uris import kafka_dataset, kafka_topic_uri

        if self.settings.dead_letter_topic:
            return kafka_dataset(kafka_topic_uri(self.settings.conn_id, self.settings.dead_letter_topic))
        return super().rejected_lineage_dataset()

    def doctor_checks(self) -> "list[tuple[str, Callable[[], str], str]]":
        """The output topics exist and the sink's user may publish to them (the plan task's check)."""
        return [("output topic", self._doctor_output_topic,
                 "create the topic or have the ACLs the message names granted (or fix sink.topic / sink.conn_id)"),
                *super().doctor_checks()]

    def _doctor_output_topic(self) -> str:
        self.check_writable()
        return (f"{self.target}: exists; the connection's user may write it, use transactional id "
                f"{self.transactional_id} and marker group {self.marker_group}")

    # ---- job half --------------------------------------------------------------------------

    def stage(self, spark: "SparkSession", data: "DataFrame", rejected: RejectedRows, batch_id: int,
              attempt: str, output_id: int | None = None) -> StagedOutput:
        """Each row's key and JSON value, serialized by Spark, with the source record's
        coordinates (headers and the order of publication)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import BinaryType

        cols = data.columns
        missing = [c for c in (*RECORD_COLUMNS, *self.settings.key, *self.settings.value) if c not in cols]
        if missing:
            raise SinkError(f"{self.where(batch_id)}: the transform's output lacks {', '.join(missing)}; the kafka "
                            f"sink needs kafka_topic, kafka_partition and kafka_offset (the headers and the order of "
                            f"publication) and the sink's key/value columns. Fix the transform's SELECT list or "
                            f"sink.key/sink.value. Nothing was committed; the batch stays planned.")
        value_cols = self.settings.value or [c for c in cols if c not in RECORD_COLUMNS]
        keys = self.settings.key
        if not keys:
            key = F.lit(None).cast("string")
        elif len(keys) == 1:
            key = F.col(keys[0]) if isinstance(data.schema[keys[0]].dataType, BinaryType) else F.col(keys[0]).cast("string")
        else:
            key = F.to_json(F.struct(*keys))
        staged = data.select(key.alias(KEY), F.to_json(F.struct(*value_cols)).alias(VALUE), *RECORD_COLUMNS)
        # the largest record's key and value, observed by the write: the commit compares it with the
        # topic's limit before the ledger transaction, reading the files only when it is over
        largest = F.max(F.coalesce(F.octet_length(KEY), F.lit(0)) + F.coalesce(F.octet_length(VALUE), F.lit(0)))
        return self.write_staged(spark, staged, rejected, batch_id, attempt, [], metrics={LARGEST: largest})

    # ---- commit half -------------------------------------------------------------------------

    def check_reread(self, batch_ids: list[int], what: str) -> None:
        """A topic is append-only: re-reading committed batches publishes their records again."""
        if not self.settings.republish:
            from offsetbatch.errors import RunRequestError

            raise RunRequestError(
                f"{self.where()}: {what} would re-read batch(es) {', '.join(map(str, batch_ids))}, and a Kafka topic "
                f"is append-only: their records would be in {self.settings.topic} twice. Nothing was changed. If the "
                f"topic's consumers can tell a republished record apart (header offsetbatch.republish-of), set "
                f"sink.republish: true and trigger it again.")

    def check_source(self, reads_topic: Callable[[str], bool], source: "KafkaAdmin") -> None:
        """An output or dead-letter topic named like a source topic, on another connection: the same
        cluster (by cluster id) would be a write-back loop. The config refuses it on one connection."""
        from offsetbatch.errors import SinkTargetError
        from offsetbatch.source.admin import KafkaAdmin
        named = {f"sink.{field}": topic for field in ("topic", "dead_letter_topic")
                 if (topic := getattr(self.settings, field)) and reads_topic(topic)}
        if not named:
            return
        with KafkaAdmin(self.client) as output:
            same = output.cluster_id() == source.cluster_id()
        if same:
            field, topic = next(iter(named.items()))
            raise SinkTargetError(
                f"{self.where()}: {field} {topic!r} is a topic this pipeline reads: connection "
                f"'{self.settings.conn_id}' reaches the same Kafka cluster as the source's (cluster id "
                f"{source.cluster_id()}), so each run would write its records back into its own source and the next "
                f"run would read them again. Nothing was changed. Write to another topic.")

    def check_publishable(self, batch_id: int, output_id: int, attempt: str) -> None:
        """Before the ledger transaction, while the batch is still planned: a replay planned before
        ``republish`` was turned off, output or dead-letter topics that do not exist, and ACLs the
        producer lacks (after the transaction it would time out or be refused on them, with the
        batch already committed)."""
        from offsetbatch.errors import SinkSchemaError

        if output_id != batch_id and not self.settings.republish:
            raise SinkSchemaError(
                f"{self.where(batch_id)}: this batch re-reads batch {output_id}'s offsets and sink.republish is "
                f"false: its records would be in the topic twice. Nothing was committed. Set sink.republish: true, "
                f"or leave the batch planned.")
        self._check_target(self.where(batch_id), "Nothing was committed; the batch stays planned. {fix}, then clear "
                           "the commit task or let the next run commit the batch.")
        self._check_record_sizes(batch_id, attempt)

    def _check_record_sizes(self, batch_id: int, attempt: str) -> None:
        """Every staged record fits the topic it goes to (``record_size``): a record the producer or
        the broker refuses would fail the publish after the ledger commit on every retry, and every
        later plan with it (issue 41, case 10). The job observed the largest record; the files are
        read only when that one is over a limit."""
        from offsetbatch.sinks.kafka import record_size
        from offsetbatch.source.admin import KafkaAdmin

        manifest = Manifest.load(self.staging.staging_manifest(batch_id, attempt))
        topics = [t for t in (self.settings.topic, self.settings.dead_letter_topic) if t]
        with KafkaAdmin(self.client) as kafka:
            found = kafka.topic_config(topics, "max.message.bytes")
        producer = self.settings.producer_config()
        limits = {t: record_size.Limits(t, int(found[t] or 0), int(producer["message.max.bytes"]),
                                        str(producer["compression.type"])) for t in topics}
        for topic in (t for t in topics if not found[t]):
            log.warning("%s: topic %s's max.message.bytes is unknown (the connection's user may lack DESCRIBE_CONFIGS "
                        "on it): only the producer's limit is checked before the ledger commit", self.where(batch_id),
                        topic)
        source_topic = max((len(r.topic.encode()) for r in manifest.ranges), default=0)
        data = limits[self.settings.topic]
        headers = _header_bytes(DATA_HEADERS, source_topic)
        largest = manifest.sink_metrics.get(LARGEST)
        if largest is None or largest + headers + record_size.BATCH_OVERHEAD > min(
                data.producer_max, data.topic_max or data.producer_max):
            table = self._rows(manifest.data_files, [KEY, VALUE, *RECORD_COLUMNS])
            if table is not None:
                over = record_size.first_oversize([table.column(KEY), table.column(VALUE)], headers, data)
                self._refuse_oversize(batch_id, table, over, "record", data)
        if self.settings.dead_letter_topic and manifest.rejected_files:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.concat_tables([pq.read_table(f) for f in manifest.rejected_files])
            columns = [table.column(c) for c in ("raw_value", "kafka_key", "error") if c in table.column_names]
            over = record_size.first_oversize(columns, _header_bytes(REJECTED_HEADERS, source_topic),
                                              limits[self.settings.dead_letter_topic])
            self._refuse_oversize(batch_id, table, over, "rejected record", limits[self.settings.dead_letter_topic])

    def _refuse_oversize(self, batch_id: int, table, over, what: str, limits) -> None:
        """``SinkSchemaError`` naming the record ``over`` (a ``record_size.Oversize``) when there is one."""
        if over is None:
            return
        from offsetbatch.errors import SinkSchemaError

        row = {c: table.column(c)[over.row].as_py() for c in RECORD_COLUMNS}
        compressed = (f", {over.compressed:,} compressed with {limits.compression}"
                      if over.compressed is not None and limits.compression != "none" else "")
        raise SinkSchemaError(
            f"{self.where(batch_id)}: the {what} from {row['kafka_topic']}/{row['kafka_partition']} offset "
            f"{row['kafka_offset']} is {over.size:,} bytes with its key and headers{compressed}, and "
            f"{over.setting} allows {over.limit:,}: Kafka would refuse it after the ledger commit, on every retry. "
            f"Nothing was committed; the batch stays planned. Raise {over.setting} and clear the commit task, or "
            f"drop or trim such records in the transform and clear the spark_job task.")

    def check_writable(self) -> None:
        """The output and dead-letter topics exist and this user may publish to them, asked before
        the plan opens the ledger, so that no Spark job is spent on a batch nobody could publish."""
        self._check_target(self.where(), "Nothing was changed. {fix}, then trigger the run again.")

    def _check_target(self, where: str, then: str) -> None:
        """Topics that do not exist, and the ACLs the producer lacks (``KafkaAdmin.check_produce_access``),
        each refused naming the topic or ACL and ``then`` (what stays as it was, with ``{fix}``)."""
        from offsetbatch.errors import KafkaAuthError, SinkTargetError
        from offsetbatch.source.admin import SINK_ACLS, KafkaAdmin
        wanted = [t for t in (self.settings.topic, self.settings.dead_letter_topic) if t]
        with KafkaAdmin(self.client) as kafka:
            try:
                kafka.check_produce_access(wanted, self.marker_group, self.transactional_id, self.settings.topic)
                found = {tp.topic for tp in kafka.partitions(wanted, needs=SINK_ACLS)}
            except KafkaAuthError as exc:
                raise KafkaAuthError(f"{where}: {str(exc).removesuffix(' Nothing was changed.')} "
                                     + then.format(fix="Get them granted")) from exc
            missing = [t for t in wanted if t not in found]
            if missing:
                raise SinkTargetError(
                    f"{where}: topic(s) {', '.join(missing)} do not exist on {kafka.bootstrap} (connection "
                    f"'{self.settings.conn_id}'). " + then.format(
                        fix="Create them (replication 3 and min.insync.replicas 2 recommended)"))

    def publish(self, batch_id: int, output_id: int, attempt: str, superseded: Sequence[int] = (),
                kind: str = "") -> None:
        """One Kafka transaction: the batch's records in source-offset order, the rejected ones to
        the dead-letter topic if there is one, and the marker (the marker group's offset = the batch
        id). ``init_transactions`` first aborts a killed predecessor's open transaction (or waits
        for its commit to finish), so the marker read after it is final: a batch it names is never
        published again."""
        manifest_uri = self.staging.staging_manifest(batch_id, attempt)
        if not storage.exists(manifest_uri):
            log.info("%s: already published (its staging is gone)", self.where(batch_id))
            return
        manifest = Manifest.load(manifest_uri)
        from offsetbatch.sinks.kafka.producer import ProducerRefusedError, PublishFailedError

        producer = self._producer()
        try:
            t0 = time.monotonic()
            producer.init_transactions()
            marker = self.last_published()
            if marker is not None and marker["batch_id"] == batch_id:
                log.info("%s: already in the topic (marker of group %s names it); not published again",
                         self.where(batch_id), self.marker_group)
            else:
                producer.begin()
                sent = self._send(producer, manifest.data_files, batch_id, output_id, republish=output_id != batch_id
                                  or bool(superseded))
                rejected = 0
                if self.settings.dead_letter_topic:
                    rejected = self._send_rejected(producer, manifest.rejected_files, batch_id)
                t_flush = time.monotonic()
                producer.flush()
                faults.checkpoint(SENT)
                meta = json.dumps({"batch_id": batch_id, "output_id": output_id, "attempt": attempt, "kind": kind,
                                   "records": sent}, separators=(",", ":"))
                producer.commit_with_offset(self.settings.topic, MARKER_PARTITION, batch_id, meta, self.marker_group)
                seconds = time.monotonic() - t0
                self.timings["flush_and_commit"] = time.monotonic() - t_flush
                log.info("%s: %d record(s)%s published in one transaction (%.1fs, %.0f records/s; %s)",
                         self.where(batch_id), sent, f" and {rejected} rejected to {self.settings.dead_letter_topic}"
                         if self.settings.dead_letter_topic else "", seconds, sent / seconds if seconds else 0,
                         ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items()))
            faults.checkpoint(AFTER_COMMIT)
        except ProducerRefusedError as exc:
            from offsetbatch.errors import KafkaAuthError
            from offsetbatch.source.admin import SINK_ACLS

            raise KafkaAuthError(
                f"{self.where(batch_id)}: is committed in the ledger, but the broker refused its publish ({exc}); its "
                f"Kafka transaction was not committed, so read_committed consumers see none of its records. "
                f"{SINK_ACLS}. Once granted, clear the commit task: it publishes the batch, once.") from exc
        except PublishFailedError as exc:
            raise SinkError(f"{self.where(batch_id)}: is committed in the ledger; its publish failed ({exc}) and "
                            f"nothing of it is visible to read_committed consumers. The task's retry (or the next "
                            f"run) publishes it, once.") from exc
        finally:
            producer.close()
        if not self.settings.dead_letter_topic:
            self._publish_rejected(batch_id, output_id, attempt)
        for attempts in self.staging.attempt_folders(batch_id):
            storage.remove(attempts)

    def _producer(self) -> "TransactionalProducer":
        from offsetbatch.sinks.kafka.producer import TransactionalProducer

        return TransactionalProducer(self.client, self.transactional_id, self.settings.producer_config())

    def _rows(self, files: list[str], columns: list[str]):
        """The staged rows (``_in_order`` gives them in the order they are sent)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = [pq.read_table(f, columns=columns) for f in files]
        if not tables:
            return None
        return pa.concat_tables(tables)

    @staticmethod
    def _in_order(table, size: int):
        """The rows in source topic, partition and offset order, ``size`` at a time: the order is
        computed once as indices (no sorted copy of the table is made); one topic, the usual case,
        sorts on the two integer columns only."""
        import pyarrow.compute as pc

        keys = list(RECORD_COLUMNS) if pc.count_distinct(table.column("kafka_topic")).as_py() > 1 else \
            ["kafka_partition", "kafka_offset"]
        order = pc.sort_indices(table.select(keys), sort_keys=[(k, "ascending") for k in keys])
        for start in range(0, len(order), size):
            yield table.take(order.slice(start, size))

    def _send(self, producer: "TransactionalProducer", files: list[str], batch_id: int, output_id: int,
              republish: bool) -> int:
        t0 = time.monotonic()
        table = self._rows(files, [KEY, VALUE, *RECORD_COLUMNS])
        self.timings["read"] = time.monotonic() - t0
        if table is None or table.num_rows == 0:
            return 0
        topic = self.settings.topic
        partitions = producer.partitions(topic)
        if not partitions:
            raise SinkError(f"{self.where(batch_id)}: the output topic has no partitions the producer can see. Create "
                            f"it (or check the connection's ACLs), then clear the commit task.")
        by_source = self.settings.partitioned_by == "source"
        batch_header = ("offsetbatch.batch-id", str(output_id).encode())
        extra = [("offsetbatch.republish-of", str(output_id).encode())] if republish else []
        names: dict[str, bytes] = {}
        sent = 0
        # Chunk by chunk: Arrow encodes values, keys and offsets to bytes in C; Python only zips the
        # chunk's lists, so the process holds the Arrow table and one chunk of Python objects.
        for chunk in self._in_order(table, SEND_CHUNK):
            values, keys = _as_bytes(chunk.column(VALUE)), _as_bytes(chunk.column(KEY))
            src_topics, src_parts = chunk.column("kafka_topic").to_pylist(), chunk.column("kafka_partition").to_pylist()
            src_offsets = _as_bytes(chunk.column("kafka_offset"))
            part_names = {p: str(p).encode() for p in set(src_parts)}
            for topic_name in set(src_topics):
                names.setdefault(topic_name, topic_name.encode())
            sent += producer.produce(topic, (
                (value, key, [("offsetbatch.source", names[src_topic]), ("offsetbatch.partition", part_names[part]),
                              ("offsetbatch.offset", offset), batch_header, *extra],
                 partitions[part % len(partitions)] if by_source else -1)
                for value, key, src_topic, part, offset in zip(values, keys, src_topics, src_parts, src_offsets)))
        self.timings["sort_and_send"] = time.monotonic() - t0 - self.timings["read"]
        return sent

    def _send_rejected(self, producer: "TransactionalProducer", files: list[str], batch_id: int) -> int:
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = [pq.read_table(f) for f in files]
        if not tables:
            return 0
        batch = str(batch_id).encode()
        return producer.produce(self.settings.dead_letter_topic, (
            (row["raw_value"], row.get("kafka_key"),
             [("offsetbatch.source", str(row["kafka_topic"]).encode()),
              ("offsetbatch.partition", str(row["kafka_partition"]).encode()),
              ("offsetbatch.offset", str(row["kafka_offset"]).encode()),
              ("offsetbatch.batch-id", batch), ("offsetbatch.error", str(row["error"]).encode())], -1)
            for row in pa.concat_tables(tables).to_pylist()))

    def _publish_rejected(self, batch_id: int, output_id: int, attempt: str) -> None:
        """Rejected records as Parquet under ``<path>/_rejected/batch_id=N`` (a rename; idempotent)."""
        self.rejected.publish(self.staging.staging_rejected(batch_id, attempt), output_id)

    def last_published(self) -> dict | None:
        """The marker: what the last committed publish transaction says it published."""
        from offsetbatch.model import TopicPartition
        from offsetbatch.source.admin import KafkaAdmin
        from kafka.errors import AuthorizationError

        from offsetbatch.errors import KafkaAuthError
        from offsetbatch.source.admin import SINK_ACLS

        with KafkaAdmin(self.client) as kafka:
            try:
                found = kafka.group_marker(self.marker_group, TopicPartition(self.settings.topic, MARKER_PARTITION))
            except AuthorizationError as exc:
                raise KafkaAuthError(
                    f"{self.where()}: Kafka {kafka.client.describe()} denied reading the marker group "
                    f"{self.marker_group} ({type(exc).__name__}), which says what was published. {SINK_ACLS}; ask "
                    f"the cluster's admins for these ACLs. Nothing was changed.") from exc
        # confluent-kafka 2.16 writes the metadata string with its C terminator: one trailing NUL
        text = found[1].rstrip("\x00") if found else ""
        return json.loads(text) if text else None

    def retire(self, output_id: int) -> None:
        """Kafka is append-only: a superseded batch's records stay in the topic (``republish``)."""
        self.rejected.retire(output_id)

    def published_ids(self) -> list[int]:
        """Only the last one is known to Kafka (the marker); the ledger has the history."""
        marker = self.last_published()
        return [marker["output_id"]] if marker else []

    def describe(self, output_id: int) -> str:
        return f"Kafka topic {self.settings.topic}"

    def locations(self, output_id: int) -> dict[str, str]:
        return {"output": f"topic {self.settings.topic}", "topic": self.settings.topic,
                **({"dead_letter_topic": self.settings.dead_letter_topic} if self.settings.dead_letter_topic
                   else {"rejected": self.rejected.of(output_id)})}

    # ---- read path --------------------------------------------------------------------------

    def read_committed(self, spark: "SparkSession") -> "DataFrame":
        """The output topic through Spark's Kafka source with ``kafka.isolation.level=read_committed``:
        aborted transactions (a crashed publish) never show."""
        opts = self.client.spark_options()
        return (spark.read.format("kafka").options(**opts).option("subscribe", self.settings.topic)
                .option("kafka.isolation.level", "read_committed").option("startingOffsets", "earliest").load())

    def read_rejected(self, spark: "SparkSession") -> "DataFrame":
        return spark.read.parquet(self.rejected.base)

