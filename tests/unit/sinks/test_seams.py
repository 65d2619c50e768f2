"""The extension seams: a sink or a value format is one module plus one registry line, and the
pipeline config validates whatever the registry holds (logic only; the integration suite runs the
files sink and both formats end to end)."""

from __future__ import annotations

import json

import pytest
import yaml

from offsetbatch import sinks
from offsetbatch.config import load_config
from offsetbatch.errors import ConfigError
from offsetbatch.formats import FORMATS
from offsetbatch.jobspec import Manifest
from offsetbatch.sinks import FilesSink, PublishesAfterLedgerCommit, Sink, StagedSettings, sink_for

BASE = {"name": "orders", "kafka": {"topics": ["orders"]},
        "value": {"format": "json", "schema": "id STRING"}, "sink": {"path": "/data/orders"}}


def _load(tmp_path, **change):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({**BASE, **change}))
    return load_config(path)


def test_files_is_the_default_sink(tmp_path):
    cfg = _load(tmp_path)
    assert cfg.sink.type == "files" and isinstance(sink_for(cfg.name, cfg.sink), FilesSink)


def test_an_unknown_sink_type_names_the_field_and_the_known_types(tmp_path):
    with pytest.raises(ConfigError, match=r"field 'sink': .*sink type 'warehouse' is not one of delta, files"):
        _load(tmp_path, sink={"type": "warehouse", "path": "/x"})


class _ArchiveSettings(StagedSettings):
    bucket: str


class _ArchiveSink(PublishesAfterLedgerCommit, Sink):
    """A stand-in sink: its own settings, nothing else (publication is the sink's business)."""

    type = "archive"
    Settings = _ArchiveSettings
    target = "archive"

    def asset_uri(self): return f"archive://{self.settings.bucket}"
    def publish(self, batch_id, output_id, attempt, superseded=(), kind=""): ...
    def retire(self, output_id): ...
    def published_ids(self): return []
    def read_committed(self, spark): ...
    def read_rejected(self, spark): ...


def test_a_registered_sink_gets_its_own_settings_validated(tmp_path, monkeypatch):
    monkeypatch.setitem(sinks.SINKS, "archive", _ArchiveSink)
    cfg = _load(tmp_path, sink={"type": "archive", "path": "/stage/orders", "bucket": "b1"})
    sink = sink_for(cfg.name, cfg.sink)
    assert isinstance(sink, _ArchiveSink) and sink.settings.bucket == "b1"
    # the job spec carries the settings as a plain mapping; the job rebuilds the same sink from it
    assert isinstance(sink_for(cfg.name, cfg.sink.model_dump()), _ArchiveSink)
    assert sink.staging.spec(4) == "/stage/orders/_offsetbatch/plans/batch_id=4.json"
    with pytest.raises(ConfigError, match=r"field 'sink.bucket': Field required"):
        _load(tmp_path, sink={"type": "archive", "path": "/stage/orders"})


def test_files_sink_knows_which_attempt_is_published(tmp_path):
    sink = FilesSink.at(str(tmp_path / "table"), "orders")
    staged = sink.layout.staging_manifest(3, "a1")
    Manifest("orders", 3, [], 0, 0, 0, 0, [], [], 0.1, "4.3.0", attempt="a1").save(staged)
    assert sink.published_manifests() == {}
    sink.publish(3, 3, "a1")
    assert {i: m.attempt for i, m in sink.published_manifests().items()} == {3: "a1"}
    assert sink.locations(3) == {"data": f"{tmp_path}/table/batch_id=3",
                                 "rejected": f"{tmp_path}/table/_rejected/batch_id=3",
                                 "manifest": f"{tmp_path}/table/_offsetbatch/manifests/batch_id=3.json"}
    sink.retire(3)
    assert sink.published_manifests() == {} and sink.published_ids() == []


def test_formats_are_a_registry_checked_at_config_load(tmp_path):
    assert set(FORMATS) == {"raw", "json", "confluent-json", "avro", "confluent-avro", "debezium", "debezium-avro",
                            "confluent-protobuf"}
    assert not FORMATS["json"].keeps_value and FORMATS["raw"].keeps_value
    with pytest.raises(ConfigError, match=r"field 'value.format': .*must be one of 'avro', 'confluent-avro', "
                                          r"'confluent-json', 'confluent-protobuf', 'debezium', 'debezium-avro', 'json', "
                                          r"'raw', got 'protobuf'"):
        _load(tmp_path, value={"format": "protobuf"})
    with pytest.raises(ConfigError, match=r"field 'value': .*format 'raw' takes no 'schema'"):
        _load(tmp_path, value={"format": "raw", "schema": "id STRING"})


def test_legacy_manifests_load_with_their_output_id(tmp_path):
    uri = str(tmp_path / "m.json")
    Manifest("orders", 7, [], 0, 0, 0, 0, [], [], 0.1, "4.3.0").save(uri)
    raw = json.loads((tmp_path / "m.json").read_text())
    raw["batch_id"] = raw.pop("output_id")
    del raw["attempt"]
    (tmp_path / "m.json").write_text(json.dumps(raw))
    assert Manifest.load(uri).output_id == 7


@pytest.mark.parametrize("sink", [{"type": "postgres", "table": "public.orders"},
                                  {"type": "kafka", "topic": "clean"},
                                  {"type": "iceberg", "namespace": "ns", "table": "t", "warehouse": "/wh",
                                   "catalog": "sqlite:////tmp/c.db"}])
def test_a_staged_sinks_staging_root_is_sink_staging_and_path_still_loads(tmp_path, sink):
    """The target (a table, a topic) and the staging root are two settings with two names; the
    staging root's name before 0.2, ``path``, loads the same."""
    ledger = {"url": "postgresql+psycopg2://u@localhost/db"} if sink["type"] == "postgres" else {}
    new = _load(tmp_path, sink={**sink, "staging": "/stage/orders"}, ledger=ledger)
    old = _load(tmp_path, sink={**sink, "path": "/stage/orders"}, ledger=ledger)
    assert new.sink == old.sink and new.sink.root == "/stage/orders" and "path" not in type(new.sink).model_fields
    assert sink_for(new.name, new.sink.model_dump()).settings.root == "/stage/orders"  # as the job spec carries it
    with pytest.raises(ConfigError, match=r"field 'sink.path': Extra inputs are not permitted"):
        _load(tmp_path, sink={**sink, "staging": "/stage/orders", "path": "/stage/other"}, ledger=ledger)
    with pytest.raises(ConfigError, match=r"field 'sink.staging': Value error, must be an absolute path or a URI"):
        _load(tmp_path, sink={**sink, "staging": "stage"}, ledger=ledger)


def test_the_files_sinks_table_is_its_path(tmp_path):
    cfg = _load(tmp_path)
    assert cfg.sink.path == cfg.sink.root == "/data/orders" and cfg.sink.with_root("/elsewhere").path == "/elsewhere"
    with pytest.raises(ConfigError, match=r"field 'sink.staging': Extra inputs are not permitted"):
        _load(tmp_path, sink={"path": "/data/orders", "staging": "/x"})
