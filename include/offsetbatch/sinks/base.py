"""The sink seam: what every output destination implements, and the small traits that say how it
publishes.

* The **job half** runs in the Spark driver: ``stage`` writes one attempt's valid and rejected rows
  to the staging area (``StagingLayout``), keyed by the batch's own id and the attempt, and returns
  what the manifest records about them. The default writes Parquet, which every sink so far
  publishes from.
* The **commit half** is chosen by one trait, and ``offsetbatch.commit.publication`` runs it
  without asking which sink it is:

  - ``PublishesAfterLedgerCommit`` (files, iceberg, kafka): ``publish`` makes exactly one attempt's
    output visible under the batch's output id after the ledger transaction, replacing what that
    output id held (a replay's output id is its target's), marked in the target itself (a published
    manifest, a snapshot summary, a marker in the Kafka transaction) so a crash is rolled forward;
    ``retire`` removes a superseded batch's output; ``published_ids`` reads the markers.
  - ``PublishesInLedgerTransaction`` (postgres, a table in the ledger's own database):
    ``publish_in_transaction`` and ``retire_in_transaction`` run on the ledger's connection, inside
    the transaction that commits the batch, so rows and offsets commit together or not at all.

  Every sink also has ``check_source`` and ``check_writable`` (the plan task, before the ledger is
  opened), ``check_publishable`` (before the ledger transaction), ``discard`` (a losing
  attempt), ``cleanup`` (a batch's staging), its owner marker and ``published_ids``. Every one of
  them is idempotent, because a crash anywhere is finished by running it again. Staging is keyed by
  the batch, not the output id, so two replays of one batch never touch each other's staging.
* ``Maintained``: a sink whose target grows with every batch and has maintenance actions
  (``offsetbatch maintain``: snapshot expiry, compaction, attempt retention).
* ``KeepsManifests``: a sink whose target holds each published batch's manifest (files, iceberg),
  so ``offsetbatch ledger rebuild`` can rebuild a lost ledger from it.
* The **read path**: ``read_committed`` / ``read_rejected``, what readers are told to use; they
  never show output of a batch the ledger has not committed. ``asset_uri``: the target as Airflow
  names it, the DAG's outlet.

A sink module defines a ``Settings`` model (the pipeline YAML's ``sink:`` mapping, validated like
every other field) and a ``Sink`` subclass with one publication trait, and registers both with one
line in ``offsetbatch.sinks.SINKS``. Nothing here imports pyspark at module level: configs are
loaded at DAG parse time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Sequence

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from offsetbatch import redact, storage
from offsetbatch.sinks.staging import StagingLayout
from offsetbatch.spark_session import observe

if TYPE_CHECKING:
    import sqlalchemy as sa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from offsetbatch.jobspec import Manifest
    from offsetbatch.sinks.maintenance import Action, Horizon, MaintenanceSettings
    from offsetbatch.source.admin import KafkaAdmin


class RejectedRows:
    """A batch's rejected rows, built when asked: the job knows them only once the data write has
    run (its one pass over Kafka collects them), so every sink's ``stage`` passes this on, through
    ``map`` if it adds columns. ``known_empty`` (asked after the data write too) says the batch
    rejected nothing: its empty file is then written without a Spark job, which costs a batch 2 s.
    ``schema``: the rows' schema when the caller knows it, so that the empty file needs no frame
    either (on Spark Connect a frame's schema is a round trip)."""

    def __init__(self, frame: Callable[[], "DataFrame"], known_empty: Callable[[], bool] = lambda: False,
                 schema: "StructType | None" = None):
        self._frame, self._known_empty, self._schema = frame, known_empty, schema

    def frame(self) -> "DataFrame":
        return self._frame()

    def known_empty(self) -> bool:
        return self._known_empty()

    def schema(self) -> "StructType":
        return self._schema if self._schema is not None else self._frame().schema

    def map(self, f: Callable[["DataFrame"], "DataFrame"]) -> "RejectedRows":
        """The same rows with ``f`` applied (a sink's own columns; their schema is then Spark's to say)."""
        return RejectedRows(lambda: f(self._frame()), self._known_empty)


# Where a sink's folders may live: a local path, HDFS, or an object store (s3a is Hadoop's S3 client).
STORAGE_SCHEMES = ("file", "hdfs", "s3a", "s3", "gs", "abfs", "abfss")


def absolute_location(v: str) -> str:
    """A sink location: an absolute path or a URI (a relative path would depend on each task's
    working directory), without a trailing ``/``. Credentials in it are refused, unrepeated: they would
    be in the DAG's documentation, job specs and logs, where a connection keeps them out."""
    if redact.url(v) != v:
        raise ValueError(f"{redact.url(v)!r} holds credentials (user:password@ or a password, token or key parameter); give them to an Airflow connection "
                         f"(type aws: sink.storage_conn_id) and remove them from the location")
    if "://" not in v and not v.startswith("/"):
        raise ValueError(f"must be an absolute path or a URI, got {v!r}")
    scheme, _, rest = v.partition("://") if "://" in v else ("file", "", v)
    if scheme.lower() not in STORAGE_SCHEMES:
        raise ValueError(f"{v!r}: storage scheme {scheme!r} is not one of {', '.join(STORAGE_SCHEMES)} (Spark and "
                         f"the commit step must both reach it)")
    path = rest if scheme.lower() == "file" else rest.partition("/")[2]  # after the host or bucket
    if not path.strip("/"):
        raise ValueError(f"{v!r} is the root of its filesystem or bucket; give a folder of its own, e.g. "
                         f"/data/tables/events (publishing and replays replace folders under it)")
    return v.rstrip("/")


class SinkSettings(BaseModel):
    """Settings every sink has; a sink's own ``Settings`` subclass adds its fields, starting from
    ``TableSettings`` (the target is a folder of files) or ``StagedSettings`` (the target is
    elsewhere, and the job stages its Parquet under ``staging``). ``root`` is the folder the sink's
    own files live under either way: job specs, attempts, rejected records, the owner marker."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ROOT_FIELD: ClassVar[str] = "path"  # the field that holds ``root``, as messages name it

    type: str = Field("files", description="which sink publishes the batches (offsetbatch.sinks.SINKS)")
    event_time_column: str | None = Field(None, description="output column whose date sub-partitions the output")
    storage_conn_id: str | None = Field(None, description="Airflow connection (type aws) of the object store that "
                                        "holds the sink's folders (s3a:// or s3://): endpoint, region, credentials")

    @property
    def root(self) -> str:
        """Where the sink's own folders are (a local path or a Hadoop-compatible URI)."""
        return getattr(self, self.ROOT_FIELD)

    def with_root(self, root: str) -> "SinkSettings":
        """The same settings with another root (a batch planned when the root was elsewhere)."""
        return self.model_copy(update={self.ROOT_FIELD: root})

    @model_validator(mode="after")
    def _storage_connection(self) -> "SinkSettings":
        where = f"sink.{self.ROOT_FIELD} {self.root!r}"
        on_s3 = storage.is_s3(self.root)
        if on_s3 and not self.storage_conn_id:
            raise ValueError(f"{where} is on an S3 API: set sink.storage_conn_id to the Airflow connection (type aws) "
                             f"that holds its endpoint, region and credentials")
        if self.storage_conn_id and not on_s3:
            raise ValueError(f"sink.storage_conn_id is set but {where} is not an s3a:// or s3:// location; remove it "
                             f"or fix sink.{self.ROOT_FIELD}")
        return self

    def check_source_config(self, kafka_conn_id: str, reads_topic: Callable[[str], bool]) -> None:
        """Raise ``ValueError`` if these settings cannot work with the pipeline's source (its Kafka
        connection, and which topics it reads): at config load, before anything runs."""

    @classmethod
    def bind_ledger(cls, sink: dict, ledger: Any) -> dict:
        """The raw ``sink:`` mapping, given the pipeline's ``ledger:`` settings (a mapping or
        ``LedgerSettings``). A sink that must live in the ledger's database fills in or checks its
        connection here (``ValueError`` says why not); the others ignore the ledger."""
        return sink


class TableSettings(SinkSettings):
    """A sink whose target is a folder of files: ``path`` is the table, and the sink's own folders
    are inside it (``_offsetbatch/``, ``_rejected/``), hidden from Parquet readers."""

    path: str = Field(description="the table: a local path or a Hadoop-compatible URI")

    @field_validator("path")
    @classmethod
    def _absolute(cls, v: str) -> str:
        return absolute_location(v)


class StagedSettings(SinkSettings):
    """A sink whose target is elsewhere (a database table, an Iceberg table, a topic): the job stages
    its Parquet under ``staging`` (``path`` is still read: its name before 0.2)."""

    ROOT_FIELD: ClassVar[str] = "staging"

    staging: str = Field(validation_alias=AliasChoices("staging", "path"),
                         description="staging root: the Spark job's Parquet, job specs and rejected records; a local "
                                     "path or a Hadoop-compatible URI every executor reaches")

    @field_validator("staging")
    @classmethod
    def _absolute(cls, v: str) -> str:
        return absolute_location(v)


@dataclass(frozen=True)
class StagedOutput:
    """What the job half wrote for one attempt: it goes into the manifest."""

    rows_out: int
    data_files: list[str]
    rejected_files: list[str]
    metrics: dict = field(default_factory=dict)  # what the sink's job half measured for its commit half


class Sink(ABC):
    """One pipeline's output destination. Subclasses set ``type`` and ``Settings`` and mix in one
    publication trait."""

    type: ClassVar[str]
    Settings: ClassVar[type[SinkSettings]] = StagedSettings  # a sink whose target is not its folder of files

    def __init__(self, pipeline_name: str, settings: SinkSettings):
        self.pipeline_name = pipeline_name
        self.settings = settings
        self.staging = StagingLayout(settings.root)
        if settings.storage_conn_id:
            storage.bind_s3(settings.root, settings.storage_conn_id)

    # ---- names -------------------------------------------------------------------------------

    @property
    @abstractmethod
    def target(self) -> str:
        """What readers read, as messages name it: ``table /data/events``, ``Iceberg table ns.t``."""

    def where(self, batch_id: int | None = None, target: str | None = None) -> str:
        """The prefix of every message about this sink: pipeline, batch, target (``target`` names
        another object of the sink's, such as its rejected-records table)."""
        return (f"pipeline {self.pipeline_name}" + (f" batch {batch_id}" if batch_id is not None else "")
                + f", {target or self.target}")

    @abstractmethod
    def asset_uri(self) -> str:
        """The target as an Airflow asset URI (the DAG's outlet): where downstream DAGs look for it,
        never the staging area."""

    def lineage_dataset(self) -> tuple[str, str]:
        """The target in OpenLineage's dataset naming, (namespace, name): a folder's by default."""
        from offsetbatch.sinks.uris import location_dataset

        return location_dataset(self.asset_uri())

    def rejected_lineage_dataset(self) -> tuple[str, str]:
        """Where rejected records go, in OpenLineage's naming: ``<path>/_rejected`` by default."""
        from offsetbatch.sinks.uris import location_dataset

        return location_dataset(f"{self.settings.root.rstrip('/')}/_rejected")

    def doctor_checks(self) -> "list[tuple[str, Callable[[], str], str]]":
        """What ``offsetbatch doctor`` checks of this sink beyond the pipeline's own checks: (name,
        check returning what it found, what to do when it fails). Every check reaches the target."""
        checks = []
        if self.settings.storage_conn_id:
            cfg_where = f"sink.{self.settings.ROOT_FIELD} {self.settings.root}"
            checks.append(("object store", self._check_object_store,
                           f"fix Airflow connection {self.settings.storage_conn_id} (type aws: login = access key id, "
                           f"password = secret, extra endpoint_url/region_name) or {cfg_where}; "
                           f"'make setup' caches the S3A jars"))
        return checks

    def _check_object_store(self) -> str:
        """The sink's bucket: reached, and one object written, read back and deleted."""
        from offsetbatch.storage.s3 import S3Settings, check_bucket

        check_bucket(S3Settings.from_connection(self.settings.storage_conn_id), self.settings.root)
        return f"{self.settings.root}: writable with connection {self.settings.storage_conn_id}"

    # ---- job half (Spark driver) ------------------------------------------------------------

    def stage(self, spark: "SparkSession", data: "DataFrame", rejected: RejectedRows, batch_id: int,
              attempt: str, output_id: int | None = None) -> StagedOutput:
        """Write one attempt's rows as Parquet into its own staging folder (overwriting a rerun of
        the same attempt). ``data`` is sub-partitioned by ``event_date`` when the sink has an
        ``event_time_column``; ``rejected`` gets its batch id from the published folder name.
        ``output_id``: whose output the rows become (a replay's target), for sinks that store it."""
        from pyspark.sql import functions as F

        partition_by: list[str] = []
        if self.settings.event_time_column:
            data = data.withColumn("event_date", F.to_date(F.col(self.settings.event_time_column)))
            partition_by = ["event_date"]
        return self.write_staged(spark, data, rejected, batch_id, attempt, partition_by)

    def write_staged(self, spark: "SparkSession", data: "DataFrame", rejected: RejectedRows, batch_id: int,
                     attempt: str, partition_by: list[str], metrics: "dict[str, Column] | None" = None) -> StagedOutput:
        """The Parquet writes every sink's ``stage`` ends with: the data first (the job's one pass),
        then the rejected rows. The row count comes from the write itself (an observation), not
        from reading the files back; so do ``metrics``, aggregates the sink's commit half reads in
        the manifest (``Manifest.sink_metrics``) instead of reading the files. Timestamps are
        written as INT64 microseconds, not Spark's default INT96, which other readers (pyarrow,
        Iceberg) read wrongly or not at all: pyarrow turns INT96 into nanoseconds, so years after
        2262 overflow (9999-12-31 became 1816)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")

        data_dir = self.staging.staging_data(batch_id, attempt)
        rejected_dir = self.staging.staging_rejected(batch_id, attempt)
        written = Observation(f"offsetbatch-{self.pipeline_name}-{batch_id}-written")
        observe(data, written, F.count(F.lit(1)).alias("rows"),
                *(expr.alias(name) for name, expr in (metrics or {}).items())).write.mode("overwrite") \
            .partitionBy(*partition_by).parquet(data_dir)
        if rejected.known_empty():  # the schema only: no Spark job for a file without rows
            storage.write_empty_parquet(rejected_dir, _arrow_schema(rejected.schema()))
        else:
            rejected.frame().write.mode("overwrite").parquet(rejected_dir)
        observed = written.get
        return StagedOutput(observed["rows"], storage.files(data_dir), storage.files(rejected_dir),
                            {name: observed[name] for name in metrics or {}})

    # ---- commit half (commit task, under the pipeline lock) ---------------------------------

    def check_reread(self, batch_ids: list[int], what: str) -> None:
        """Called when planning ``what`` (a replay, a rewind) that re-reads committed batches: a sink
        whose output cannot be replaced (an append-only topic) refuses (``RunRequestError``)."""

    def check_source(self, reads_topic: Callable[[str], bool], source: "KafkaAdmin") -> None:
        """Called by the plan task before the ledger is opened, with the pipeline's source cluster:
        a sink that would write where the pipeline reads refuses (``SinkTargetError``)."""

    def check_writable(self) -> None:
        """Called by the plan task before the ledger is opened: a target this pipeline could never
        publish to (a missing topic, a refused ACL) refuses before a Spark job is spent on it."""

    def check_publishable(self, batch_id: int, output_id: int, attempt: str) -> None:
        """Called by the commit before its ledger transaction: refuse (``SinkSchemaError``) an
        attempt that ``publish`` could never publish, while the batch is still planned. After the
        transaction such a batch would stay committed and unpublished for good."""

    def cleanup(self, batch_id: int) -> None:
        """Remove a published batch's staging (every attempt of it)."""
        for folder in self.staging.attempt_folders(batch_id):
            storage.remove(folder)

    def discard(self, batch_id: int, attempt: str) -> None:
        """Drop one attempt's staged output (a redundant or losing re-execution)."""
        storage.remove(self.staging.attempt(batch_id, attempt))

    def remove_attempt_unless(self, folder: str, published: Callable[["Manifest"], bool]) -> None:
        """Delete attempt ``folder`` unless ``published`` says the output its staged manifest names
        comes from it: on an object store published files stay in their attempt folder."""
        from offsetbatch.jobspec import Manifest

        staged = Manifest.load_if_exists(f"{folder}/_manifest.json")  # the attempt itself may be discarding it
        if staged is not None and published(staged):
            return
        storage.remove(folder)

    @abstractmethod
    def published_ids(self) -> list[int]:
        """Output ids the target holds published output of (read from the sink's own markers)."""

    def owner(self) -> dict | None:
        """Which ledger and pipeline own this output (``{"ledger_id", "pipeline", "claimed_at"}``),
        ``None`` before the first publish. Recorded next to the staging area; a sink whose target
        has properties of its own (a table format) may keep it there instead."""
        return storage.read_json(self.staging.owner) if storage.exists(self.staging.owner) else None

    def claim(self, ledger_id: str) -> None:
        """Record that ``ledger_id`` owns this output (first publish, or a ledger rebuild)."""
        storage.write_json(self.staging.owner, {"ledger_id": ledger_id, "pipeline": self.pipeline_name,
                                                "claimed_at": datetime.now(timezone.utc).isoformat()})

    def describe(self, output_id: int) -> str:
        """Where ``output_id``'s output is, for log lines."""
        return self.target

    def locations(self, output_id: int) -> dict[str, str]:
        """Where ``output_id``'s output and its marker are, for ``offsetbatch batch`` and the UI."""
        return {"output": self.describe(output_id)}

    def locations_of(self, output_ids: list[int]) -> dict[int, dict[str, str]]:
        """``locations`` of many outputs (a UI page); a sink whose markers live in a catalog reads
        them once here."""
        return {i: self.locations(i) for i in output_ids}

    # ---- read path --------------------------------------------------------------------------

    @abstractmethod
    def read_committed(self, spark: "SparkSession") -> "DataFrame":
        """Every committed batch's output, never an uncommitted one's."""

    @abstractmethod
    def read_rejected(self, spark: "SparkSession") -> "DataFrame":
        """Malformed records of committed batches, with their Kafka coordinates and the error."""


def _arrow_schema(schema: Any) -> Any:
    """A Spark schema as the Arrow schema of the Parquet file Spark would write for it (timestamps
    as UTC microseconds, as ``write_staged`` has Spark write them)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


SINKS: dict[str, type[Sink]] = {}


def register_sink(sink: type[Sink]) -> type[Sink]:
    """Make ``sink`` the one of its ``type`` (``sink.type`` in the YAML); a decorator too."""
    SINKS[sink.type] = sink
    return sink


class PublishesAfterLedgerCommit(ABC):
    """Trait of a sink that publishes after the ledger transaction, under the pipeline lock, with a
    marker in the target itself; a crash between the two is rolled forward by publishing again."""

    @abstractmethod
    def publish(self, batch_id: int, output_id: int, attempt: str, superseded: Sequence[int] = (),
                kind: str = "") -> None:
        """Make batch ``batch_id``'s staged ``attempt`` the published output of ``output_id``,
        replacing what was there, and remove the batch's staging. Idempotent; a crash part-way is
        finished by calling it again. ``superseded``: output ids the batch re-read (a rewind); a
        sink with atomic snapshots removes them in the same one (``retire`` is called afterwards
        either way). ``kind``: the batch's kind, for sinks that record it."""

    @abstractmethod
    def retire(self, output_id: int) -> None:
        """Remove the published output of a superseded batch (another batch re-read its offsets)."""


class PublishesInLedgerTransaction(ABC):
    """Trait of a sink whose target lives in the ledger's own database: it publishes on the ledger's
    connection inside the transaction that commits the batch; there is nothing to roll forward."""

    @abstractmethod
    def publish_in_transaction(self, conn: "sa.Connection", batch_id: int, output_id: int, attempt: str,
                               ledger_id: str) -> None:
        """Make ``attempt`` the output of ``output_id`` using ``conn``, the ledger's connection,
        inside the transaction that commits the batch (it also records ``ledger_id`` as the owner on
        first use). Raising rolls everything back."""

    @abstractmethod
    def retire_in_transaction(self, conn: "sa.Connection", output_id: int) -> None:
        """Remove a superseded batch's output inside the ledger transaction (before the new batch's
        output is loaded: both hold the same records)."""


class Maintained(ABC):
    """Trait of a sink whose target grows with every batch (snapshots, small files, attempt folders)
    and that can be maintained without touching what exactly-once needs: its markers, the output of
    a batch not yet published, the files of an attempt still in flight. ``offsetbatch maintain``
    calls this after publishing what was committed, and applies each action under the pipeline's
    ledger lock; a batch committed meanwhile is younger than ``in_flight_grace``."""

    @abstractmethod
    def maintenance(self, policy: "MaintenanceSettings", horizon: "Horizon") -> list["Action"]:
        """What a pass would do now, in order; nothing is changed until an action is applied."""


class KeepsManifests(ABC):
    """Trait of a sink whose target keeps each published batch's manifest (or its equivalent), so
    a lost ledger can be rebuilt from the target alone (``offsetbatch ledger rebuild``)."""

    @abstractmethod
    def published_manifests(self) -> dict[int, "Manifest"]:
        """The manifest of each published output id."""
