"""The contract between an Airflow task and the Spark job: the job spec (what to read and how to
write it) and the manifest (what was read and written). Both are JSON files in the table's
``_offsetbatch/`` folder, so the job needs no database and works the same on a cluster."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from offsetbatch import storage
from offsetbatch.errors import ConfigError
from offsetbatch.model import OffsetRange

# 6: ``tombstones``; 5: ``role``, ``value_options``, ``transform_system_access``; 4: Avro ``value_schemas``, ``schema_id``; 3: ``kafka_options``; 2: ``batch_id``
# and ``output_id``
SPEC_VERSION = 6
READABLE_VERSIONS = (2, 3, 4, 5, 6)  # an older spec is a v6 one without what came later (PLAINTEXT, no Avro)


@dataclass
class JobSpec:
    pipeline: str
    batch_id: int  # the batch this job executes: its attempts stage under this id
    output_id: int  # the batch id whose output it writes: a replay writes its target's, others their own
    bootstrap: str
    ranges: list[dict]
    sink: dict  # the pipeline's ``sink:`` settings; ``offsetbatch.sinks.sink_for`` rebuilds the sink
    value_format: str = "raw"
    schema_ddl: str | None = None
    required: list[str] = field(default_factory=list)
    transform_sql: str | None = None
    transform_python: str | None = None
    transform_system_access: bool = False  # transform.allow_system_access: Spark's ${env:...} substitution stays on
    isolation_level: str = "read_uncommitted"
    records_per_task: int = 2_000_000
    # Non-secret ``kafka.*`` options of Spark's Kafka source (``KafkaClientConfig.spark_options``);
    # secrets reach the job in a private file, never here.
    kafka_options: dict = field(default_factory=dict)
    # Avro formats: the reader schema and every writer schema the batch's records may name, resolved by
    # the plan task (``plan.schemas``, through the format's ``resolve_schemas``); the job never asks a registry.
    value_schemas: dict | None = None
    schema_id: str = "auto"  # confluent-* formats: where a record names its schema (``value.schema_id``)
    role: str = "value"  # what the format parses: "value", or "key" in ``key_view`` (Confluent's header names differ)
    value_options: dict = field(default_factory=dict)  # the fields a format's own settings model adds
    tombstones: str = "reject"  # value.tombstones: "delete" keeps null values as rows flagged kafka_tombstone
    # ``key.format`` other than raw: the key's settings (format, schema_ddl, required, value_schemas,
    # schema_id, options), parsed into a struct column ``key`` (``key_view``).
    key: dict | None = None
    version: int = SPEC_VERSION

    def key_view(self) -> "JobSpec | None":
        """The spec as the key's format sees it (its settings in the value's places), or ``None``
        when keys stay bytes."""
        if self.key is None:
            return None
        return replace(self, value_format=self.key["format"], schema_ddl=self.key["schema_ddl"],
                       required=self.key["required"], value_schemas=self.key["value_schemas"],
                       schema_id=self.key["schema_id"], value_options=self.key.get("options") or {}, role="key",
                       key=None)

    @property
    def offset_ranges(self) -> list[OffsetRange]:
        return [OffsetRange(**r) for r in self.ranges]

    def save(self, uri: str) -> None:
        storage.write_json(uri, asdict(self))

    @classmethod
    def load(cls, uri: str) -> "JobSpec":
        raw = storage.read_json(uri)
        if raw.get("version") not in READABLE_VERSIONS:
            raise ConfigError(f"job spec {uri} has version {raw.get('version')}, this job reads versions "
                              f"{', '.join(map(str, READABLE_VERSIONS))}")
        raw.pop("schema_header", None)  # specs before ``role``: always the value's header (a key view is never saved)
        return cls(**{**raw, "version": SPEC_VERSION})


@dataclass
class RangeReport:
    """What the job read of one planned range."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    rows: int
    rejected: int
    # Per-range offsets seen and bytes: written by the job before it observed its one pass (still
    # loaded and checked); the job now checks every record's offset against its range instead.
    min_offset: int | None = None
    max_offset: int | None = None
    bytes: int | None = None
    outside: int = 0  # records read outside the range: the job fails first, so a manifest always says 0


@dataclass
class Manifest:
    pipeline: str
    output_id: int
    ranges: list[RangeReport]
    rows_in: int
    rows_out: int
    rows_rejected: int
    bytes_in: int
    data_files: list[str]
    rejected_files: list[str]
    job_seconds: float
    spark_version: str
    attempt: str | None = None  # the Spark attempt that wrote it (published manifests say which one is in)
    location: str | None = None  # on an object store: the attempt folder the published files stay in
    # the records' Kafka timestamps, first and last (microseconds since the epoch; None: no record)
    first_record_us: int | None = None
    last_record_us: int | None = None
    # what the sink's job half measured for its commit half (``StagedOutput.metrics``; the Kafka sink:
    # the largest record, checked against the topic's limit before the ledger commit)
    sink_metrics: dict = field(default_factory=dict)
    # records the value format skipped as not changes (a Debezium heartbeat, ``formats.SKIP``):
    # neither rows nor rejected; rows_in = rows_out + rows_rejected + rows_skipped + the transform's filtered
    rows_skipped: int = 0
    # a files table on an object store: rejected-record files past the maintenance retention, taken
    # out of ``rejected_files`` (readers no longer read them) and about to be deleted
    rejected_expired: list[str] = field(default_factory=list)

    def save(self, uri: str) -> None:
        storage.write_json(uri, asdict(self))

    @classmethod
    def load(cls, uri: str) -> "Manifest":
        return cls.from_json(storage.read_json(uri))

    @classmethod
    def load_if_exists(cls, uri: str) -> "Manifest | None":
        """The manifest at ``uri``, or ``None``: not written, or deleted meanwhile by another process."""
        raw = storage.read_json_if_exists(uri)
        return None if raw is None else cls.from_json(raw)

    @classmethod
    def from_json(cls, raw: dict) -> "Manifest":
        raw["ranges"] = [RangeReport(**r) for r in raw["ranges"]]
        if "batch_id" in raw:  # manifests published before version 2 of the job spec
            raw["output_id"] = raw.pop("batch_id")
        return cls(**raw)
