"""Pipeline configuration: one YAML file per pipeline, validated into a typed, frozen object.

A bad file raises ``ConfigError`` naming the file and the field, so it shows up as a readable
DAG import error in the Airflow UI rather than a stack trace. ``${VAR}`` and ``${VAR:-default}``
in string values are expanded from the environment (sink paths, connection ids).
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from offsetbatch.config import validation
from offsetbatch.errors import ConfigError
from offsetbatch.formats import ERROR, FORMATS, META
from offsetbatch.formats.json_value import CORRUPT as JSON_CORRUPT
from offsetbatch.paths import PROJECT_ROOT
from offsetbatch.sinks import SINKS, SinkSettings, settings_for

PIPELINES_DIR = PROJECT_ROOT / "include" / "pipelines"
_NAME = r"^[a-z][a-z0-9_]{0,62}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaSettings(_Model):
    conn_id: str = Field("kafka_default", description="Airflow connection with extra 'bootstrap.servers'")
    topics: list[str] | None = Field(None, description="explicit topic list")
    pattern: str | None = Field(None, description="regex over topic names; new matching topics are picked up")
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"
    expect_offset_gaps: bool = Field(
        False, description="compacted or transactional topics: fewer records than offsets is expected"
    )

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


class Caps(_Model):
    max_records_per_partition: int = Field(5_000_000, gt=0)
    max_records_per_batch: int = Field(50_000_000, gt=0)


class ValueSettings(_Model):
    format: str = Field("json", description="a value format of offsetbatch.formats.FORMATS: 'json' or 'raw'")
    schema_ddl: str | None = Field(None, alias="schema", description="Spark DDL, e.g. 'id STRING, n INT'")
    required: list[str] = Field(default_factory=list, description="fields that must be present and non-null")

    @field_validator("format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        if v not in FORMATS:
            raise ValueError(f"must be one of {', '.join(repr(f) for f in sorted(FORMATS))}, got {v!r}")
        return v

    @field_validator("schema_ddl")
    @classmethod
    def _ddl_parses(cls, v: str | None) -> str | None:
        """A DDL typo would otherwise fail only in the Spark job, after the batch was planned."""
        if v is not None:
            validation.check_schema_ddl(v, reserved=[*META, "value", ERROR, JSON_CORRUPT])
        return v

    @model_validator(mode="after")
    def _fits_format(self) -> "ValueSettings":
        FORMATS[self.format].check(self.schema_ddl, list(self.required))
        return self


class TransformSettings(_Model):
    sql: str | None = Field(None, description="Spark SQL over the view 'records'")
    python: str | None = Field(None, description="dotted path 'module.function' taking and returning a DataFrame")

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

    @model_validator(mode="before")
    @classmethod
    def _at_most_one(cls, data):
        """Before the fields: with both given, 'not both' is the fix, whatever else is wrong with them."""
        if isinstance(data, dict) and data.get("sql") and data.get("python"):
            raise ValueError("give 'sql' or 'python', not both")
        return data


class SparkSettings(_Model):
    conn_id: str = Field("spark_default", description="Airflow Spark connection spark-submit runs the job with")
    connect_conn_id: str | None = Field(
        None, description="an Airflow spark_connect connection: run the job on that long-running Spark Connect "
        "server instead (no JVM start per run); spark-submit through conn_id when unset")
    conf: dict[str, str] = Field(default_factory=dict)
    records_per_task: int = Field(2_000_000, gt=0, description="ranges larger than this are split across Spark tasks")


class AirflowSettings(_Model):
    schedule: str = Field("0 * * * *", description="cron expression for CronDataIntervalTimetable")
    start_date: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc)
    end_date: datetime | None = Field(None, description="no scheduled run with a later logical date")
    catchup: bool = False
    retries: int = Field(2, ge=0)
    retry_delay_seconds: int = Field(60, ge=0)
    owner: str = "data-engineering"
    tags: list[str] = Field(default_factory=list)

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str) -> str:
        """Airflow would refuse it at DAG parse without naming this file or field."""
        return validation.check_cron(v)


class LedgerSettings(_Model):
    conn_id: str | None = "offsetbatch_ledger"
    url: str | None = Field(None, description="SQLAlchemy URL; wins over conn_id")


class PipelineConfig(_Model):
    name: str = Field(pattern=_NAME)
    description: str = ""
    kafka: KafkaSettings
    starting_policy: str = Field("earliest", description="'earliest' | 'latest' | ISO-8601 timestamp")
    caps: Caps = Caps()
    on_data_loss: Literal["fail", "skip"] = "fail"
    value: ValueSettings = ValueSettings(format="raw")
    transform: TransformSettings = TransformSettings()
    sink: SinkSettings
    consumer_group: str | None = Field(None, description="group the committed frontier is published to")
    spark: SparkSettings = SparkSettings()
    airflow: AirflowSettings = AirflowSettings()
    ledger: LedgerSettings = LedgerSettings()
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
        return f"offsetbatch_{self.name}"

    @property
    def pool(self) -> str:
        return f"offsetbatch_{self.name}"

    @property
    def group_id(self) -> str:
        return self.consumer_group or f"offsetbatch.{self.name}"


_ENV = re.compile(r"\$\{([A-Za-z_]\w*)(?::-([^}]*))?\}")


def _expand(value):
    if isinstance(value, str):
        def sub(m: re.Match) -> str:
            if m.group(1) in os.environ:
                return os.environ[m.group(1)]
            if m.group(2) is not None:
                return m.group(2)
            raise KeyError(m.group(1))
        return _ENV.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    return value


def _default_home() -> str:
    from offsetbatch.paths import local_dir

    return str(local_dir())


def load_config(path: str | Path) -> PipelineConfig:
    """Read and validate one pipeline YAML file."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read pipeline config: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
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
            f"field '{'.'.join(str(p) for p in err['loc']) or '(top level)'}': {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"{path}: invalid pipeline config: {problems}") from None
