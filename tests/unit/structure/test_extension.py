"""A format and a sink added from outside the package, each with one registration line: the config,
the plan task's schema hook, the job's jars, the job spec, ``doctor`` and lineage all take them
without a line changed elsewhere (logic only: the stand-ins have no Spark side; the built-in
formats and sinks run end to end in the integration suite)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_jars import fake_jar
import yaml

from offsetbatch.dag import spark_jars
from offsetbatch.errors import ArtifactError, ConfigError
from offsetbatch.formats import FORMATS, SchemaContext, ValueFormat, ValueSettings, register_format
from offsetbatch.model import Batch, OffsetRange
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan import schemas as batch_schemas
from offsetbatch.sinks import SINKS, PublishesAfterLedgerCommit, Sink, StagedSettings, register_sink


class _Schemas:
    """What the stand-in format resolves: one schema text and the registry it came from."""

    def __init__(self, text: str, registry: str):
        self.text, self.registry = text, registry

    def to_spec(self) -> dict:
        return {"schema": self.text}

    def describe(self) -> str:
        return f"schema from {self.registry}"

    def recorded(self) -> dict:
        return {"registry": self.registry}


class _Registry:
    """A registry client as the format's hook opens it (a context manager)."""

    opened = 0

    def __enter__(self):
        _Registry.opened += 1
        return self

    def __exit__(self, *exc):
        return False

    def schema_of(self, subject: str) -> str:
        return f"message {subject} {{}}"


class _ProtoSettings(ValueSettings):
    message: str  # a field of the format's own


class ProtoStandIn(ValueFormat):
    """Like a Protobuf format would be: settings of its own, its schema from a registry, a jar for its job."""

    name = "proto-standin"
    Settings = _ProtoSettings
    jars = ("spark-protobuf_2.13",)

    @classmethod
    def check(cls, value: ValueSettings) -> None:
        cls._refuse(value, "avro_schema", "schema_ddl")
        if value.schema_registry is None:
            raise ValueError(f"format {value.format!r} needs 'schema_registry'")

    @classmethod
    def resolve_schemas(cls, value: ValueSettings, context: SchemaContext) -> _Schemas:
        with (context.registry or _Registry)() as registry:
            return _Schemas(registry.schema_of(f"{context.topics[0]}-{context.role}"), "standin")

    @classmethod
    def parse(cls, records, spec):
        raise NotImplementedError("no Spark side in this unit test")


class _ArchiveSettings(StagedSettings):
    bucket: str


class ArchiveStandIn(PublishesAfterLedgerCommit, Sink):
    """A sink with its own settings, doctor check and lineage dataset."""

    type = "archive-standin"
    Settings = _ArchiveSettings
    target = "archive"

    def asset_uri(self) -> str:
        return f"archive://{self.settings.bucket}/{self.pipeline_name}"

    def lineage_dataset(self) -> tuple[str, str]:
        return f"archive://{self.settings.bucket}", self.pipeline_name

    def doctor_checks(self):
        return [("archive bucket", lambda: f"bucket {self.settings.bucket} answers", "create the bucket")]

    def publish(self, batch_id, output_id, attempt, superseded=(), kind=""): ...
    def retire(self, output_id): ...
    def published_ids(self): return []
    def read_committed(self, spark): ...
    def read_rejected(self, spark): ...


@pytest.fixture
def registered() -> Iterator[None]:
    formats, sinks = dict(FORMATS), dict(SINKS)
    register_format(ProtoStandIn)  # the one line a format needs
    register_sink(ArchiveStandIn)  # the one line a sink needs
    yield
    FORMATS.clear(), FORMATS.update(formats)
    SINKS.clear(), SINKS.update(sinks)


def _pipeline(tmp_path, **change) -> Pipeline:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({
        "name": "orders", "kafka": {"topics": ["orders"]},
        "value": {"format": "proto-standin", "schema_registry": {"conn_id": "sr"}, "message": "Order"},
        "sink": {"type": "archive-standin", "path": str(tmp_path / "stage"), "bucket": "b1"}, **change}))
    return Pipeline.load(path)


