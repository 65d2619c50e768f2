"""Pipeline configuration: one YAML file per pipeline, validated into a typed, frozen object.

A bad file raises ``ConfigError`` naming the file and the field, so it shows up as a readable
DAG import error in the Airflow UI rather than a stack trace. ``${VAR}`` and ``${VAR:-default}``
in string values are expanded from the environment (sink paths, connection ids, names), never in
``transform.sql``.
"""

from __future__ import annotations

import logging
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from offsetbatch import redact, validation
from offsetbatch.errors import ConfigError
from offsetbatch.formats import KEY_COLUMN, ValueSettings, settings_for as value_settings_for
from offsetbatch.paths import bundled_pipelines_dir
from offsetbatch.sinks import SINKS, SinkSettings, settings_for
from offsetbatch.sinks.maintenance import MaintenanceSettings

log = logging.getLogger(__name__)
PIPELINES_DIR = bundled_pipelines_dir()  # None when installed from the wheel
_NAME = r"^[a-z][a-z0-9_]{0,62}$"
DAG_ID_PREFIX, MAINTENANCE_DAG_SUFFIX = "offsetbatch_", "_maintenance"  # a pipeline's DAG ids


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaSettings(_Model):
    conn_id: str = Field("kafka_default", description="Airflow connection with extra 'bootstrap.servers'")
    topics: list[str] | None = Field(None, description="explicit topic list")
    pattern: str | None = Field(None, description="regex over topic names; new matching topics are picked up")
    isolation_level: Literal["read_uncommitted", "read_committed"] = Field(
        "read_uncommitted", description="read_committed: only records of committed transactions (another "
        "pipeline's Kafka-sink output, any transactional producer's); it implies expect_offset_gaps")
    expect_offset_gaps: bool = Field(
        False, description="fewer records than offsets is expected: compacted topics, and (implied by "
        "read_committed) the markers and aborted records of transactional ones")

    @model_validator(mode="before")
    @classmethod
    def _committed_reads_have_gaps(cls, data):
        """A read_committed range never holds as many records as offsets when a transaction ended in
        it (its marker takes an offset): without the gaps every such batch would fail its commit."""
        if isinstance(data, dict) and data.get("isolation_level") == "read_committed":
            if data.get("expect_offset_gaps") is False:
                raise ValueError("isolation_level 'read_committed' skips transaction markers and aborted records, "
                                 "so a batch reads fewer records than its offsets: remove 'expect_offset_gaps: "
                                 "false' (read_committed implies true)")
            data = {**data, "expect_offset_gaps": True}
        return data

    @model_validator(mode="after")
    def _one_selector(self) -> "KafkaSettings":
        if bool(self.topics) == bool(self.pattern):
            raise ValueError("give exactly one of 'topics' (a non-empty list) or 'pattern'")
        if self.pattern:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"'pattern' is not a valid regex: {exc}") from exc
        return self


OFFSET_MAX = 2**63 - 1  # Kafka's offsets are int64: a larger cap is a typo, never a limit


def _not_a_bool(v: object) -> object:
    """YAML's ``true`` would pass as the number 1 (a count of one record, one retry): refused. A
    string from ``${VAR:-2}`` still parses as the number it spells."""
    if isinstance(v, bool):
        raise ValueError(f"must be a number, got {str(v).lower()}")
    return v


Count = Annotated[int, BeforeValidator(_not_a_bool)]


class Caps(_Model):
    max_records_per_partition: Count = Field(5_000_000, gt=0, le=OFFSET_MAX)
    max_records_per_batch: Count = Field(50_000_000, gt=0, le=OFFSET_MAX)


