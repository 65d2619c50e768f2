"""Airflow connections the pipelines name, read through Airflow's own lookup (environment
variables here): a missing one, or one whose extra is not JSON, is a ConfigError naming the
connection and the field, so the task fails at once instead of retrying or running without the
extra's settings."""

from __future__ import annotations

import json

import pytest

from offsetbatch.connections import get_connection
from offsetbatch.errors import ConfigError
from offsetbatch.ledger.engine import url_from_connection
from offsetbatch.source.connection import from_connection


def test_a_defined_connection_is_returned(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_GOOD_KAFKA", json.dumps({"conn_type": "kafka",
                                                              "extra": {"bootstrap.servers": "b1:9092,b2:9092"}}))
    assert get_connection("good_kafka", "kafka.conn_id").extra_dejson == {"bootstrap.servers": "b1:9092,b2:9092"}
    assert from_connection("good_kafka").bootstrap == "b1:9092,b2:9092"


@pytest.mark.parametrize("read, field", [(lambda: from_connection("no_such_kafka"), "kafka.conn_id"),
                                         (lambda: from_connection("no_such_kafka", "sink.conn_id"), "sink.conn_id"),
                                         (lambda: url_from_connection("no_such_kafka"), "ledger.conn_id")])
def test_an_undefined_connection_names_itself_and_the_field(read, field):
    with pytest.raises(ConfigError, match=rf"^{field}: Airflow connection 'no_such_kafka' is not defined\. Define it "
                                          rf"\(the Airflow UI, AIRFLOW_CONN_NO_SUCH_KAFKA as JSON, or your secrets "
                                          rf"backend\), or fix {field}\.$"):
        read()


@pytest.mark.parametrize("extra, says", [('{"security.protocol": "SASL_SSL",', "is not valid JSON"),
                                         ('["SASL_SSL"]', "must be a JSON object, got list")])
def test_an_extra_that_is_not_a_json_object_is_refused_not_dropped(monkeypatch, extra, says):
    """Airflow itself logs the parse error and returns {}: a SASL_SSL connection would become PLAINTEXT."""
    monkeypatch.setenv("AIRFLOW_CONN_BROKEN_EXTRA", json.dumps({"conn_type": "kafka", "extra": extra}))
    with pytest.raises(ConfigError, match=f"^kafka.conn_id: the extra of Airflow connection 'broken_extra' {says}"):
        from_connection("broken_extra")