def test_config_validates_both_by_their_own_rules(registered, tmp_path):
    pipeline = _pipeline(tmp_path)
    assert pipeline.cfg.value.parser is ProtoStandIn and isinstance(pipeline.sink, ArchiveStandIn)
    assert pipeline.cfg.value.message == "Order" and pipeline.cfg.value.options == {"message": "Order"}
    with pytest.raises(ConfigError, match=r"field 'value': .*format 'proto-standin' needs 'schema_registry'"):
        _pipeline(tmp_path, value={"format": "proto-standin", "message": "Order"})
    with pytest.raises(ConfigError, match=r"field 'value.message': Field required"):
        _pipeline(tmp_path, value={"format": "proto-standin", "schema_registry": {"conn_id": "sr"}})
    with pytest.raises(ConfigError, match=r"field 'value.message': Extra inputs are not permitted"):
        _pipeline(tmp_path, value={"format": "json", "schema": "id STRING", "message": "Order"})
    with pytest.raises(ConfigError, match=r"field 'sink.bucket': Field required"):
        _pipeline(tmp_path, sink={"type": "archive-standin", "path": str(tmp_path / "stage")})


def test_the_plan_task_resolves_its_schema_through_the_hook_into_the_spec(registered, tmp_path):
    pipeline = _pipeline(tmp_path, key={"format": "proto-standin", "schema_registry": {"conn_id": "sr"}, "message": "K"})
    _Registry.opened = 0
    found = batch_schemas.resolve_all(pipeline)
    assert _Registry.opened == 2 and found["key"].text == "message orders-key {}"
    batch = Batch("orders", 1, "incremental", "planned", [OffsetRange("orders", 0, 0, 5)])
    spec = pipeline.job_spec(type("Client", (), {"bootstrap": "k:9092", "spark_options": lambda self: {}})(), batch,
                             found["value"].to_spec(), found["key"].to_spec())
    assert spec.value_format == "proto-standin" and spec.value_schemas == {"schema": "message orders-value {}"}
    assert spec.value_options == {"message": "Order"}
    assert spec.key_view().value_schemas == {"schema": "message orders-key {}"}
    assert spec.key_view().value_options == {"message": "K"} and spec.key_view().role == "key"


def test_the_job_gets_the_formats_jars(registered, tmp_path, monkeypatch):
    folder = tmp_path / "jars"
    folder.mkdir()
    for name in spark_jars.CONNECTOR:
        fake_jar(folder / f"{name}-1.0.jar")
    monkeypatch.setenv(spark_jars.ENV, str(folder))
    with pytest.raises(ArtifactError, match=r"has no jar of spark-protobuf_2.13 \(the Spark jars of value format "
                                            r"'proto-standin'"):
        spark_jars.job_jars("/t", "proto-standin")
    fake_jar(folder / "spark-protobuf_2.13-4.3.0.jar")
    assert len(spark_jars.job_jars("/t", "json", "proto-standin")) == 5


def test_doctor_runs_the_sinks_own_checks(registered, tmp_path, monkeypatch):
    from offsetbatch.ops import doctor

    pipeline = _pipeline(tmp_path)
    for reaching in ("_kafka", "_ledger", "_airflow_conn", "_java", "_pyspark", "_connector", "_spark_jars"):
        monkeypatch.setattr(doctor, reaching, lambda *a: "stubbed: this test is about which checks run")
    checks = {c.name: c for c in doctor.run_checks({"orders": pipeline})}
    assert checks["orders: archive bucket"].ok and checks["orders: archive bucket"].detail == "bucket b1 answers"


def test_lineage_names_the_sinks_own_dataset(registered, tmp_path):
    from offsetbatch.dag.lineage import task_lineage

    pipeline = _pipeline(tmp_path)
    plan = {"batches": [{"batch_id": 1, "kind": "incremental", "ranges": ["orders/0[0,5)"]}]}
    lineage = task_lineage(pipeline, plan)
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("archive://b1", "orders"),
                                                                 ("file", f"{tmp_path}/stage/_rejected")]
