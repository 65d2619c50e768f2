"""``offsetbatch_dev.check_helm_values``, the check of docs/kubernetes/airflow-values.yaml against a
chart's schema, on a small schema shaped like the Airflow chart's (open top level, ``$ref``
definitions, a free-form map): Helm's coalescing, schema errors, misspelled keys, and the exit code.
The chart itself is not in the repository (docs/architecture.md, *On Kubernetes*, says what the check
found against it)."""

from __future__ import annotations

import json

import yaml

from offsetbatch_dev.check_helm_values import EXIT_FOUND, EXIT_OK, coalesce, main, schema_errors, undescribed_keys

SCHEMA = {
    "type": "object",
    "properties": {
        "executor": {"type": "string", "enum": ["CeleryExecutor", "KubernetesExecutor"]},
        "workers": {"$ref": "#/definitions/workers"},
        "config": {"type": "object"},  # free-form: Airflow's own sections
        "env": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                                          "value": {"type": "string"}},
                                           "additionalProperties": False}},
    },
    "definitions": {"workers": {"type": "object", "properties": {"replicas": {"type": "integer"},
                                                                 "extraEnvFrom": {"type": ["string", "null"]}}}},
}
CHART_VALUES = {"executor": "CeleryExecutor", "workers": {"replicas": 1, "extraEnvFrom": None}, "config": {}}


def test_values_merge_into_the_charts_as_helm_coalesces_them():
    merged = coalesce({"workers": {"replicas": 3}, "config": {"celery": {"worker_concurrency": 4}}, "executor": None},
                      CHART_VALUES)
    assert merged == {"workers": {"replicas": 3, "extraEnvFrom": None}, "config": {"celery": {"worker_concurrency": 4}}}


def test_a_wrong_value_is_a_schema_error_and_a_misspelled_key_is_reported():
    values = {"executor": "LocalKubernetesExecutor", "workers": {"replicas": "3", "extraEnvfrom": "x"},
              "config": {"anything": {"goes": 1}}, "env": [{"name": "A", "value": "1"}], "dags": {}}
    errors = schema_errors(SCHEMA, values)
    assert any(e.startswith("executor:") for e in errors) and any(e.startswith("workers.replicas:") for e in errors)
    # `dags` is not a key of this schema, `extraEnvfrom` a misspelling under a $ref; `config` is free-form
    assert undescribed_keys(SCHEMA, values) == ["dags", "workers.extraEnvfrom"]


def test_the_command_exits_0_on_good_values_and_1_otherwise(tmp_path, capsys):
    schema, chart, good, bad = (tmp_path / n for n in ("values.schema.json", "values.yaml", "good.yaml", "bad.yaml"))
    schema.write_text(json.dumps(SCHEMA))
    chart.write_text(yaml.safe_dump(CHART_VALUES))
    good.write_text(yaml.safe_dump({"workers": {"replicas": 3}, "env": [{"name": "OFFSETBATCH_HOME", "value": "s3a://x"}]}))
    bad.write_text(yaml.safe_dump({"workers": {"replica": 3}}))
    assert main([str(schema), str(good), "--defaults", str(chart)]) == EXIT_OK
    assert main([str(schema), str(bad), "--defaults", str(chart)]) == EXIT_FOUND
    assert "workers.replica" in capsys.readouterr().out
