"""The Avro settings at config load, and the plan task's resolution of reader and writer schemas from
a registry (``plan.schemas``, through the Avro formats' hooks). No real schema registry can run here: ``tests/schema_registry_server.py`` stands in for
one (the documented Confluent REST routes)."""

from __future__ import annotations

import json

import pytest
from fake_jars import fake_jar
from harness import load_value_config
import yaml
from schema_registry_server import SchemaRegistryServer

from offsetbatch.dag import spark_jars
from offsetbatch.errors import ArtifactError, ConfigError
from offsetbatch.formats.avro_value import AvroFormat
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan import schemas as batch_schemas
from offsetbatch.source.schema_registry import RegistrySettings, SchemaRegistry

V1 = {"type": "record", "name": "E", "fields": [{"name": "id", "type": "string"}]}
V2 = {"type": "record", "name": "E", "fields": [{"name": "id", "type": "string"},
                                                 {"name": "n", "type": ["null", "int"], "default": None}]}


_load = load_value_config


@pytest.mark.parametrize("value, topics, message", [
    ({"format": "confluent-avro"}, ["events"], "format 'confluent-avro' needs 'schema_registry'"),
    ({"format": "avro"}, ["events"], "format 'avro' needs 'avro_schema'"),
    ({"format": "avro", "avro_schema": "missing.avsc"}, ["events"], "cannot read the Avro schema file .*missing.avsc"),
    ({"format": "avro", "avro_schema": '{"type": "string"}'}, ["events"], "top level must be a record"),
    ({"format": "avro", "avro_schema": json.dumps({**V1, "fields": [{"name": "value", "type": "string"}]})},
     ["events"], "has field\\(s\\) value named like the job's own columns"),
    ({"format": "avro", "avro_schema": json.dumps(V1), "required": ["n"]}, ["events"],
     "value: 'required' names field\\(s\\) n that avro_schema does not have"),
    ({"format": "raw", "avro_schema": json.dumps(V1)}, ["events"], "format 'raw' takes no 'avro_schema'"),
    ({"format": "json", "schema": "id STRING", "schema_registry": {}}, ["events"],
     "format 'json' takes no 'schema_registry'"),
    ({"format": "confluent-avro", "schema_registry": {}}, ["a", "b"], "value.schema_registry.subject is needed"),
    ({"format": "confluent-avro", "schema_registry": {"version": 0}}, ["a"], "a subject version is a number from 1"),
    ({"format": "confluent-avro", "schema_registry": {}, "schema_id": "trailer"}, ["a"], "schema_id"),
])
def test_avro_settings_that_cannot_work_fail_at_config_load_naming_the_field(tmp_path, value, topics, message):
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, value, topics)


def test_a_key_format_adds_a_key_column_that_the_value_must_not_have(tmp_path):
    from offsetbatch.config import load_config

    path = tmp_path / "p.yaml"
    base = {"name": "p", "kafka": {"topics": ["a", "b"]}, "sink": {"path": str(tmp_path / "t")}}
    path.write_text(yaml.safe_dump({**base, "value": {"format": "json", "schema": "key STRING"},
                                    "key": {"format": "json", "schema": "k STRING"}}))
    with pytest.raises(ConfigError, match="key.format 'json' adds the column 'key', which the value already has"):
        load_config(path)
    path.write_text(yaml.safe_dump({**base, "key": {"format": "confluent-avro", "schema_registry": {}}}))
    with pytest.raises(ConfigError, match="key.schema_registry.subject is needed .*'<topic>-key'"):
        load_config(path)


def test_an_avsc_file_is_read_relative_to_the_pipeline_file_and_gives_the_columns(tmp_path):
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "e.avsc").write_text(json.dumps(V2))
    cfg = _load(tmp_path, {"format": "avro", "avro_schema": "schemas/e.avsc", "required": ["id"]})
    assert AvroFormat.output_columns(cfg.value, cfg.base_dir)[-2:] == ["id", "n"]
    schemas = batch_schemas.resolve(Pipeline(cfg))
    assert schemas.reader == json.dumps(V2) and list(schemas.writers) == ["0"] and schemas.registry is None


@pytest.fixture
def registry():
    with SchemaRegistryServer() as server:
        yield server


def _client(server):
    return lambda: SchemaRegistry(RegistrySettings.from_fields("sr", server.url))


def test_latest_is_pinned_and_writers_registered_after_the_first_look_are_added(tmp_path, registry):
    registry.register("events-value", json.dumps(V1))
    cfg = _load(tmp_path, {"format": "confluent-avro", "schema_registry": {"conn_id": "sr"}})
    first = batch_schemas.resolve(Pipeline(cfg), registry=_client(registry))
    assert first.reader_from == {"subject": "events-value", "version": 1, "id": 1} and list(first.writers) == ["1"]
    registry.register("events-value", json.dumps(V2))
    again = batch_schemas.refreshed(Pipeline(cfg), first, registry=_client(registry))
    assert again.reader == first.reader and sorted(again.writers) == ["1", "2"]  # the reader stays pinned
    assert again.writers["2"]["incompatible"] is None and again.writers["2"]["all_null"] is None  # id cannot be null
    assert again.recorded()["writer_ids"] == [1, 2]
    assert "reader subject events-value version 1 (id 1); 2 writer schema(s) (ids 1, 2)" in again.describe()