class TransformSettings(_Model):
    sql: str | None = Field(None, description="Spark SQL over the view 'records'")
    python: str | None = Field(None, description="dotted path 'module.function' taking and returning a DataFrame")
    allow_system_access: bool = Field(
        False, description="let 'sql' call reflect/java_method, run TRANSFORM ... USING, read files or tables "
                           "other than 'records' (validation.SYSTEM_FUNCTIONS, a qualified table name; the job's "
                           "check on Spark's plan, job.reads, is off too) or use Spark's ${env:...} substitution: "
                           "such SQL can read the job's environment, its hosts' files and any table its Spark "
                           "session can")

    @field_validator("sql")
    @classmethod
    def _sql_parses(cls, v: str | None) -> str | None:
        """Syntax only (sqlglot, Spark dialect); the job checks column names before it reads Kafka."""
        if v is not None:
            validation.check_transform_sql(v)
        return v

    @field_validator("python")
    @classmethod
    def _python_imports(cls, v: str | None) -> str | None:
        """The job imports it the same way; a typo must fail at DAG parse, not after planning."""
        if v is not None:
            if not re.fullmatch(r"[A-Za-z_][\w.]*\.[A-Za-z_]\w*", v):
                raise ValueError(f"must be a dotted path 'module.function', got {v!r}")
            validation.check_python_callable(v)
        return v

    @model_validator(mode="after")
    def _contained(self) -> "TransformSettings":
        if self.sql is not None:
            if not self.allow_system_access:
                try:
                    validation.check_system_access(self.sql)
                except ValueError as exc:
                    raise ValueError(f"'sql' {exc}") from None
            if changing := validation.nondeterministic_functions(self.sql):
                log.warning("transform.sql calls %s: a replay or re-run of a batch writes other values than its "
                            "first run did (use a column of the record, such as kafka_timestamp, instead)",
                            ", ".join(f"{name}()" for name in changing))
        return self

    @model_validator(mode="before")
    @classmethod
    def _at_most_one(cls, data):
        """Before the fields: with both given, 'not both' is the fix, whatever else is wrong with them."""
        if isinstance(data, dict) and data.get("sql") and data.get("python"):
            raise ValueError("give 'sql' or 'python', not both")
        return data


# The Airflow connection of the Spark Connect server pipelines run on by default: the local stack's
# (scripts/env.sh: offsetbatch-stack spark-connect on 127.0.0.1) or the container stack's.
DEFAULT_CONNECT_CONN_ID = "spark_connect_default"


def spark_runs_at_driver_start(key: str) -> bool:
    """A ``spark.conf`` key a Spark Connect session cannot take: it applies when a driver starts
    (memory, JVM options, jars, the UI), so only a JVM of the job's own honours it."""
    return not key.startswith("spark.sql.")


def _implied_runner(spark: dict) -> str:
    """The runner of a ``spark:`` block that does not name one. spark-submit where the block says so
    as YAMLs written before runners did: a ``connect_conn_id`` given empty (documented as "empty
    means spark-submit"; ``${OFFSETBATCH_SPARK_CONNECT:-}`` where that variable is unset), the
    spark-submit connection ``conn_id`` named, or a ``conf`` setting that applies when a driver
    starts. Otherwise, and with a ``connect_conn_id``, the Spark Connect server."""
    if spark.get("connect_conn_id"):
        return "connect"
    if "connect_conn_id" in spark or "conn_id" in spark:
        return "spark-submit"
    if any(spark_runs_at_driver_start(str(k)) for k in spark.get("conf") or {}):
        return "spark-submit"
    return "connect"


