"""Job specs written by earlier versions still read: the task and the job may be a release apart
while a batch is in flight (a spec is written at plan time and read by every retry)."""

from __future__ import annotations

import json

from offsetbatch.jobspec import SPEC_VERSION, JobSpec


def test_a_version_2_job_spec_is_read_as_plaintext(tmp_path):
    uri = tmp_path / "spec.json"
    uri.write_text(json.dumps({"pipeline": "p", "batch_id": 1, "output_id": 1, "bootstrap": "b:1", "ranges": [],
                               "sink": {"path": "/t"}, "version": 2}))
    spec = JobSpec.load(str(uri))
    assert spec.kafka_options == {} and spec.value_schemas is None and spec.version == SPEC_VERSION


def test_a_version_4_job_spec_with_its_schema_header_is_read_as_the_values(tmp_path):
    """Version 4 named the Confluent header of what the format parses; version 5 says the role."""
    uri = tmp_path / "spec.json"
    uri.write_text(json.dumps({"pipeline": "p", "batch_id": 1, "output_id": 1, "bootstrap": "b:1", "ranges": [],
                               "sink": {"path": "/t"}, "value_format": "confluent-json", "schema_ddl": "id STRING",
                               "schema_header": "__value_schema_id", "key": {
                                   "format": "json", "schema_ddl": "k STRING", "required": [], "value_schemas": None,
                                   "schema_id": "auto"}, "version": 4}))
    spec = JobSpec.load(str(uri))
    assert spec.role == "value" and spec.value_options == {} and spec.key_view().role == "key"
    assert spec.key_view().value_options == {}