def test_writers_the_job_cannot_decode_are_kept_with_the_reason(tmp_path, registry):
    registry.register("events-value", json.dumps(V1))
    registry.register("events-value", json.dumps({"type": "object"}), schema_type="JSON")
    registry.register("events-value", json.dumps(V2), references=[{"name": "x.Y", "subject": "y", "version": 1}])
    cfg = _load(tmp_path, {"format": "confluent-avro", "schema_registry": {"conn_id": "sr", "version": 1}})
    writers = batch_schemas.resolve(Pipeline(cfg), registry=_client(registry)).writers
    assert writers["2"]["incompatible"] == "it is a JSON schema, not Avro"
    assert writers["3"]["incompatible"].startswith("it imports named types from other subjects (references: y v1)")


def test_a_reader_with_a_field_named_like_a_job_column_is_refused_before_the_ledger(tmp_path, registry):
    registry.register("events-value", json.dumps({**V1, "fields": [{"name": "kafka_offset", "type": "long"}]}))
    cfg = _load(tmp_path, {"format": "confluent-avro", "schema_registry": {"conn_id": "sr"}})
    with pytest.raises(ConfigError, match="pipeline p: the value reader schema subject 'events-value' version 1 has "
                                          "field\\(s\\) kafka_offset named like the job's own columns"):
        batch_schemas.resolve(Pipeline(cfg), registry=_client(registry))


def test_a_recursive_reader_is_refused_at_the_plan_naming_the_loop(tmp_path, registry):
    """Spark's from_avro refuses a recursive schema when the job starts: it used to fail there as
    "value.schema None is not a Spark schema", retried (issue 41, case 15)."""
    from offsetbatch.dag.retry_policy import is_permanent

    node = {"type": "record", "name": "Event", "namespace": "shop", "fields": [
        {"name": "event_id", "type": "string"}, {"name": "kind", "type": "string"},
        {"name": "parent", "type": ["null", "Event"], "default": None}]}
    registry.register("events-value", json.dumps(node))
    cfg = _load(tmp_path, {"format": "confluent-avro", "schema_registry": {"conn_id": "sr"}})
    with pytest.raises(ConfigError, match="pipeline p: the value reader schema subject 'events-value' version 1 is "
                                          "recursive \\(record 'shop.Event' contains itself through field parent\\): "
                                          "Spark's from_avro cannot read a recursive schema") as info:
        batch_schemas.resolve(Pipeline(cfg), registry=_client(registry))
    assert is_permanent(info.value)


def test_an_unknown_subject_names_it_and_says_no_retry_helps(tmp_path, registry):
    cfg = _load(tmp_path, {"format": "confluent-avro", "schema_registry": {"conn_id": "sr", "subject": "nope"}})
    with pytest.raises(Exception, match="the latest version of subject 'nope' is not there .*needed by pipeline p "
                                        "\\(value.schema_registry: its reader schema\\).*No retry fixes this"):
        batch_schemas.resolve(Pipeline(cfg), registry=_client(registry))


def test_an_avro_pipeline_needs_spark_avro_in_a_provided_jar_folder(tmp_path, monkeypatch):
    folder = tmp_path / "jars"
    folder.mkdir()
    for name in spark_jars.CONNECTOR:
        fake_jar(folder / f"{name}-1.0.jar")
    monkeypatch.setenv(spark_jars.ENV, str(folder))
    assert len(spark_jars.job_jars("/t", "json")) == 4
    with pytest.raises(ArtifactError, match=r"has no jar of spark-avro_2.13 \(the Spark jars of value format "
                                            r"'confluent-avro', which this pipeline parses with\)"):
        spark_jars.job_jars("/t", "json", "confluent-avro")  # an Avro key needs it too
    fake_jar(folder / "spark-avro_2.13-4.2.0.jar")
    assert len(spark_jars.job_jars("/t", "avro")) == 5


def test_a_jar_that_is_not_an_archive_is_refused_naming_it(tmp_path, monkeypatch):
    """A zero-byte connector jar used to pass the name check and fail in Spark as "Failed to find
    data source: kafka", retried (issue 41, case 15)."""
    folder = tmp_path / "jars"
    folder.mkdir()
    for name in spark_jars.CONNECTOR:
        fake_jar(folder / f"{name}-1.0.jar")
    (folder / "kafka-clients-1.0.jar").write_bytes(b"")
    monkeypatch.setenv(spark_jars.ENV, str(folder))
    from offsetbatch.dag.retry_policy import is_permanent

    with pytest.raises(ArtifactError, match=r"kafka-clients-1.0.jar \(0 bytes\) is not a jar \(not a zip archive") as info:
        spark_jars.job_jars("/t", "json")
    assert is_permanent(info.value)  # the task fails at once, without retries