class SparkSettings(_Model):
    runner: Literal["connect", "spark-submit"] = Field(
        "connect", description="where the job runs: 'connect', a session on the long-running Spark Connect server "
        "of connect_conn_id (no JVM start per run); 'spark-submit', a driver of its own through conn_id (clusters, "
        "YARN, driver memory or JVM options of its own). Unset: spark-submit when conn_id is named, connect_conn_id "
        "is empty or conf holds a setting that applies when a driver starts (not spark.sql.*), else connect")
    conn_id: str = Field("spark_default", description="Airflow Spark connection spark-submit runs the job with "
                         "(runner spark-submit); naming it without a runner chooses spark-submit")
    connect_conn_id: str | None = Field(
        None, description=f"Airflow spark_connect connection of the Spark Connect server (runner connect; default "
        f"{DEFAULT_CONNECT_CONN_ID}); given empty without a runner, spark-submit")
    conf: dict[str, str] = Field(default_factory=dict, description="Spark settings of the job; secrets are refused "
                                 "(they belong in the pipeline's connections, which reach the job in a private file)")
    records_per_task: int = Field(2_000_000, gt=0, description="ranges larger than this are split across Spark tasks")

    @model_validator(mode="before")
    @classmethod
    def _resolve_runner(cls, data):
        """``runner`` and ``connect_conn_id`` as the job will use them: one place decides."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("runner") is None:
            data["runner"] = _implied_runner(data)
        if data["runner"] == "spark-submit":
            if data.get("connect_conn_id"):
                raise ValueError(f"runner is 'spark-submit' but connect_conn_id names a Spark Connect server "
                                 f"({data['connect_conn_id']!r}): remove one of them")
            data["connect_conn_id"] = None
        elif data["runner"] == "connect":
            data["connect_conn_id"] = data.get("connect_conn_id") or DEFAULT_CONNECT_CONN_ID
        return data

    @field_validator("conf")
    @classmethod
    def _no_secrets(cls, conf: dict[str, str]) -> dict[str, str]:
        """spark.conf rides on spark-submit's command line for the whole run, in the operator's conf,
        the serialized DAG and task logs: a secret there is in plain sight (issue 41, case 9; issue
        58: by its value too, an Azure account key, a JAAS or JDBC password). Named by key only."""
        secret = sorted(k for k, v in conf.items() if redact.holds_secret(k, v))
        if secret:
            raise ValueError(f"{', '.join(secret)} would put a secret on spark-submit's command line, in the DAG and "
                             f"in task logs: remove it. Object-store keys belong in the Airflow connection named by "
                             f"sink.storage_conn_id, Kafka credentials in kafka.conn_id's; both reach the job in a "
                             f"private file. Other stores' keys (an Azure account key, a database password) belong in "
                             f"the cluster's own configuration (core-site.xml, a Hadoop credential provider named by "
                             f"hadoop.security.credential.provider.path), never in the pipeline's YAML")
        return conf

    @property
    def on_connect(self) -> bool:
        return self.runner == "connect"


class LagTriggerSettings(_Model):
    """``airflow.trigger``: start a run as soon as records wait past the ledger's frontier, not only
    on the schedule (``dag.lag_trigger``). A run starts when ``min_records`` wait or the oldest
    waiting record has waited ``max_delay``, whichever comes first; nothing starts while nothing waits."""

    min_records: Count | None = Field(None, gt=0,
                                      description="records waiting past the frontier that start a run")
    max_delay: float | None = Field(None, gt=0, description="how long the oldest waiting record may wait before a "
                                    "run starts ('30s', '2m', '1h'; seconds)")
    poll: float = Field(10.0, ge=1.0, description="how often the trigger asks the broker for the log ends and the "
                        "ledger for the frontier ('10s'; at least 1 s)")

    @field_validator("max_delay", "poll", mode="before")
    @classmethod
    def _duration(cls, v: object) -> object:
        return None if v is None else validation.parse_duration(v)

    @model_validator(mode="after")
    def _bounded(self) -> "LagTriggerSettings":
        if self.min_records is None and self.max_delay is None:
            raise ValueError("give min_records, max_delay or both (e.g. {min_records: 10000, max_delay: 2m}): "
                             "without either, no number of waiting records would ever start a run")
        if self.max_delay is not None and self.max_delay < self.poll:
            raise ValueError(f"max_delay ({self.max_delay:g} s) is shorter than poll ({self.poll:g} s): the trigger "
                             f"looks every poll, so a record can wait a whole poll before a run starts and max_delay "
                             f"could not be kept; make max_delay at least poll, or poll at most max_delay")
        return self


class TaskQueues(_Model):
    """The Celery queue of each task (Airflow's operator ``queue``): a pipeline's tasks go to the
    workers that serve it, e.g. the spark_job task to the ones with room for a spark-submit driver.
    A task left out goes to Airflow's ``[operators] default_queue``; LocalExecutor ignores queues."""

    plan: str | None = None
    spark_job: str | None = None
    commit: str | None = None
    maintain: str | None = Field(None, description="the maintenance DAG's one task")

    @field_validator("plan", "spark_job", "commit", "maintain")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", v):
            raise ValueError(f"queue {v!r} is not a queue name (letters, digits, '_', '.', ':', '-'; the name a Celery "
                             f"worker serves with 'airflow celery worker --queues')")
        return v


class AirflowSettings(_Model):
    schedule: str | None = Field("0 * * * *", description="cron expression for CronDataIntervalTimetable; null: "
                                 "runs start only by airflow.trigger (or by hand)")
    trigger: LagTriggerSettings | None = Field(None, description="start runs when records wait (a lag trigger)")
    start_date: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc)
    end_date: datetime | None = Field(None, description="no scheduled run with a later logical date")
    catchup: bool = False
    retries: Count = Field(2, ge=0, le=100)
    retry_delay_seconds: Count = Field(60, ge=0, le=86400)
    owner: str = "data-engineering"
    tags: list[str] = Field(default_factory=list)
    queues: TaskQueues = Field(default_factory=TaskQueues, description="Celery queue per task")
    asset_partitions: bool = Field(
        False, description="the commit's asset event carries each batch's time slice as a partition key "
                           "('%Y-%m-%dT%H:%M:%S', UTC, the interval's start), for DAGs scheduled with "
                           "PartitionedAssetTimetable. Airflow queues no plain asset-scheduled DAG on a partitioned "
                           "event, so turn it on when the asset's consumers are partition-aware")

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        """Airflow would refuse it at DAG parse without naming this file or field."""
        return None if v is None else validation.check_cron(v)

    @model_validator(mode="after")
    def _dates(self) -> "AirflowSettings":
        if self.schedule is None and self.trigger is None:
            raise ValueError("schedule is null and there is no trigger: no run would ever start but by hand; give a "
                             "cron schedule (e.g. '0 * * * *'), an airflow.trigger, or both")
        for name in ("start_date", "end_date"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{name} {value.isoformat()} needs a timezone (e.g. '2026-01-01T00:00:00+00:00')")
        if self.end_date is not None and self.end_date <= self.start_date:
            raise ValueError(f"end_date {self.end_date.isoformat()} is not after start_date "
                             f"{self.start_date.isoformat()}: no run would ever be scheduled; fix or remove end_date")
        return self


class LedgerSettings(_Model):
    conn_id: str | None = "offsetbatch_ledger"
    url: str | None = Field(None, description="SQLAlchemy URL; wins over conn_id")

    @field_validator("url")
    @classmethod
    def _one_place(cls, v: str | None) -> str | None:
        if v is not None:
            validation.check_ledger_url(v)
        return v


class PipelineConfig(_Model):
    name: str = Field(pattern=_NAME)
    description: str = ""
    kafka: KafkaSettings
    starting_policy: str = Field("earliest", description="'earliest' | 'latest' | ISO-8601 timestamp")
    caps: Caps = Caps()
    on_data_loss: Literal["fail", "skip"] = "fail"
    value: ValueSettings = ValueSettings(format="raw")
    key: ValueSettings = Field(ValueSettings(format="raw"), description="how the job parses Kafka keys (the same "
                               "settings as value:); a format other than raw adds a struct column 'key'")
    transform: TransformSettings = TransformSettings()
    sink: SinkSettings
    consumer_group: str | None = Field(None, description="group the committed frontier is published to")
    spark: SparkSettings = SparkSettings()
    airflow: AirflowSettings = AirflowSettings()
    ledger: LedgerSettings = LedgerSettings()
    maintenance: MaintenanceSettings = Field(MaintenanceSettings(), description="retention and compaction "
                                             "('offsetbatch maintain'; a DAG of its own when schedule is set)")
    source_file: str | None = Field(None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _sink_and_ledger(cls, data):
        """A sink committed inside the ledger's transaction (postgres) must use the ledger's database:
        its settings get the ledger's connection, or are refused when they name another one."""
        if isinstance(data, dict) and isinstance(data.get("sink"), dict):
            kind = data["sink"].get("type", "files")
            if kind in SINKS:
                data = {**data, "sink": SINKS[kind].Settings.bind_ledger(data["sink"], data.get("ledger") or {})}
        return data

    @model_validator(mode="after")
    def _tombstones_are_values(self) -> "PipelineConfig":
        if self.key.tombstones != "reject":
            raise ValueError("key.tombstones: a tombstone is a record whose value is null; set value.tombstones "
                             "instead")
        return self

    @model_validator(mode="after")
    def _maintenance_fits_sink(self) -> "PipelineConfig":
        """Settings a pass would ignore for this sink are refused, not dropped: only Iceberg keeps snapshots."""
        if "retain_snapshots" in self.maintenance.model_fields_set and self.sink.type != "iceberg":
            raise ValueError(f"maintenance.retain_snapshots applies to Iceberg tables only; a {self.sink.type} sink "
                             f"keeps no snapshots, so a pass would ignore it: remove it")
        return self

    @model_validator(mode="after")
    def _trigger_within_caps(self) -> "PipelineConfig":
        """A count the per-batch cap keeps a run from ever reading, with no delay to fall back on,
        starts runs that each leave more than a cap's worth waiting: the rule could never be kept."""
        rule, cap = self.airflow.trigger, self.caps.max_records_per_batch
        if rule is not None and rule.min_records is not None and rule.max_delay is None and rule.min_records > cap:
            raise ValueError(f"airflow.trigger.min_records ({rule.min_records:,}) is more than "
                             f"caps.max_records_per_batch ({cap:,}), and there is no airflow.trigger.max_delay: a run "
                             f"reads at most {cap:,} records, so the rule could never be kept. Lower min_records, raise "
                             f"the cap, or add max_delay")
        return self

    @model_validator(mode="after")
    def _sink_fits_source(self) -> "PipelineConfig":
        """The sink's own rules about the source (a Kafka output must not be a topic it reads)."""
        self.sink.check_source_config(self.kafka.conn_id, self.reads_topic)
        return self

    @model_validator(mode="after")
    def _event_time_exists(self) -> "PipelineConfig":
        """Without a transform the output's columns are known here: the parsed value's and the job's own."""
        column = self.sink.event_time_column
        if column is None or self.transform.sql or self.transform.python:
            return self
        known = self.value.parser.output_columns(self.value, self.base_dir)
        if known is not None and not self.key.parser.leaves_bytes:
            known = [*known, KEY_COLUMN]
        if known is not None and column.lower() not in {c.lower() for c in known}:
            raise ValueError(f"sink.event_time_column {column!r} is not a column of the output (its columns: "
                             f"{', '.join(known)}); name one of them, or add it with transform.sql")
        return self

    @model_validator(mode="after")
    def _value_schema_loads(self) -> "PipelineConfig":
        """An Avro schema file that is missing or not Avro fails here, not in the plan task."""
        for role in ("value", "key"):
            settings = getattr(self, role)
            try:
                settings.parser.check_files(settings, self.base_dir)
            except ValueError as exc:
                raise ValueError(f"{role}: {exc}") from None
            settings.parser.check_topics(settings, role, self.kafka.topics)
        if not self.key.parser.leaves_bytes:
            columns = self.value.parser.output_columns(self.value, self.base_dir) or []
            if KEY_COLUMN in columns:
                raise ValueError(f"key.format {self.key.format!r} adds the column '{KEY_COLUMN}', which the value "
                                 f"already has; rename the value's field")
        return self

    @property
    def base_dir(self) -> Path | None:
        """The folder relative file names in the config (an Avro schema file) start from."""
        return Path(self.source_file).parent if self.source_file else None

    def reads_topic(self, topic: str) -> bool:
        if self.kafka.topics:
            return topic in self.kafka.topics
        return re.fullmatch(self.kafka.pattern or "", topic) is not None

    @field_validator("value", "key", mode="before")
    @classmethod
    def _settings_of_its_format(cls, v):
        """Each format validates its own settings (``ValueFormat.Settings``)."""
        return value_settings_for(v)

    @field_validator("sink", mode="before")
    @classmethod
    def _sink_of_its_type(cls, v):
        """Each sink type validates its own settings (``offsetbatch.sinks.SINKS``)."""
        return settings_for(v)

    @field_validator("starting_policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        if v in ("earliest", "latest"):
            return v
        try:
            ts = datetime.fromisoformat(v)
        except ValueError:
            raise ValueError(f"must be 'earliest', 'latest' or an ISO-8601 timestamp, got {v!r}") from None
        if ts.tzinfo is None:
            raise ValueError(f"timestamp {v!r} needs a timezone (e.g. '+00:00')")
        return v

    @property
    def start_timestamp_ms(self) -> int | None:
        if self.starting_policy in ("earliest", "latest"):
            return None
        return int(datetime.fromisoformat(self.starting_policy).timestamp() * 1000)

    @property
    def dag_id(self) -> str:
        return f"{DAG_ID_PREFIX}{self.name}"

    @property
    def maintenance_dag_id(self) -> str:
        return f"{DAG_ID_PREFIX}{self.name}{MAINTENANCE_DAG_SUFFIX}"

    @property
    def pool(self) -> str:
        return f"offsetbatch_{self.name}"

    @property
    def group_id(self) -> str:
        return self.consumer_group or f"offsetbatch.{self.name}"


_ENV = re.compile(r"\$\{([A-Za-z_]\w*)(?::-([^}]*))?\}")


# Never expanded: the SQL reaches the job spec (on the table's storage) and the task log, so a
# ``${VAR}`` holding a secret (a connection's JSON) would be in plain sight there; such SQL is
# refused (``validation.VARIABLE``) unless transform.allow_system_access.
_NOT_EXPANDED = (("transform", "sql"),)


def _expand(value, path: tuple = ()):
    if path in _NOT_EXPANDED:
        return value
    if isinstance(value, str):
        def sub(m: re.Match) -> str:
            if m.group(1) in os.environ:
                return os.environ[m.group(1)]
            if m.group(2) is not None:
                return m.group(2)
            raise KeyError(m.group(1))
        return _ENV.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, (*path, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, path) for v in value]
    return value


def _default_home() -> str:
    from offsetbatch.paths import local_dir

    return str(local_dir())


def load_config(path: str | Path) -> PipelineConfig:
    """Read and validate one pipeline YAML file. Its errors never show a URL's password (``redact``):
    they become DAG import errors every UI user reads."""
    path = Path(path)
    try:
        raw = validation.load_yaml(path.read_text())
    except OSError as exc:
        raise ConfigError(redact.url(f"{path}: cannot read pipeline config: {exc}")) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(redact.url(f"{path}: not valid YAML: {exc}")) from None
    except ValueError as exc:  # validation.load_yaml's limit on what aliases expand to
        raise ConfigError(redact.url(f"{path}: {exc}")) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a pipeline config is a YAML mapping, got {type(raw).__name__}")
    os.environ.setdefault("OFFSETBATCH_HOME", _default_home())
    try:
        raw = _expand(raw)
    except KeyError as exc:
        raise ConfigError(f"{path}: environment variable ${{{exc.args[0]}}} is not set (use ${{VAR:-default}})") from None
    try:
        return PipelineConfig(**raw, source_file=str(path))
    except ValidationError as exc:
        problems = "; ".join(
            f"field '{'.'.join(str(p) for p in err['loc']) or '(top level)'}': {err['msg']}"
            + (_did_you_mean(err["loc"]) if err["type"] == "extra_forbidden" else "") for err in exc.errors()
        )
        raise ConfigError(redact.url(f"{path}: invalid pipeline config: {problems}")) from None


def _did_you_mean(loc: tuple) -> str:
    """`` (did you mean 'x'?)`` for an unknown key close to a field the mapping it sits in has: the
    pipeline's own models, and for ``sink:``, ``value:`` and ``key:`` every sink's or format's."""
    import difflib

    models: list[type[BaseModel]] = [PipelineConfig]
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if models == [PipelineConfig] and part == "sink":
            models = [s.Settings for s in SINKS.values()]
        elif models == [PipelineConfig] and part in ("value", "key"):
            from offsetbatch.formats import FORMATS

            models = [f.Settings for f in FORMATS.values()]
        else:
            models = [m for m in (_model_of(model.model_fields[part].annotation) for model in models
                                  if part in model.model_fields) if m is not None]
    names = sorted({f.alias or name for model in models for name, f in model.model_fields.items()} - {"source_file"})
    close = difflib.get_close_matches(str(loc[-1]), names, 1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (``X``, ``X | None``), if it holds one."""
    from typing import get_args

    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None
