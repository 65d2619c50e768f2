"""Pipeline configs: the shipped ones load; bad ones fail naming the file and the field."""

from __future__ import annotations

import pytest
import yaml

from offsetbatch.config import ConfigError, load_config
from offsetbatch.config.installed import load_all

GOOD = {
    "name": "orders",
    "kafka": {"topics": ["orders"]},
    "value": {"format": "json", "schema": "id STRING, amount DECIMAL(10,2), tags ARRAY<STRING>", "required": ["id"]},
    "sink": {"path": "/data/orders"},
}


def _write(tmp_path, doc) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc) if isinstance(doc, dict) else doc)
    return str(path)


def test_shipped_configs_load():
    configs = load_all()
    assert "sample_events" in configs
    assert configs["sample_events"].sink.path.endswith("/tables/sample_events")


def test_defaults(tmp_path):
    cfg = load_config(_write(tmp_path, GOOD))
    assert cfg.starting_policy == "earliest" and cfg.on_data_loss == "fail"
    assert cfg.dag_id == "offsetbatch_orders" and cfg.group_id == "offsetbatch.orders"
    assert cfg.airflow.schedule == "0 * * * *"


@pytest.mark.parametrize("change, field, message", [
    ({"kafka": {"topics": ["a"], "pattern": "a.*"}}, "kafka", "exactly one of 'topics'"),
    ({"kafka": {"pattern": "(unclosed"}}, "kafka", "not a valid regex"),
    ({"starting_policy": "yesterday"}, "starting_policy", "'earliest', 'latest' or an ISO-8601"),
    ({"starting_policy": "2026-01-01T00:00:00"}, "starting_policy", "needs a timezone"),
    ({"on_data_loss": "ignore"}, "on_data_loss", "'fail' or 'skip'"),
    ({"caps": {"max_records_per_batch": 0}}, "caps.max_records_per_batch", "greater than 0"),
    ({"value": {"format": "json"}}, "value", "needs a 'schema'"),
    ({"value": {"format": "json", "schema": "id STRING", "required": ["nope"]}}, "value", "not in the schema: nope"),
    ({"sink": {"path": "relative/dir"}}, "sink.path", "absolute path or a URI"),
    ({"transform": {"sql": "SELECT 1", "python": "m.f"}}, "transform", "not both"),
    ({"transform": {"sql": "SELEC event_id FRM records"}}, "transform.sql",
     "not valid Spark SQL: Invalid expression / Unexpected token at line 1, column 16, near 'FRM'"),
    ({"transform": {"sql": "SELECT event_id FROM events"}}, "transform.sql", "does not read the view 'records'"),
    ({"transform": {"python": "no_such_module_xyz.clean"}}, "transform.python",
     "cannot import module 'no_such_module_xyz' (ModuleNotFoundError: No module named 'no_such_module_xyz')"),
    ({"transform": {"python": "offsetbatch.formats.no_such_function"}}, "transform.python",
     "module 'offsetbatch.formats' (/"),
    ({"transform": {"python": "offsetbatch.formats.no_such_function"}}, "transform.python",
     "has no attribute 'no_such_function'"),
    ({"transform": {"python": "clean"}}, "transform.python", "must be a dotted path 'module.function'"),
    ({"value": {"format": "json", "schema": "id STRIN, n INT"}}, "value.schema",
     "not valid Spark DDL: Expecting ) at line 1, column 4, near 'STRIN'"),
    ({"value": {"format": "json", "schema": "id STRING, kafka_offset BIGINT"}}, "value.schema",
     "field 'kafka_offset' clashes with the column 'kafka_offset' the job adds"),
    ({"airflow": {"schedule": "every hour"}}, "airflow.schedule", "'every hour' is not a cron expression"),
    ({"airflow": {"schedule": "0 0 * * * *"}}, "airflow.schedule", "has 6 fields"),
    ({"name": "Bad-Name"}, "name", "should match pattern"),
    ({"colour": "blue"}, "colour", "Extra inputs are not permitted"),
])
def test_bad_fields_are_named(tmp_path, change, field, message):
    doc = {**GOOD, **change}
    path = _write(tmp_path, doc)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert path in text and f"field '{field}" in text and message in text, text


def test_missing_sink_is_named(tmp_path):
    path = _write(tmp_path, {k: v for k, v in GOOD.items() if k != "sink"})
    with pytest.raises(ConfigError, match="field 'sink': Field required"):
        load_config(path)


def test_unset_environment_variable_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("NOPE_ROOT", raising=False)
    path = _write(tmp_path, {**GOOD, "sink": {"path": "${NOPE_ROOT}/orders"}})
    with pytest.raises(ConfigError, match=r"\$\{NOPE_ROOT\} is not set"):
        load_config(path)


def test_not_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "name: [unclosed"))
